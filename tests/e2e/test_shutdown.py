"""Shutdown a program controls: Ctrl+C and SIGTERM, a cancelled ``serve``,
and ``Node.aclose()`` all take the one graceful stop.

- ``docs/examples/serve_until_signal.py`` run as a real process: SIGINT or
  SIGTERM ends it with status 0, no traceback, and its WebSocket client gets
  close code 1001; a second Ctrl+C while it stops interrupts the stop (130).
- In-process: cancelling the scope around ``serve`` gives WebSocket clients
  1001 (not 1006), lets a request in flight commit its write, and ends within
  the grace; ``node.aclose()`` does the same and ``serve`` returns normally.
  (That a component's bug still ends ``serve`` at once, through the shielded
  stop, is ``tests/e2e/test_failures.py``'s.)

Test rules: loopback only, port 0, real sockets (so trio's mock clock cannot
drive them: each wait is bounded by a generous ``fail_after`` instead), and
waits on events (a frame, a log line, a handler reached), not sleeps.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed

from quart_mesh import MeshApp, Settings, create_app, serve
from quart_mesh.server import STOP_MARGIN
from tests.helpers import Mesh, User, connect, wait_for
from tests.stores import node_env
from tests.upstream import Upstream

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "serve_until_signal.py"
_LISTENING = re.compile(rb"listening on (http://\S+)")


class Example:
    """``docs/examples/serve_until_signal.py`` as a subprocess."""

    def __init__(self, data_dir: Path, **env: str) -> None:
        self.env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "MESH_DATA_DIR": str(data_dir),
            "MESH_PORT": "0",
            **node_env(data_dir),
            **env,
        }
        self.output = b""
        self._draining = False
        self._grew = trio.Event()

    async def start(self, nursery: trio.Nursery) -> str:
        self.process = await trio.lowlevel.open_process(
            [sys.executable, str(EXAMPLE)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        assert self.process.stdout is not None
        self._stdout = self.process.stdout
        url = await self.wait_for(_LISTENING, 30)
        self._draining = True
        nursery.start_soon(self._drain)
        return url.group(1).decode()

    async def wait_for(self, pattern: re.Pattern[bytes], seconds: float) -> re.Match[bytes]:
        """Wait until *pattern* appears in the output (read here until
        :meth:`start` has returned, then by the task that drains it)."""
        with trio.fail_after(seconds):
            while not (match := pattern.search(self.output)):
                if self._draining:
                    await self._grew.wait()
                    continue
                chunk = await self._stdout.receive_some(4096)
                assert chunk, f"exited early: {self.output.decode(errors='replace')}"
                self.output += chunk
        return match

    async def _drain(self) -> None:
        try:
            while chunk := await self._stdout.receive_some(4096):
                self.output += chunk
                self._grew.set()
                self._grew = trio.Event()
        except BaseException:
            # cancelled (the test failed): do not leave the node running
            if self.process.returncode is None:
                with trio.CancelScope(shield=True):
                    self.process.kill()
                    await self.process.wait()
            raise

    async def wait(self, seconds: float) -> int:
        with trio.fail_after(seconds):
            return await self.process.wait()


async def _closed_code(socket: Any, seconds: float = 10) -> int:
    """Read frames until the connection closes; its close code."""
    with trio.fail_after(seconds):
        try:
            while True:
                await socket.ws.get_message()
        except ConnectionClosed as closed:
            code: int = closed.reason.code
            return code


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
async def test_a_signal_stops_the_example_gracefully(
    signum: int, tmp_path: Path, nursery: trio.Nursery
) -> None:
    example = Example(tmp_path / "mesh-data")
    url = await example.start(nursery)
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        owner = await Mesh(http).setup()
        async with connect(url, owner) as socket:
            example.process.send_signal(signum)
            assert await _closed_code(socket) == 1001
    assert await example.wait(20) == 0
    name = signal.Signals(signum).name
    assert f"received {name}, shutting down".encode() in example.output
    assert b"Traceback" not in example.output
    assert example.output.rstrip().endswith(b"stopped")  # main() returned


async def test_a_second_ctrl_c_interrupts_the_stop(
    tmp_path: Path, nursery: trio.Nursery, upstream: Upstream
) -> None:
    # a model request whose upstream never answers (tests/upstream.py's
    # ``hang-model``) is in flight at the stop: it holds the stop for the
    # whole grace (5 s; its own deadline, MESH_MODEL_TIMEOUT, is far longer).
    # (Not a long poll: a stop answers those at once.)
    models = [
        {
            "name": "hang",
            "baseUrl": f"http://127.0.0.1:{upstream.port}/v1",
            "upstreamModel": "hang-model",
        }
    ]
    example = Example(
        tmp_path / "mesh-data", MESH_MODELS=json.dumps(models), MESH_MODEL_TIMEOUT="120"
    )
    url = await example.start(nursery)
    async with httpx.AsyncClient(base_url=url, timeout=90) as http:
        owner = await Mesh(http).setup()
        async with trio.open_nursery() as requests:

            async def complete() -> None:
                # cut by the interrupted process: no answer
                with pytest.raises(httpx.RemoteProtocolError):
                    await http.post(
                        "/api/models/v1/chat/completions",
                        json={"model": "hang", "messages": [{"role": "user", "content": "hi"}]},
                        headers=owner.headers,
                    )

            requests.start_soon(complete)

            async def forwarded() -> bool:
                # the node has sent it upstream: its handler waits for the answer
                return any(seen.path.endswith("/chat/completions") for seen in upstream.requests)

            await wait_for(forwarded)
            example.process.send_signal(signal.SIGINT)
            await example.wait_for(re.compile(rb"received SIGINT"), 10)
            example.process.send_signal(signal.SIGINT)
            # interrupted: a stop that ran its course would have exited 0
            assert await example.wait(20) == 130
    assert b"Traceback" not in example.output


@asynccontextmanager
async def _served(
    settings: Settings, nursery: trio.Nursery
) -> AsyncIterator[tuple[MeshApp, str, trio.CancelScope, trio.Event]]:
    """``serve`` in a task of *nursery* under a scope the test may cancel;
    the event is set once serve has ended (returned or raised)."""
    app = create_app(settings)
    scope = trio.CancelScope()
    ended = trio.Event()

    async def run(*, task_status: trio.TaskStatus[str]) -> None:
        try:
            with scope:
                await serve(app, port=0, task_status=task_status)
        finally:
            ended.set()

    url: str = await nursery.start(run)
    yield app, url, scope, ended


async def _setup(url: str) -> tuple[User, str]:
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        room_id = (await mesh.create_room(owner, "stop"))["roomId"]
    return owner, room_id


async def test_cancelling_serve_is_a_graceful_stop(tmp_path: Path, nursery: trio.Nursery) -> None:
    settings = Settings(data_dir=tmp_path / "mesh-data", graceful_timeout=5)
    async with _served(settings, nursery) as (app, url, scope, ended):
        owner, room_id = await _setup(url)
        # a send in flight when serve is cancelled: its handler held at the service
        reached, release = trio.Event(), trio.Event()
        send = app.node.messages.send

        async def held_send(*args: Any, **kwargs: Any) -> Any:
            reached.set()
            await release.wait()
            return await send(*args, **kwargs)

        app.node.messages.send = held_send  # type: ignore[method-assign]
        answer: list[httpx.Response] = []

        async def post() -> None:
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                answer.append(
                    await http.post(
                        f"/api/rooms/{room_id}/messages",
                        json={"content": "in flight at the stop"},
                        headers=owner.headers,
                    )
                )

        async with connect(url, owner) as socket, trio.open_nursery() as requests:
            requests.start_soon(post)
            with trio.fail_after(10):
                await reached.wait()
            stop_began = trio.current_time()
            scope.cancel()
            # clients are told the node is going away, not cut off (1006)
            assert await _closed_code(socket) == 1001
            release.set()
        assert answer[0].status_code == 201, answer[0].text
        with trio.fail_after(settings.graceful_timeout + STOP_MARGIN):
            await ended.wait()
        assert trio.current_time() - stop_began < settings.graceful_timeout + STOP_MARGIN
        assert scope.cancelled_caught  # serve re-raised Cancelled once stopped
        assert not app.has_node  # the node was closed with it

    # the write committed: a node served again on the data folder has it
    async with _served(settings, nursery) as (_, url, scope, ended):
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            contents = [m["content"] for m in await Mesh(http).messages(owner, room_id)]
        assert "in flight at the stop" in contents
        scope.cancel()
        with trio.fail_after(settings.graceful_timeout + STOP_MARGIN):
            await ended.wait()


async def test_node_aclose_stops_serve(tmp_path: Path, nursery: trio.Nursery) -> None:
    settings = Settings(data_dir=tmp_path / "mesh-data")
    async with _served(settings, nursery) as (app, url, scope, ended):
        node = app.node
        owner, room_id = await _setup(url)
        async with connect(url, owner) as socket:
            await socket.send(type="send_message", roomId=room_id, content="before aclose")
            await socket.expect("message", content="before aclose")
            with trio.fail_after(settings.graceful_timeout + STOP_MARGIN):
                await node.aclose()
                # returned once serve had stopped: ended, not cancelled
                assert ended.is_set()
            assert not scope.cancelled_caught
            assert await _closed_code(socket) == 1001
        assert not app.has_node
        with trio.fail_after(1):
            await node.aclose()  # again: harmless, returns at once

    # nothing serving it: returns at once; a node served again has the message
    async with _served(settings, nursery) as (app, url, scope, ended):
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            contents = [m["content"] for m in await Mesh(http).messages(owner, room_id)]
        assert contents[-1] == "before aclose"
        await app.node.aclose()
        assert ended.is_set()


async def test_aclose_without_serve_returns(tmp_path: Path) -> None:
    from quart_mesh import open_node

    async with open_node(Settings(data_dir=tmp_path / "mesh-data")) as node:
        with trio.fail_after(1):
            await node.aclose()
        assert node.accounts.setup_status()["initialized"] is False


async def test_cancelling_serve_stops_managed_bots(tmp_path: Path, nursery: trio.Nursery) -> None:
    from tests.e2e.test_agents import bot_pids

    settings = Settings(data_dir=tmp_path / "mesh-data")
    async with _served(settings, nursery) as (_, url, scope, ended):
        owner, room_id = await _setup(url)
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            body = {"name": "echo-bot", "type": "echo", "model": "none", "rooms": [room_id]}
            r = await http.post("/api/agents/spawn", json=body, headers=owner.headers)
            assert r.status_code == 201, r.text

            async def running() -> bool:
                agents = (await http.get("/api/agents", headers=owner.headers)).json()
                return [a["status"] for a in agents] == ["running"] and len(bot_pids(url)) == 1

            await wait_for(running)
        scope.cancel()
        with trio.fail_after(settings.graceful_timeout + STOP_MARGIN):
            await ended.wait()
        assert scope.cancelled_caught
        assert bot_pids(url) == []  # stopped with the node, not left behind
