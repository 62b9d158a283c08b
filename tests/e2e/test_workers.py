"""``quart-mesh serve --workers N``: one port, N node processes under one parent.

Real processes only: ``python -m quart_mesh serve`` started as an operator
starts it, its output read line by line. Several workers need PostgreSQL
(``pytest --store postgresql``); on SQLite they are refused at once.

Rules: loopback only, port 0; every wait is bounded by ``trio.fail_after``;
a test waits for a line of output or a process exit. The exceptions are
what nothing announces to the test: a worker's state after ``SIGSTOP``, and
the end of a worker that is not the test's child; both are polled in
``/proc`` (:func:`wait_state`), within a deadline.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio

from tests import stores

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

_LISTENING = re.compile(r"quart-mesh listening on (http://\S+)")
_WORKER = r"quart-mesh worker {n} \(pid (\d+)\) serving (http://\S+)"


def _serve(data_dir: Path, *args: str) -> list[str]:
    command = [sys.executable, "-m", "quart_mesh", "serve", "--port", "0"]
    return [*command, "--data-dir", str(data_dir), *args]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESH_")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


class Parent:
    """``quart-mesh serve --workers N`` running; its output (stdout and
    stderr, of the parent and of its workers) kept line by line."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self.exited = trio.Event()
        self._new_line = trio.Event()

    async def pump(self) -> None:
        assert self.process.stdout is not None
        buffer = b""
        async for chunk in self.process.stdout:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for raw in lines:
                self.lines.append(raw.decode(errors="replace"))
                self._new_line.set()
                self._new_line = trio.Event()
        await self.process.wait()
        self.exited.set()
        self._new_line.set()

    def log(self) -> str:
        return "\n".join(self.lines)

    async def wait_for(self, pattern: str, start: int = 0) -> tuple[re.Match[str], int]:
        """The first line from *start* on that matches, and the index after it."""
        while True:
            for index in range(start, len(self.lines)):
                if found := re.search(pattern, self.lines[index]):
                    return found, index + 1
            if self.exited.is_set():
                raise AssertionError(f"no line matching {pattern!r}:\n{self.log()}")
            await self._new_line.wait()


@asynccontextmanager
async def open_parent(data_dir: Path, workers: int, url: str) -> AsyncIterator[Parent]:
    process = await trio.lowlevel.open_process(
        _serve(data_dir, "--workers", str(workers)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=_env(MESH_DATABASE_URL=url),
    )
    parent = Parent(process)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(parent.pump)
        try:
            yield parent
        finally:
            with trio.CancelScope(shield=True), trio.fail_after(60):
                if process.returncode is None:
                    # SIGKILL of the parent: its workers see their control
                    # channel close and stop by themselves
                    process.kill()
                await parent.exited.wait()


def ppid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    raise AssertionError("no PPid")


def state(pid: int) -> str:
    # the field after "(comm)" in /proc/<pid>/stat
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


async def wait_state(pid: int, *states: str) -> None:
    """Until process *pid* is in one of *states* (``T`` stopped, ``Z`` ended;
    ``gone`` when reaped)."""
    with trio.fail_after(30):
        while True:
            try:
                now = state(pid)
            except FileNotFoundError:
                now = "gone"
            if now in states:
                return
            await trio.sleep(0.02)


async def all_succeed(url: str, count: int = 20) -> None:
    """*count* requests, each on a new connection (so any worker may take it)."""
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=20) as http:
        for _ in range(count):
            r = await http.get("/api/health")
            assert r.status_code == 200, r.text


# given no MESH_* settings (SQLite in either run), refused before any store: one run
@pytest.mark.store_free
async def test_several_workers_on_sqlite_are_refused(tmp_path: Path) -> None:
    data_dir = tmp_path / "mesh-data"
    for args, env in (
        (["--workers", "2"], {}),
        ([], {"MESH_WORKERS": "2"}),
    ):
        with trio.fail_after(30):
            result = await trio.run_process(
                _serve(data_dir, *args),
                capture_stdout=True,
                capture_stderr=True,
                env=_env(**env),
                check=False,
            )
        out = (result.stdout + result.stderr).decode(errors="replace")
        assert result.returncode == 2, out
        assert result.stderr.decode().strip() == (
            "quart-mesh: --workers 2 needs PostgreSQL (MESH_DATABASE_URL): "
            "a node on SQLite runs in one process only"
        ), out
        assert "listening on" not in out
    assert not data_dir.exists()  # refused before anything was touched


@pytest.mark.store_free  # refused while the settings are read, before any store
@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--workers", "0"], {}, "--workers must be between 1 and 256, not 0"),
        ([], {"MESH_WORKERS": "many"}, "MESH_WORKERS must be a number of processes, not 'many'"),
        ([], {"MESH_WORKERS": "257"}, "MESH_WORKERS must be between 1 and 256, not 257"),
    ],
)
async def test_a_bad_number_of_workers_is_bad_settings(
    tmp_path: Path, args: list[str], env: dict[str, str], message: str
) -> None:
    with trio.fail_after(30):
        result = await trio.run_process(
            _serve(tmp_path / "d", *args),
            capture_stdout=True,
            capture_stderr=True,
            env=_env(**env),
            check=False,
        )
    assert result.returncode == 2
    assert message in result.stderr.decode()


async def test_workers_share_the_port_restart_and_stop(tmp_path: Path) -> None:
    if stores.cluster is None:
        pytest.skip("several workers need PostgreSQL (--store postgresql)")
    data_dir = tmp_path / "mesh-data"
    async with open_parent(data_dir, 2, stores.cluster.url_for(data_dir)) as parent:
        with trio.fail_after(90):
            (listening, _) = await parent.wait_for(_LISTENING.pattern)
            url = listening.group(1)
            pids = {}
            for n in (1, 2):
                (found, _) = await parent.wait_for(_WORKER.format(n=n))
                pids[n] = int(found.group(1))
                assert found.group(2) == url
        # announced once, after both workers serve; two children of the parent
        assert sum("listening on" in line for line in parent.lines) == 1, parent.log()
        assert pids[1] != pids[2]
        assert {ppid(pids[1]), ppid(pids[2])} == {parent.process.pid}

        # each worker serves requests by itself: the other one is stopped
        for stopped in (2, 1):
            os.kill(pids[stopped], signal.SIGSTOP)
            try:
                await wait_state(pids[stopped], "T")
                with trio.fail_after(30):
                    await all_succeed(url)
            finally:
                os.kill(pids[stopped], signal.SIGCONT)

        # a worker killed outright is started again; the other one serves meanwhile
        mark = len(parent.lines)
        os.kill(pids[1], signal.SIGKILL)
        with trio.fail_after(60):
            (_, after) = await parent.wait_for(
                rf"worker 1 \(pid {pids[1]}\) was killed by SIGKILL; starting it again", mark
            )
            await all_succeed(url)
            (found, _) = await parent.wait_for(_WORKER.format(n=1), after)
        replacement = int(found.group(1))
        assert replacement not in pids.values()
        assert ppid(replacement) == parent.process.pid
        with trio.fail_after(30):
            await all_succeed(url)

        # SIGTERM: the workers stop gracefully, then the parent, with status 0
        parent.process.send_signal(signal.SIGTERM)
        with trio.fail_after(60):
            await parent.exited.wait()
        assert parent.process.returncode == 0, parent.log()
        for pid in (replacement, pids[2]):
            assert not Path(f"/proc/{pid}").exists(), parent.log()
        assert "received SIGTERM, stopping the workers" in parent.log()
        assert "Traceback" not in parent.log()
        assert parent.lines[-1].endswith("stopped"), parent.log()


async def test_workers_stop_when_the_parent_is_killed(tmp_path: Path) -> None:
    if stores.cluster is None:
        pytest.skip("several workers need PostgreSQL (--store postgresql)")
    data_dir = tmp_path / "mesh-data"
    async with open_parent(data_dir, 2, stores.cluster.url_for(data_dir)) as parent:
        with trio.fail_after(90):
            (listening, _) = await parent.wait_for(_LISTENING.pattern)
            pids = [int((await parent.wait_for(_WORKER.format(n=n)))[0].group(1)) for n in (1, 2)]
        parent.process.kill()
        with trio.fail_after(60):
            await parent.exited.wait()
            # the workers' output still reaches the pipe until they end
            for n, pid in enumerate(pids, 1):
                await parent.wait_for(rf"worker {n}: the parent process is gone, shutting down")
                await parent.wait_for(rf"worker {n} \(pid {pid}\) stopped")
        for pid in pids:
            await wait_state(pid, "Z", "gone")
        # the port is free again: nothing serves it
        with pytest.raises(httpx.ConnectError):
            await all_succeed(listening.group(1), 1)
