"""Test helpers: a small REST client for a node served on loopback.

Test rules (as trio-websocket writes them at the top of its tests):
loopback only, port 0, no sleeps to wait for state, a time cap on every test.

Waiting, in order of preference: for a frame (:meth:`Socket.expect`); for a
marker that comes after whatever must not have happened (:meth:`Socket.settle`,
or a later message a bot or receiver handles in order); only when nothing
announces the state, polling it with :func:`wait_for`.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import trio

from quart_mesh import Settings, create_app, serve
from quart_mesh.app import MeshApp
from tests import launcher

PASSWORD = "correct horse battery"


@dataclass
class User:
    participant_id: str
    name: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


class Mesh:
    """Thin wrapper over ``httpx.AsyncClient`` that speaks the node's REST API."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def setup(self, name: str = "owner", **extra: Any) -> User:
        body = {"name": name, "password": PASSWORD, "meshName": "Test Mesh", **extra}
        r = await self.http.post("/api/setup/init", json=body)
        assert r.status_code == 201, r.text
        return _user(r.json())

    async def register(self, name: str) -> User:
        r = await self.http.post("/api/auth/register", json={"name": name, "password": PASSWORD})
        assert r.status_code == 201, r.text
        return _user(r.json())

    async def guest(self) -> User:
        r = await self.http.post("/api/auth/guest")
        assert r.status_code == 201, r.text
        return _user(r.json())

    async def create_room(self, user: User, name: str, **extra: Any) -> dict[str, Any]:
        r = await self.http.post("/api/rooms", json={"name": name, **extra}, headers=user.headers)
        assert r.status_code == 201, r.text
        return dict(r.json())

    async def join(self, user: User, room_id: str) -> None:
        r = await self.http.post(f"/api/rooms/{room_id}/join", headers=user.headers)
        assert r.status_code == 200, r.text

    async def send(self, user: User, room_id: str, content: str, **extra: Any) -> dict[str, Any]:
        r = await self.http.post(
            f"/api/rooms/{room_id}/messages",
            json={"content": content, **extra},
            headers=user.headers,
        )
        assert r.status_code == 201, r.text
        return dict(r.json())

    async def messages(self, user: User, room_id: str, **params: Any) -> list[dict[str, Any]]:
        r = await self.http.get(
            f"/api/rooms/{room_id}/messages", params=params, headers=user.headers
        )
        assert r.status_code == 200, r.text
        return list(r.json())


class Changes:
    """State a test records and waits on: the recorder calls :meth:`note`
    after each change, and :meth:`until` checks its predicate at each (what
    :func:`wait_for` does by polling, for state nothing here announces)."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def note(self) -> None:
        self._event.set()
        self._event = trio.Event()

    async def until(self, done: Callable[[], bool], seconds: float = 30) -> None:
        """Wait until ``done()`` holds, checked now and at each change; fail
        after *seconds*."""
        with trio.fail_after(seconds):
            while not done():
                await self._event.wait()


async def wait_for(
    predicate: Callable[[], Awaitable[bool]], seconds: float = 20, interval: float = 0.05
) -> None:
    """Poll an async predicate until it is true; fail after *seconds*.

    For state nothing announces (another process's work, a count in the API).
    The one place a test sleeps to wait for state."""
    with trio.fail_after(seconds):
        while not await predicate():
            await trio.sleep(interval)


def _user(data: dict[str, Any]) -> User:
    assert set(data) >= {"participantId", "token", "name"}
    return User(data["participantId"], data["name"], data["token"])


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> None:
    """The response is a JSON error ``{"error", "code"}`` with *status* (and *code*)."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert isinstance(body.get("error"), str), body
    assert body["error"], body
    assert isinstance(body.get("code"), str), body
    assert body["code"], body
    if code is not None:
        assert body["code"] == code, body
    assert "Traceback" not in response.text


class Socket:
    """A real WebSocket client (trio-websocket) speaking the mesh protocol."""

    #: ``serverFrames`` of the WebSocket schema as a validator (made on first use)
    _schema: Any = None

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.seen: list[dict[str, Any]] = []
        self._markers = 0

    @classmethod
    def check(cls, frame: Any) -> None:
        """Every frame the node sends fits ``docs/websocket-frames.schema.json``."""
        if cls._schema is None:
            import jsonschema_rs

            from quart_mesh.realtime.frames import frames_schema

            document = frames_schema()
            schema = {**document["serverFrames"], "$defs": document["$defs"]}
            cls._schema = jsonschema_rs.Draft202012Validator(schema)
        errors = [f"{e.instance_path}: {e.message}" for e in cls._schema.iter_errors(frame)]
        assert not errors, f"a frame outside the WebSocket schema: {errors[:5]} in {frame}"

    async def send(self, **frame: Any) -> None:
        await self.ws.send_message(json.dumps(frame))

    async def send_raw(self, text: str | bytes) -> None:
        await self.ws.send_message(text)

    async def recv(self, timeout: float = 5) -> dict[str, Any]:
        with trio.fail_after(timeout):
            frame = json.loads(await self.ws.get_message())
        self.check(frame)
        self.seen.append(frame)
        return dict(frame)

    async def expect(self, type: str, timeout: float = 5, **match: Any) -> dict[str, Any]:
        """The next frame of *type* (whose fields equal *match*), skipping others."""
        return (await self.until(type, timeout, **match))[-1]

    async def until(self, type: str, timeout: float = 5, **match: Any) -> list[dict[str, Any]]:
        """Every frame up to and including the next one of *type* (fields *match*)."""
        frames = []
        with trio.fail_after(timeout):
            while True:
                frame = await self.recv(timeout)
                frames.append(frame)
                if frame["type"] == type and all(frame.get(k) == v for k, v in match.items()):
                    return frames

    async def settle(self, timeout: float = 5) -> list[dict[str, Any]]:
        """Every frame the node queued for this session before it read a marker.

        The marker is a frame of an unknown type, answered on this session
        alone with an ``unknown_type`` error. A session's frames go out in the
        order they were queued, so whatever the node published to this session
        before reading the marker arrives before its answer: a "nothing more
        arrived" check that waits for an event, not for time to pass. It does
        not cover what the node has yet to publish (a bot still answering, a
        send still being stored, another session's frames still unread): wait
        for a later event of that same source instead (or ``settle`` that
        session first). Returns the frames without the marker's answer.
        """
        self._markers += 1
        marker = f"marker-{self._markers}"
        await self.send(type=marker)
        return (await self.until("error", timeout, code="unknown_type", frame=marker))[:-1]

    async def quiet(self, seconds: float = 0.3) -> list[dict[str, Any]]:
        """Every frame that arrives within *seconds* (prefer :meth:`settle`)."""
        frames = []
        with trio.move_on_after(seconds):
            while True:
                frames.append(await self.recv(seconds + 1))
        return frames


@asynccontextmanager
async def connect(
    base_url: str, user: User | None = None, *, since: str | None = None
) -> AsyncIterator[Socket]:
    """Open ``/ws``; with *user*, authenticate and consume ``auth_ok`` and ``snapshot``."""
    async with open_client(base_url) as ws:
        socket = Socket(ws)
        if user is not None:
            frame: dict[str, Any] = {"type": "authenticate", "token": user.token}
            if since is not None:
                frame["since"] = since
            await socket.send(**frame)
            ok = await socket.recv()
            assert ok == {"type": "auth_ok", "participantId": user.participant_id}, ok
            snapshot = await socket.recv()
            assert snapshot["type"] == "snapshot", snapshot
            socket.snapshot = snapshot  # type: ignore[attr-defined]
        yield socket


def _answer_pings_only_while_open() -> None:
    """trio-websocket 0.12.2's reader answers every ping, even one that crosses
    the client's own close frame; wsproto refuses a pong in LOCAL_CLOSING and
    the reader raises that out of ``open_websocket`` (and cancels the block's
    body with it), python-trio/trio-websocket#184, open. RFC 6455 lets an
    endpoint that has sent Close stop answering, so the tests' clients do."""
    from trio_websocket._impl import WebSocketConnection
    from wsproto.connection import ConnectionState

    answer = WebSocketConnection._handle_ping_event

    async def handle_ping(self: WebSocketConnection, event: Any) -> None:
        if self._wsproto.state is ConnectionState.OPEN:
            await answer(self, event)

    WebSocketConnection._handle_ping_event = handle_ping  # type: ignore[method-assign]


_answer_pings_only_while_open()


@asynccontextmanager
async def open_client(base_url: str, **options: Any) -> AsyncIterator[Any]:
    """trio-websocket's client on ``/ws``, its TCP stream closed on exit.

    trio-websocket 0.12.2's client leaves its socket open when the server
    closes the TCP connection after the close handshake (its reader stops on
    EOF and ``aclose`` returns early), which shows up as a ResourceWarning.
    """
    from trio_websocket import open_websocket_url

    url = base_url.replace("http://", "ws://") + "/ws"
    client = None
    try:
        async with open_websocket_url(url, **options) as ws:
            client = ws
            yield ws
    finally:
        if client is not None:
            await client._stream.aclose()


async def cli(
    *args: str, stdin: bytes = b"", env: dict[str, str] | None = None, fresh: bool = False
) -> subprocess.CompletedProcess[bytes]:
    """``python -m quart_mesh ARGS`` as a real process, without this
    process's ``MESH_*`` settings (plus *env*); never raises on its status.

    Forked from a process that imported quart_mesh already
    (:mod:`tests.launcher`), or with *fresh* a new interpreter."""
    return await launcher.run(*args, stdin=stdin, env=env, fresh=fresh)


async def serve_on(data_dir: Path, nursery: trio.Nursery) -> str:
    """A node on *data_dir* served on loopback in *nursery*, the node's own
    server in front of hypercorn; its URL."""
    return await _serve_app(create_app(Settings(data_dir=data_dir)), nursery)


async def _serve_app(app: MeshApp, nursery: trio.Nursery) -> str:
    url: str = await nursery.start(lambda task_status: serve(app, port=0, task_status=task_status))
    return url


@asynccontextmanager
async def served(settings: Settings) -> AsyncIterator[tuple[str, MeshApp, httpx.AsyncClient]]:
    """The node on *settings* served on loopback, for the block: its URL,
    its app (``app.node`` while served) and a client of it."""
    async with trio.open_nursery() as nursery:
        app = create_app(settings)
        url = await _serve_app(app, nursery)
        async with httpx.AsyncClient(base_url=url, timeout=20) as http:
            yield url, app, http
        nursery.cancel_scope.cancel()
