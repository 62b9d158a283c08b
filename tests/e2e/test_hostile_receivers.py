"""Webhook receivers and federation peers that answer what no parser should
be made to choke on, over a node served for real on a loopback port.

Whatever a remote sends (an answer nested 60,000 levels deep, a URL whose
name cannot be looked up) is the remote's failure, never the node's: the
node keeps serving, the delivery or relay goes on (or is retried), and a
client is told 4xx/502, never 500. Before these were caught, such an answer
ended the node, and since the delivery cursor had not moved, again on every
restart.

The hostile remotes are real TCP servers on loopback (:class:`Hostile`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import h11
import httpx
import pytest
import sqlalchemy as sa
import trio

from quart_mesh import MeshApp, Settings, create_app, serve
from quart_mesh.identity import load_or_create_node_identity
from quart_mesh.ids import new_id
from quart_mesh.records import now_ms
from quart_mesh.store import connections as connections_repo
from quart_mesh.store import relay as relay_repo
from quart_mesh.store.schema import agents as agents_table
from tests.helpers import Mesh, User, assert_error, wait_for
from tests.receiver import Request, read_request

pytestmark = pytest.mark.timeout(60)

#: deeper than any JSON parser will go: json.loads raises RecursionError
DEEP = b"[" * 60_000
#: a DNS label of 64 characters (63 is the most): IDNA encoding fails
LONG_LABEL = "a" * 64


def _response(status: int, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class Hostile:
    """Answers each request with the raw bytes ``answer(request)`` gives,
    and keeps the requests."""

    def __init__(self, answer: Callable[[Request], bytes]) -> None:
        self.answer = answer
        self.requests: list[Request] = []
        self.port = 0

    async def start(self, nursery: trio.Nursery) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, self._connection, listeners)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _connection(self, stream: trio.SocketStream) -> None:
        async with stream:
            request = await read_request(stream, h11.Connection(h11.SERVER))
            if request is None:
                return
            self.requests.append(request)
            await stream.send_all(self.answer(request))


@dataclass
class Served:
    app: MeshApp
    url: str
    mesh: Mesh
    owner: User

    @property
    def http(self) -> httpx.AsyncClient:
        return self.mesh.http

    async def healthy(self) -> None:
        r = await self.http.get("/api/health")
        assert (r.status_code, r.json()["ok"]) == (200, True), r.text
        r = await self.http.get("/api/rooms", headers=self.owner.headers)
        assert r.status_code == 200, r.text


@asynccontextmanager
async def served(tmp_path: Path, **settings: Any) -> AsyncIterator[Served]:
    """A node served in-process (a part that fails fails the test with its
    error), set up with an owner; stopped on the way out."""
    app = create_app(Settings(data_dir=tmp_path / "mesh-data", **settings))
    async with trio.open_nursery() as nursery:
        url: str = await nursery.start(partial(serve, app, port=0))
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            mesh = Mesh(http)
            yield Served(app, url, mesh, await mesh.setup())
        nursery.cancel_scope.cancel()


async def webhook_bot(node: Served, url: str) -> User:
    r = await node.http.post(
        "/api/agents/bootstrap",
        json={"name": "hook", "type": "webhook", "webhookUrl": url},
        headers=node.owner.headers,
    )
    assert r.status_code == 201, r.text
    body = r.json()
    return User(body["agentId"], "hook", body["token"])


async def webhook_state(node: Served, agent_id: str) -> dict[str, Any]:
    agents = (await node.http.get("/api/agents", headers=node.owner.headers)).json()
    return dict(next(a for a in agents if a["agentId"] == agent_id)["webhook"])


# -- webhook receivers ---------------------------------------------------------


async def test_a_receiver_answering_deeply_nested_json_does_not_stop_the_node(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    receiver = Hostile(lambda _: _response(200, DEEP))
    await receiver.start(nursery)
    async with served(tmp_path) as node:
        bot = await webhook_bot(node, f"{receiver.url}/hook")
        room_id = (await node.mesh.create_room(node.owner, "deep"))["roomId"]
        await node.mesh.join(bot, room_id)
        first = await node.mesh.send(node.owner, room_id, "one")
        second = await node.mesh.send(node.owner, room_id, "two")

        async def both_delivered() -> bool:
            state = await webhook_state(node, bot.participant_id)
            return bool(state["status"] == "idle" and state["delivered"] >= 2)

        await wait_for(both_delivered)
        # each delivered once, in order; the answer is no usable reply
        ids = [q.headers["x-mesh-delivery"] for q in receiver.requests]
        assert ids == [first["messageId"], second["messageId"]]
        state = await webhook_state(node, bot.participant_id)
        assert (state["delivered"], state["rejected"], state["failedAttempts"]) == (2, 0, 0)
        contents = [m["content"] for m in await node.mesh.messages(node.owner, room_id)]
        assert contents == ["one", "two"]
        await node.healthy()


async def test_a_webhook_url_with_a_label_too_long_is_refused_at_bootstrap(
    tmp_path: Path,
) -> None:
    async with served(tmp_path) as node:
        for url in (
            f"http://{LONG_LABEL}.example.com/hook",
            f"https://hooks.{LONG_LABEL}.example/",
            "http://a..example.com/hook",
            f"http://{'ü' * 64}.example/hook",
        ):
            r = await node.http.post(
                "/api/agents/bootstrap",
                json={"name": "badhook", "type": "webhook", "webhookUrl": url},
                headers=node.owner.headers,
            )
            assert_error(r, 400, "invalid_url")
        # a name of 63 characters is a name
        await webhook_bot(node, f"http://{'a' * 63}.example.com/hook")
        await node.healthy()


@pytest.mark.parametrize("private_ok", [True, False], ids=["admin", "public-only"])
async def test_a_stored_webhook_url_that_cannot_be_looked_up_is_retried(
    tmp_path: Path, nursery: trio.Nursery, private_ok: bool
) -> None:
    """A bot registered before the check (its URL in the store): deliveries
    to it fail and are retried like a receiver that is down; the node serves
    on, and the bot's state says why."""
    receiver = Hostile(lambda _: _response(200, b""))
    await receiver.start(nursery)
    async with served(tmp_path, webhook_max_backoff=0.3) as node:
        bot = await webhook_bot(node, f"{receiver.url}/hook")
        bad = f"http://{LONG_LABEL}.example.com/hook"

        def corrupt(conn: sa.Connection) -> None:
            conn.execute(
                sa.update(agents_table)
                .where(agents_table.c.agent_id == bot.participant_id)
                .values(webhook_url=bad, webhook_private_ok=private_ok)
            )

        await node.app.node.db.write(corrupt)
        room_id = (await node.mesh.create_room(node.owner, "nowhere"))["roomId"]
        await node.mesh.join(bot, room_id)
        await node.mesh.send(node.owner, room_id, "lost?")

        async def retrying() -> bool:
            state = await webhook_state(node, bot.participant_id)
            return bool(state["status"] == "retrying" and state["failedAttempts"] >= 2)

        await wait_for(retrying)
        state = await webhook_state(node, bot.participant_id)
        assert state["delivered"] == 0
        assert "idna" in state["lastError"], state
        assert receiver.requests == []
        await node.healthy()


# -- federation peers (loopback servers: a lab, outbound_allow_private) ---------


async def test_a_connection_request_to_a_name_that_cannot_be_looked_up_is_refused(
    tmp_path: Path,
) -> None:
    async with served(tmp_path) as node:
        for url in (f"http://{LONG_LABEL}.example.com", "http://peer..example.com:8000"):
            r = await node.http.post(
                "/api/connections/request", json={"url": url}, headers=node.owner.headers
            )
            # refused as a bad URL before anything is sent; never a 500
            assert (r.status_code, r.json()["code"]) == (400, "invalid_url"), r.text
        await node.healthy()


@pytest.mark.parametrize("where", ["manifest", "refusal"])
async def test_a_peer_answering_deeply_nested_json_is_a_peer_error(
    tmp_path: Path, nursery: trio.Nursery, where: str
) -> None:
    """A peer's manifest, or its refusal of the request, nested too deep to
    parse: the client is told the peer failed (502), not 500."""
    did = load_or_create_node_identity(tmp_path / "peer").did
    manifest = json.dumps({"did": did, "name": "deep"}).encode()

    def answer(request: Request) -> bytes:
        if where == "manifest":
            return _response(200, DEEP)
        return _response(200, manifest) if request.method == "GET" else _response(400, DEEP)

    peer = Hostile(answer)
    await peer.start(nursery)
    async with served(tmp_path, outbound_allow_private=True) as node:
        r = await node.http.post(
            "/api/connections/request", json={"url": peer.url}, headers=node.owner.headers
        )
        code = "peer_invalid" if where == "manifest" else "peer_refused"
        assert_error(r, 502, code)
        await node.healthy()


async def _accepted_link(node: Served, peer_url: str) -> tuple[str, str]:
    """A connection with the peer at *peer_url*, accepted, with a room
    shared over it (written to the store: the peer is not a real node), and
    its link started. Returns the connection and the room."""
    room_id = (await node.mesh.create_room(node.owner, "shared"))["roomId"]
    connection_id = new_id()
    did = load_or_create_node_identity(Path(node.app.node.settings.data_dir) / "peer").did
    now = now_ms()
    row = connections_repo.ConnectionRow(
        connection_id, did, "peer", peer_url, "outbound", "accepted", "", now, now
    )

    def write(conn: sa.Connection) -> None:
        connections_repo.replace_connection(conn, row)
        relay_repo.add_share(conn, room_id, connection_id, room_id, "out")

    await node.app.node.db.write(write)
    node.app.node.messages._shared.add(room_id)  # as Shares does when sharing
    await node.mesh.send(node.owner, room_id, "relay me")
    node.app.node.relay.links.start_link(connection_id)
    return connection_id, room_id


async def _relay_state(node: Served, connection_id: str) -> dict[str, Any]:
    r = await node.http.get("/api/connections", headers=node.owner.headers)
    assert r.status_code == 200, r.text
    row = next(c for c in r.json() if c["id"] == connection_id)
    return dict(row["relay"] or {})


async def test_a_peer_taking_a_batch_with_deeply_nested_results_is_relayed_to(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    peer = Hostile(lambda _: _response(200, DEEP))
    await peer.start(nursery)
    async with served(tmp_path, outbound_allow_private=True) as node:
        connection_id, _ = await _accepted_link(node, peer.url)

        async def relayed() -> bool:
            state = await _relay_state(node, connection_id)
            return bool(state.get("relayed", 0) >= 1 and state.get("waiting") == 0)

        await wait_for(relayed)
        assert len(peer.requests) == 1
        await node.healthy()


async def test_a_peer_url_that_cannot_be_looked_up_is_retried(tmp_path: Path) -> None:
    async with served(tmp_path, federation_retry_max=0.5) as node:
        connection_id, _ = await _accepted_link(node, f"http://{LONG_LABEL}.example.com")

        async def failing() -> bool:
            state = await _relay_state(node, connection_id)
            return bool(state.get("running") and state.get("failures", 0) >= 2)

        await wait_for(failing)
        state = await _relay_state(node, connection_id)
        assert (state["relayed"], state["waiting"]) == (0, 1)
        assert "cannot reach the peer" in state["lastError"]
        await node.healthy()
