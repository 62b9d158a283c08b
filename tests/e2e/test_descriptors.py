"""Open files over a served node (``docs/decisions/0079-descriptor-limits.md``).

``quart-mesh serve`` as a real process under a low ``ulimit -n`` (set in the
child by ``preexec_fn``), its output read line by line: it raises its soft
limit and says so; flooded with connections, it refuses those past
``max_fd_share`` cleanly (503 ``overloaded``), logs the ``descriptors``
fault once and its end once, never a traceback; with no reserve
(``MESH_MAX_FD_SHARE=1``) ``accept`` itself runs out (EMFILE) and that is
the same one fault. Either way it serves normally once the connections
close. And in-process, with a share so small every connection is past it:
the refusal's exact shapes (HTTP, WebSocket, a health probe).

Every wait is bounded (``trio.fail_after``) and waits for a line, an
answer or an end of stream.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed

from quart_mesh import Settings, create_app, serve
from tests.helpers import open_client

pytestmark = [pytest.mark.e2e, pytest.mark.store_free, pytest.mark.timeout(120)]

_LISTENING = re.compile(r"quart-mesh listening on (http://\S+)")
METRICS_TOKEN = "descriptors-test-token-0123456789"
#: the request every flooding connection starts and never finishes: held by
#: the node for ``request_head_timeout`` (set long) unless refused
PARTIAL_HEAD = b"GET /api/health HTTP/1.1\r\nHost: mesh\r\n"


def _limit(soft: int, hard: int) -> Callable[[], None]:
    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return preexec


class Node:
    """``quart-mesh serve`` running; its output (stdout and stderr) kept line by line."""

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

    def count(self, pattern: str) -> int:
        return sum(1 for line in self.lines if re.search(pattern, line))

    async def wait_for(self, pattern: str) -> re.Match[str]:
        while True:
            for line in self.lines:
                if found := re.search(pattern, line):
                    return found
            if self.exited.is_set():
                raise AssertionError(f"no line matching {pattern!r}:\n{self.log()}")
            await self._new_line.wait()


@asynccontextmanager
async def served(
    data_dir: Path, soft: int, hard: int, **env: str
) -> AsyncIterator[tuple[Node, str]]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MESH_")}
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "quart_mesh", "serve", "--port", "0", "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**environment, "PYTHONUNBUFFERED": "1", **env},
        preexec_fn=_limit(soft, hard),
    )
    node = Node(process)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(node.pump)
        try:
            with trio.fail_after(30):
                url = (await node.wait_for(_LISTENING.pattern))[1]
            yield node, url
        finally:
            with trio.CancelScope(shield=True), trio.fail_after(30):
                if process.returncode is None:
                    process.terminate()
                await node.exited.wait()


class Flood:
    """Connections that start a request and wait: what each got."""

    def __init__(self) -> None:
        self.refused = 0
        self.dropped = 0  # closed by the node unanswered: its head never came
        self.other: list[bytes] = []
        self.refusals = trio.Event()
        self.wanted = 0
        self.stop = trio.Event()

    async def one(self, port: int, opened: Callable[[], None]) -> None:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(PARTIAL_HEAD)
            opened()
            answer = b""
            ended = False
            async with trio.open_nursery() as nursery:

                async def read() -> None:
                    nonlocal answer, ended
                    # the node ends a refusal with EOF; a held connection gets nothing
                    while chunk := await stream.receive_some(65536):
                        answer += chunk
                    ended = True
                    nursery.cancel_scope.cancel()

                nursery.start_soon(read)
                await self.stop.wait()
                nursery.cancel_scope.cancel()
        if not answer:
            self.dropped += ended  # else held until the test closed it
            return
        if _is_overloaded(answer):
            self.refused += 1
            if self.refused >= self.wanted:
                self.refusals.set()
        else:
            self.other.append(answer)


def _is_overloaded(answer: bytes) -> bool:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    return (
        lines[0] == b"http/1.1 503 service unavailable"
        and b"retry-after: 1" in lines
        and b"connection: close" in lines
        and json.loads(body)["code"] == "overloaded"
    )


async def flood(port: int, n: int, wanted: int, nursery: trio.Nursery) -> Flood:
    """*n* connections, each opened once the one before has sent its head."""
    state = Flood()
    state.wanted = wanted
    for _ in range(n):
        sent = trio.Event()
        nursery.start_soon(state.one, port, sent.set)
        await sent.wait()
    return state


async def test_past_the_share_connections_are_refused_and_the_fault_logged_once(
    tmp_path: Path,
) -> None:
    async with served(
        tmp_path / "data",
        128,
        256,
        MESH_REQUEST_HEAD_TIMEOUT="60",
        MESH_METRICS_TOKEN=METRICS_TOKEN,
    ) as (node, url):
        assert node.count(r"INFO quart_mesh: open files: soft limit raised from 128 to 256$") == 1
        port = int(url.rsplit(":", 1)[1])
        # 0.9 of 256: past 230 open files connections are refused; the
        # connections that never finish their head are then given a second
        # for it, and closed unanswered when accepting pauses, so of 400,
        # some are refused, the others dropped or (the last ones) held
        async with trio.open_nursery() as nursery:
            with trio.fail_after(60):
                state = await flood(port, 400, 5, nursery)
                await state.refusals.wait()
                await node.wait_for(r"fault started: file descriptors ran out: \d+ files open")
                await trio.sleep(1.5)  # every one accepted so far has had its second
                state.stop.set()
        assert state.other == []
        assert state.refused >= 5
        assert state.dropped >= 100  # not held for request_head_timeout (a minute)
        with trio.fail_after(30):
            # the fault ends a second after the last refused connection, and
            # with it the node is ready again
            await node.wait_for("fault ended: file descriptors ran out")
            async with httpx.AsyncClient(base_url=url, timeout=10) as http:
                r = await http.get("/api/health")
                assert r.status_code == 200, r.text
                metrics = await http.get(
                    "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}
                )
        assert re.search(r"^mesh_fd_limit 256\.0$", metrics.text, re.M), metrics.text
        open_fds = re.search(r"^mesh_open_fds (\d+)\.0$", metrics.text, re.M)
        assert open_fds is not None, metrics.text
        assert 10 < int(open_fds[1]) < 100, metrics.text
    log = node.log()
    assert node.count("fault started: file descriptors ran out") == 1, log
    assert node.count("fault ended: file descriptors ran out") == 1, log
    assert node.count("fault goes on: file descriptors") <= 1, log
    for never in ("Traceback", "EMFILE", "accept returned"):
        assert never not in log, log


async def test_with_no_reserve_accept_runs_out_and_that_is_one_fault(tmp_path: Path) -> None:
    async with served(
        tmp_path / "data", 128, 128, MESH_REQUEST_HEAD_TIMEOUT="60", MESH_MAX_FD_SHARE="1"
    ) as (node, url):
        # soft = hard: nothing to raise, nothing said
        assert node.count("open files:") == 0, node.log()
        port = int(url.rsplit(":", 1)[1])
        async with trio.open_nursery() as nursery:
            with trio.fail_after(60):
                state = await flood(port, 200, 0, nursery)
                await node.wait_for(
                    r"ERROR quart_mesh.faults: fault started: file descriptors ran out:"
                    r" accept failed with EMFILE \(Too many open files\)"
                )
                state.stop.set()
        assert state.refused == 0
        assert state.other == []
        with trio.fail_after(30):
            # the fault ends a second after the last refused connection, and
            # with it the node is ready again
            await node.wait_for("fault ended: file descriptors ran out")
            async with httpx.AsyncClient(base_url=url, timeout=10) as http:
                r = await http.get("/api/health")
                assert r.status_code == 200, r.text
    log = node.log()
    assert node.count("fault started") == 1, log
    assert node.count("fault ended") == 1, log
    for never in ("Traceback", "accept returned"):
        assert never not in log, log


async def _idle(port: int, stop: trio.Event, dropped: list[int]) -> None:
    """A connection that sends nothing, opened again each time the node
    closes it (with or without an answer), until *stop*."""
    while not stop.is_set():
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
        except OSError:
            await trio.sleep(0.05)
            continue
        async with stream, trio.open_nursery() as nursery:

            async def read(stream: trio.SocketStream = stream) -> None:
                with contextlib.suppress(trio.BrokenResourceError):
                    while await stream.receive_some(65536):
                        pass
                dropped.append(1)
                nursery.cancel_scope.cancel()

            nursery.start_soon(read)
            await stop.wait()
            nursery.cancel_scope.cancel()


async def test_idle_connections_do_not_keep_the_node_from_answering_probes(
    tmp_path: Path,
) -> None:
    # 200 connections that never send a byte, reopened as soon as the node
    # closes them, against a limit of 128 and a head timeout of a minute:
    # under pressure their head timeout is a second, a pause closes them,
    # and a health probe is answered at once, not after the head timeout
    async with served(tmp_path / "data", 128, 128, MESH_REQUEST_HEAD_TIMEOUT="60") as (
        node,
        url,
    ):
        port = int(url.rsplit(":", 1)[1])
        stop = trio.Event()
        dropped: list[int] = []
        async with trio.open_nursery() as nursery:
            for _ in range(200):
                nursery.start_soon(_idle, port, stop, dropped)
            with trio.fail_after(30):
                await node.wait_for(r"fault started: file descriptors ran out: \d+ files open")
            await trio.sleep(1.5)  # past the first idle connections' short head timeout
            for _ in range(3):
                started = trio.current_time()
                with trio.fail_after(10):
                    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
                        probe = await http.get("/api/health/live")
                        # alive; and not ready while connections are refused
                        ready = await http.get("/api/health/ready")
                assert probe.status_code == 200, probe.text
                assert ready.status_code == 503, ready.text
                assert "descriptors_low" in {r["code"] for r in ready.json()["reasons"]}
                assert trio.current_time() - started < 2.0
                await trio.sleep(0.5)
            assert node.count("fault ended") == 0, node.log()  # still flooded
            assert len(dropped) > 200  # closed and opened again, not held for a minute
            stop.set()
        with trio.fail_after(30):
            await node.wait_for("fault ended: file descriptors ran out")
            async with httpx.AsyncClient(base_url=url, timeout=10) as http:
                r = await http.get("/api/health")
                assert r.status_code == 200, r.text
    log = node.log()
    assert node.count("fault started") == 1, log
    for never in ("Traceback", "EMFILE", "accept returned"):
        assert never not in log, log


@pytest.fixture
async def everything_refused(tmp_path: Path, nursery: trio.Nursery) -> str:
    """A node served in-process whose every connection is past the share."""
    app = create_app(Settings(data_dir=tmp_path / "data", max_fd_share=1e-9))
    url: str = await nursery.start(lambda task_status: serve(app, port=0, task_status=task_status))
    return url


async def test_the_refusals_shapes(everything_refused: str) -> None:
    url = everything_refused
    with trio.fail_after(20):
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            r = await http.post("/api/auth/login", json={"name": "x", "password": "y"})
            assert r.status_code == 503
            assert r.json() == {
                "error": "the node has too many connections open; try again shortly",
                "code": "overloaded",
            }
            assert (r.headers["retry-after"], r.headers["connection"]) == ("1", "close")
            probe = await http.get("/api/health/ready")
            # served by the app: not ready, since it refuses connections
            assert probe.status_code == 503, probe.text
            assert [r["code"] for r in probe.json()["reasons"]] == ["descriptors_low"]
            assert "x-request-id" in probe.headers  # the app answered it
            assert probe.headers["connection"] == "close"  # one request, not a keep-alive
        async with open_client(url) as ws:
            with pytest.raises(ConnectionClosed) as closed:
                await ws.get_message()
        assert closed.value.reason is not None
        assert (closed.value.reason.code, closed.value.reason.reason) == (1013, "overloaded")
