"""Stock hypercorn: ``hypercorn -k trio 'quart_mesh.asgi:create_asgi_app()'``,
run as an operator runs it (a subprocess, settings from ``MESH_*``), serves the
whole node — REST, the web client, and ``/ws`` through Quart's websocket route
driving the same protocol session — and a node that fails, or a second
process on the same SQLite data folder, ends the process instead of leaving
a zombie or two writers.

Rules: loopback only, port 0, every wait bounded by ``trio.fail_after``,
nothing waits for time to pass: the tests wait for a line of output, a frame,
or a process to exit. Behaviours of the adapter that need no separate
process run on hypercorn in-process (``hypercorn.trio.serve``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, ASGISendEvent, Scope
from trio_websocket import ConnectionClosed
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Request, TextMessage

from quart_mesh import Settings, create_app
from quart_mesh.asgi_guards import ASGIApp
from quart_mesh.data_folder import LOCK_FILE
from tests.helpers import Mesh, connect, open_client, wait_for
from tests.stores import node_env

pytestmark = pytest.mark.e2e

_RUNNING = re.compile(rb"Running on (http://\S+)")
_IN_USE = b"is in use by another quart-mesh process"
APP = "quart_mesh.asgi:create_asgi_app()"

#: hypercorn, with a bug injected (in the worker too: it imports this as __mp_main__)
_INJECT = textwrap.dedent(
    """
    import os
    import sys
    from quart_mesh.services.world import World

    async def broken(self):
        raise RuntimeError("injected bug")

    if os.environ["INJECT"] == "node":
        World.flush_reads = broken  # a part of the node: runs every second
    else:
        import quart_mesh.asgi

        create_app = quart_mesh.asgi.create_app

        def create_broken_app(*args, **kwargs):
            app = create_app(*args, **kwargs)

            @app.after_request
            async def start_broken(response):
                # a task in the app's nursery beside the node: at a request
                app.nursery.start_soon(broken, None)
                return response

            return app

        quart_mesh.asgi.create_app = create_broken_app

    if __name__ == "__main__":
        from hypercorn.__main__ import main

        sys.argv[0] = "hypercorn"
        sys.exit(main())
    """
)


class Process:
    """A server process; its output (stdout and stderr) collected as it runs."""

    def __init__(self, args: list[str], data_dir: Path, env: dict[str, str] | None = None) -> None:
        self.args = args
        self.data_dir = data_dir
        self.env = env or {}
        self.output = b""
        self._exited = trio.Event()
        self._more = trio.Event()

    @classmethod
    def hypercorn(cls, data_dir: Path, *options: str, inject: str | None = None) -> Process:
        program = ["-m", "hypercorn"]
        if inject is not None:
            script = data_dir.parent / "inject.py"
            script.write_text(_INJECT)
            program = [str(script)]
        args = [sys.executable, *program, "-k", "trio", "--bind", "127.0.0.1:0", *options, APP]
        return cls(args, data_dir, {"INJECT": inject} if inject else None)

    async def start(self, nursery: trio.Nursery) -> None:
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "MESH_DATA_DIR": str(self.data_dir),
            **node_env(self.data_dir),
            **self.env,
        }
        self.process = await trio.lowlevel.open_process(
            self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
        )
        nursery.start_soon(self._read)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        try:
            while chunk := await self.process.stdout.receive_some(4096):
                self.output += chunk
                self._more.set()
                self._more = trio.Event()
            await self.process.wait()
        finally:
            if self.process.returncode is None:  # the test failed: leave nothing running
                with trio.CancelScope(shield=True):
                    self.process.kill()
                    await self.process.wait()
            self._exited.set()
            self._more.set()

    async def url(self) -> str:
        """The address hypercorn reports once the app's startup is complete."""
        with trio.fail_after(30):
            while not (match := _RUNNING.search(self.output)):
                assert not self._exited.is_set(), self.text
                await self._more.wait()
        return match.group(1).decode()

    async def exit_status(self, seconds: float = 30) -> int:
        with trio.fail_after(seconds):
            await self._exited.wait()
        assert self.process.returncode is not None
        return self.process.returncode

    async def stop(self, signum: int = signal.SIGTERM) -> int:
        self.process.send_signal(signum)
        return await self.exit_status()

    @property
    def text(self) -> str:
        return self.output.decode(errors="replace")


async def _health(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        r = await http.get("/api/health")
        assert r.status_code == 200, r.text
        return dict(r.json())


async def test_stock_hypercorn_serves_the_whole_node(tmp_path: Path, nursery: trio.Nursery) -> None:
    server = Process.hypercorn(tmp_path / "mesh-data")
    await server.start(nursery)
    url = await server.url()
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        # the web client, with its Content-Security-Policy
        page = await http.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in page.headers["content-security-policy"]
        assert (await _health(url))["ok"] is True
        # /ws without an upgrade is an unknown path, as behind quart-mesh serve
        r = await http.get("/ws")
        assert r.status_code == 404
        assert r.json()["code"] == "not_found"

        mesh = Mesh(http)
        owner = await mesh.setup()
        bob = await mesh.register("bob")
        room_id = (await mesh.create_room(owner, "hyper"))["roomId"]
        await mesh.join(bob, room_id)

        with trio.fail_after(60):
            async with connect(url, bob) as ws:
                await ws.send(type="send_message", roomId=room_id, content="over quart")
                mine = await ws.expect("message", content="over quart")
                assert mine["senderId"] == bob.participant_id
                await mesh.send(owner, room_id, "over rest")
                live = await ws.expect("message", content="over rest")
                cursor = live["cursor"]
            missed = await mesh.send(owner, room_id, "while away")
            # resume: what was missed is replayed, nothing before it
            async with connect(url, bob, since=cursor) as ws:
                replayed = await ws.expect("message")
                assert replayed["messageId"] == missed["messageId"]
                assert replayed["content"] == "while away"
                assert await ws.settle() == []

            # a managed bot finds the node (its address learnt from the requests)
            # and speaks the protocol over the Quart route like any client
            spawn = {"name": "echo-bot", "type": "echo", "model": "none", "rooms": [room_id]}
            r = await http.post("/api/agents/spawn", json=spawn, headers=owner.headers)
            assert r.status_code == 201, r.text
            bot_id = r.json()["agentId"]

            async def bot_in_room() -> bool:
                room = (await http.get(f"/api/rooms/{room_id}", headers=owner.headers)).json()
                return bot_id in {m["participantId"] for m in room["members"]}

            await wait_for(bot_in_room)
            async with connect(url, bob) as ws:
                await ws.send(type="send_message", roomId=room_id, content="hello bot")
                reply = await ws.expect("message", timeout=20, content="echo: hello bot")
                assert reply["senderId"] == bot_id

            # a bad token: the error frame, then close 1008 with the code as reason
            async with open_client(url) as raw:
                await raw.send_message(json.dumps({"type": "authenticate", "token": "nope"}))
                error = json.loads(await raw.get_message())
                assert (error["type"], error["code"]) == ("error", "invalid_token")
                with pytest.raises(ConnectionClosed) as closed:
                    await raw.get_message()
                assert (closed.value.reason.code, closed.value.reason.reason) == (
                    1008,
                    "invalid_token",
                )
    assert await server.stop(signal.SIGTERM) == 0
    assert "Traceback" not in server.text, server.text


@pytest.mark.sqlite_only
async def test_a_second_process_on_the_same_sqlite_folder_is_refused(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    data_dir = tmp_path / "mesh-data"
    first = Process.hypercorn(data_dir)
    await first.start(nursery)
    url = await first.url()
    holder = (data_dir / LOCK_FILE).read_text().strip()

    serve = Process(
        [sys.executable, "-m", "quart_mesh", "serve", "--port", "0", "--data-dir", str(data_dir)],
        data_dir,
    )
    await serve.start(nursery)
    assert await serve.exit_status() == 1, serve.text
    assert _IN_USE + f" (pid {holder})".encode() in serve.output, serve.text
    assert b"a node runs in one process only" in serve.output

    # hypercorn serving in its own process (--workers 0) exits with the error
    second = Process.hypercorn(data_dir, "--workers", "0")
    await second.start(nursery)
    assert await second.exit_status() != 0, second.text
    assert _IN_USE in second.output, second.text
    assert b"cannot start the node" in second.output

    # the first goes on, untouched
    assert (await _health(url))["ok"] is True
    assert await first.stop() == 0


@pytest.mark.sqlite_only
async def test_two_hypercorn_workers_on_sqlite_stop_the_server(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """``--workers 2`` on SQLite: one worker takes the folder, the other fails
    at startup, and hypercorn stops them both. (hypercorn 0.18 then exits 0:
    its parent drops a worker's exit status, hypercorn #269.)"""
    server = Process.hypercorn(tmp_path / "mesh-data", "--workers", "2")
    await server.start(nursery)
    await server.exit_status()
    assert server.output.count(_IN_USE) >= 1, server.text
    assert b"cannot start the node" in server.output


@pytest.mark.parametrize("workers", ["0", "1"])
async def test_a_node_that_fails_ends_the_process(
    tmp_path: Path, nursery: trio.Nursery, workers: str
) -> None:
    """No zombie: the node dies of a bug while serving, the process logs it
    and ends. hypercorn swallows a lifespan's error and would go on serving;
    the app ends the worker with status 70 instead. With ``--workers 0``
    that is hypercorn's status; with a worker process, hypercorn 0.18's
    parent stops and exits 0 (hypercorn #269)."""
    server = Process.hypercorn(tmp_path / "mesh-data", "--workers", workers, inject="node")
    await server.start(nursery)
    await server.url()
    status = await server.exit_status()
    if workers == "0":
        assert status == 70, server.text
    assert "the node stopped because one of its parts failed" in server.text
    assert "RuntimeError: injected bug" in server.text


async def test_a_lifespan_that_dies_ends_the_process(tmp_path: Path, nursery: trio.Nursery) -> None:
    """Another task of the app's lifespan nursery fails: the node is cancelled
    with it, hypercorn logs the lifespan's error and would go on serving
    (500s); the process ends with status 70 after ``EXIT_GRACE``."""
    server = Process.hypercorn(tmp_path / "mesh-data", "--workers", "0", inject="lifespan")
    await server.start(nursery)
    url = await server.url()
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        await http.get("/api/health")  # a task it starts fails
    assert await server.exit_status() == 70, server.text
    assert "ASGI Framework Lifespan error" in server.text  # hypercorn's
    assert "the process went on serving without its node" in server.text


# in-process: the adapter's behaviours ----------------------------------------


@asynccontextmanager
async def served(
    tmp_path: Path, wrap: Callable[[ASGIApp], ASGIApp] | None = None, **settings: Any
) -> AsyncIterator[str]:
    """The app as ``create_asgi_app`` builds it, on hypercorn in this process
    (seen by hypercorn through *wrap*, if given)."""
    app = create_app(Settings(data_dir=tmp_path, **settings), websocket_route=True)
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.graceful_timeout = 1
    asgi: ASGIApp = app if wrap is None else wrap(app)
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(hypercorn_serve, asgi, config))
        yield binds[0]
        nursery.cancel_scope.cancel()


async def test_a_send_just_before_disconnecting_is_stored(tmp_path: Path) -> None:
    """The server cancels the route when the client goes; the session still
    stores what the client sent before it went, as on the node's transport."""
    with trio.fail_after(30):
        async with served(tmp_path) as url, httpx.AsyncClient(base_url=url, timeout=10) as http:
            mesh = Mesh(http)
            owner = await mesh.setup()
            room_id = (await mesh.create_room(owner, "last words"))["roomId"]
            async with open_client(url) as ws:
                auth = {"type": "authenticate", "token": owner.token}
                await ws.send_message(json.dumps(auth))
                assert json.loads(await ws.get_message())["type"] == "auth_ok"
                for n in range(20):
                    frame = {"type": "send_message", "roomId": room_id, "content": f"m{n}"}
                    await ws.send_message(json.dumps(frame))
            # gone without waiting for the echoes; every send is stored, in order

            async def all_stored() -> bool:
                return len(await mesh.messages(owner, room_id)) >= 20

            await wait_for(all_stored)
            stored = await mesh.messages(owner, room_id)
            assert [m["content"] for m in stored] == [f"m{n}" for n in range(20)]


async def test_frames_too_large_binary_and_bad_json(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with served(tmp_path, max_frame_bytes=1000) as url:
            async with httpx.AsyncClient(base_url=url, timeout=10) as http:
                owner = await Mesh(http).setup()
            async with connect(url, owner) as ws:
                await ws.send_raw("x" * 1001)
                assert (await ws.expect("error"))["code"] == "frame_too_large"
                await ws.send_raw(json.dumps({"type": "typing_nonsense"}).encode())
                assert (await ws.expect("error"))["code"] == "unknown_type"
                await ws.send_raw(b"\xff\xfe")
                assert (await ws.expect("error"))["code"] == "invalid_json"
                # the session goes on
                assert await ws.settle() == []


def _sends_fail_after(count: int) -> Callable[[ASGIApp], ASGIApp]:
    """A server whose WebSocket sends fail after the first *count* (ASGI lets
    a server raise on a send to a client that is going)."""

    def wrap(app: ASGIApp) -> ASGIApp:
        async def wrapped(
            scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
        ) -> None:
            sent = 0

            async def failing(message: ASGISendEvent) -> None:
                nonlocal sent
                if message["type"] == "websocket.send":
                    sent += 1
                    if sent > count:
                        raise OSError("injected: the client is going")
                await send(message)

            await app(scope, receive, failing if scope["type"] == "websocket" else send)

        return wrapped

    return wrap


async def test_sends_pipelined_before_a_close_are_stored_though_an_echo_fails(
    tmp_path: Path,
) -> None:
    """The client writes its sends and a close frame at once; sending to it
    fails at the third echo. Every send it made is still read and stored,
    in order."""
    n = 100
    with trio.fail_after(30):
        async with (
            served(tmp_path, wrap=_sends_fail_after(2 + 2)) as url,  # auth_ok, snapshot, 2 echoes
            httpx.AsyncClient(base_url=url, timeout=10) as http,
        ):
            mesh = Mesh(http)
            owner = await mesh.setup()
            room_id = (await mesh.create_room(owner, "echo fails"))["roomId"]
            host, port = url.removeprefix("http://").split(":")
            client = WSConnection(ConnectionType.CLIENT)
            async with await trio.open_tcp_stream(host, int(port)) as stream:
                await stream.send_all(client.send(Request(host=host, target="/ws")))
                while not any(isinstance(e, AcceptConnection) for e in client.events()):
                    client.receive_data(await stream.receive_some(65536))
                frames = [{"type": "authenticate", "token": owner.token}]
                frames += [
                    {"type": "send_message", "roomId": room_id, "content": f"m{i}"}
                    for i in range(n)
                ]
                data = [client.send(TextMessage(json.dumps(frame))) for frame in frames]
                data.append(client.send(CloseConnection(code=1000)))
                await stream.send_all(b"".join(data))
                # until the server answers the close frame (echoes may come before)
                closed = False
                while not closed and (received := await stream.receive_some(65536)):
                    client.receive_data(received)
                    closed = any(isinstance(e, CloseConnection) for e in client.events())

            async def all_stored() -> bool:
                return len(await mesh.messages(owner, room_id, limit=n)) >= n

            await wait_for(all_stored, seconds=10)
            stored = await mesh.messages(owner, room_id, limit=n)
            assert [m["content"] for m in stored] == [f"m{i}" for i in range(n)]
