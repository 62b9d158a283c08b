"""Several real node processes on one PostgreSQL database, as an operator
runs them: ``python -m quart_mesh serve`` subprocesses sharing a data folder
(secrets, node key, uploads) and a ``MESH_DATABASE_URL``, each on its own
loopback port.

These tests need a PostgreSQL server: they run with ``pytest --store
postgresql`` (the session's throwaway cluster, ``tests/stores.py``) and are
skipped on the SQLite run, where several processes on one store are refused.

Rules: every wait is bounded by ``trio.fail_after``; a test waits for a line
of output, a frame or a process exit, never for time to pass.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests import launcher, stores
from tests.helpers import Mesh, User

_LISTENING = re.compile(r"listening on (http://\S+)")


def database_url(data_dir: Path) -> str:
    """The database every process of a test's mesh on *data_dir* shares;
    skips the test when the suite is not on PostgreSQL."""
    if stores.cluster is None:
        pytest.skip("several processes serve one mesh on PostgreSQL only (--store postgresql)")
    return stores.cluster.url_for(data_dir)


@dataclass
class NodeProcess:
    """One ``quart-mesh serve`` process; its output is kept in :attr:`output`."""

    #: a :class:`trio.Process`, or the launcher's :class:`~tests.launcher.Process`
    process: Any
    url: str = ""
    output: list[str] = field(default_factory=list)
    exited: trio.Event = field(default_factory=trio.Event)

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    def kill(self) -> None:
        """``kill -9``: no clean-up of any kind."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)

    async def stop(self) -> None:
        """Kill it (if still running) and wait for its end and its output."""
        self.kill()
        with trio.fail_after(30):
            await self.exited.wait()
        if self.process.stdout is not None:
            await self.process.stdout.aclose()

    def log(self) -> str:
        return "".join(self.output)


async def _pump(node: NodeProcess, listening: trio.Event) -> None:
    assert node.process.stdout is not None
    buffer = b""
    async for chunk in node.process.stdout:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for raw in lines:
            line = raw.decode(errors="replace") + "\n"
            node.output.append(line)
            if not node.url and (found := _LISTENING.search(line)):
                node.url = found.group(1)
                listening.set()
    if buffer:
        node.output.append(buffer.decode(errors="replace"))
    await node.process.wait()
    node.exited.set()
    listening.set()


@asynccontextmanager
async def open_nodes(
    tmp_path: Path, count: int, *, env: dict[str, str] | None = None
) -> AsyncIterator[list[NodeProcess]]:
    """Start *count* node processes of one mesh (one data folder, one
    database) and yield them once each listens; killed on the way out."""
    data_dir = tmp_path / "mesh-data"
    url = database_url(data_dir)
    async with trio.open_nursery() as nursery:
        nodes: list[NodeProcess] = []
        try:
            for _ in range(count):
                nodes.append(await start_node(nursery, data_dir, url, env=env))
            yield nodes
        finally:
            with trio.CancelScope(shield=True):
                for node in nodes:
                    await node.stop()
            nursery.cancel_scope.cancel()


async def start_node(
    nursery: trio.Nursery, data_dir: Path, url: str, *, env: dict[str, str] | None = None
) -> NodeProcess:
    """Start one more node process of the mesh on *data_dir* / *url*."""
    environment = {
        **os.environ,
        "MESH_DATABASE_URL": url,
        "MESH_LOG_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    # forked by the launcher (tests/launcher.py): a process of its own, its
    # signals and exit status its own, without a new interpreter's imports
    process = await launcher.open_process(
        ["serve", "--port", "0", "--data-dir", str(data_dir)],
        env=environment,
        stderr=subprocess.STDOUT,
    )
    node = NodeProcess(process)
    listening = trio.Event()
    nursery.start_soon(_pump, node, listening)
    with trio.fail_after(60):
        await listening.wait()
    if not node.url:
        raise AssertionError(f"the node did not start:\n{node.log()}")
    return node


@asynccontextmanager
async def two_nodes(tmp_path: Path) -> AsyncIterator[tuple[Mesh, Mesh, list[NodeProcess]]]:
    """Two processes of one mesh, with a REST client of each."""
    async with (
        open_nodes(tmp_path, 2) as nodes,
        httpx.AsyncClient(base_url=nodes[0].url) as one,
        httpx.AsyncClient(base_url=nodes[1].url) as other,
    ):
        yield Mesh(one), Mesh(other), nodes


async def set_up_through(a: Mesh, b: Mesh) -> User:
    """Set the mesh up through *a*; the owner, once *b* knows it is set up
    (within 10 s)."""
    owner = await a.setup()
    with trio.fail_after(10):
        while not (await b.http.get("/api/setup/status")).json()["initialized"]:
            await trio.sleep(0.05)
    return owner
