"""Signed requests from nodes this one does not trust (issue 28), between
real nodes (``python -m quart_mesh serve``, the helpers of ``test_relay.py``):
a stranger's flood of signed requests cannot stop a connected peer's relay,
and a request a node signed for another node cannot be replayed here. The
stranger is a throwaway key (``_signed``); the other node, M, a small real
server with a DID made here."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from quart_mesh.identity import load_or_create_node_identity
from quart_mesh.ids import new_id
from tests.e2e.test_federation import _key, _signed
from tests.e2e.test_relay import connect_nodes, nodes, share, wait_for_message
from tests.helpers import assert_error
from tests.receiver import Receiver, Request

pytestmark = pytest.mark.timeout(120)

REQUEST_PATH = "/api/connections/request"
#: the node-to-node paths only a node with a connection here is heard on
PEER_PATHS = (
    "/api/federation/relay",
    "/api/federation/rooms",
    "/api/federation/rooms/unshared",
    "/api/connections/accepted",
    "/api/connections/declined",
    "/api/connections/disconnected",
)


async def test_a_strangers_flood_does_not_stop_a_peers_relay(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    # a small nonce store, and loopback limited per address like any client
    env = {"MESH_FEDERATION_MAX_NONCES": "20", "MESH_RATE_EXEMPT": "none"}
    async with nodes(tmp_path, nursery, "a", "b", env=env) as (a, b):
        alice = await a.mesh.register("alice")
        bob = await b.mesh.register("bob")
        room = await a.mesh.create_room(a.owner, "lobby")
        await a.mesh.join(alice, room["roomId"])
        connection_id = await connect_nodes(a, b)
        mirror = await share(a, connection_id, room["roomId"], b)
        await b.mesh.join(bob, mirror)
        key, did = _key()
        ahead = time.time() + 299  # as far ahead as the skew allows: kept longest

        async def send(path: str, body: dict[str, Any]) -> httpx.Response:
            raw, headers = _signed(key, did, path, body, audience=a.did, timestamp=ahead)
            return await a.http.post(path, content=raw, headers=headers)

        # not connected here: not heard on the peers' paths (and nothing is kept)
        for path in PEER_PATHS * 5:
            r = await send(path, {"connectionId": new_id(), "did": did})
            assert_error(r, 401, "unknown_node")
        # connection requests: 10 an hour from one address, then 429
        answers = []
        for _ in range(12):
            body = {"did": did, "name": "Stranger", "url": "http://127.0.0.1:9"}
            answers.append(await send(REQUEST_PATH, body | {"connectionId": new_id()}))
        assert answers[0].status_code == 201, answers[0].text
        for r in answers[1:10]:
            assert_error(r, 409, "connection_exists")
        for r in answers[10:]:
            assert_error(r, 429, "rate_limited")
            assert float(r.headers["Retry-After"]) > 0
        # known now (its request is pending), the stranger fills the nonce
        # store with notices until it is refused itself
        statuses = []
        for _ in range(40):
            r = await send("/api/connections/disconnected", {"connectionId": new_id()})
            statuses.append(r.status_code)
            if r.status_code == 503:
                break
        assert statuses[-1] == 503, statuses
        assert set(statuses[:-1]) == {404}, statuses
        assert_error(r, 503, "busy")

        # B, an accepted peer, is still heard: its relay arrives, never refused
        sent = await b.mesh.send(bob, mirror, "still here")
        page = await wait_for_message(a, alice, room["roomId"], sent["messageId"])
        assert page[-1]["content"] == "still here"
        [link] = await b.connections()
        assert (link["relay"]["failures"], link["relay"]["lastError"]) == (0, None)
        # ...while the stranger is still refused
        r = await send("/api/connections/disconnected", {"connectionId": new_id()})
        assert_error(r, 503, "busy")


async def test_a_request_signed_for_another_node_is_refused(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    async with nodes(tmp_path, nursery, "a", "b") as (a, b):
        # M: a node with its own DID, which keeps what B sends it
        did_m = load_or_create_node_identity(tmp_path / "m").did

        def node_m(request: Request) -> tuple[int, Any]:
            if request.path == "/.well-known/mesh-manifest.json":
                return 200, {"did": did_m, "name": "Mesh M"}
            return 201, {"ok": True, "status": "pending"}

        m = Receiver(handler=node_m)
        url_m = f"http://127.0.0.1:{await m.start(nursery)}"
        r = await b.http.post(REQUEST_PATH, json={"url": url_m}, headers=b.owner.headers)
        assert r.status_code == 201, r.text
        [signed] = [x for x in m.requests if x.path == REQUEST_PATH]
        assert signed.json()["did"] == b.did

        # M replays B's request, byte for byte, to A: signed for M, not for A
        headers = {k: v for k, v in signed.headers.items() if k.startswith("x-mesh-")}
        headers["Content-Type"] = "application/json"
        r = await a.http.post(REQUEST_PATH, content=signed.body, headers=headers)
        assert_error(r, 401, "bad_signature")
        assert a.did in r.json()["error"]
        assert await a.connections() == []
        # B's own request to A is not in the way of anything
        r = await b.http.post(REQUEST_PATH, json={"url": a.url}, headers=b.owner.headers)
        assert r.status_code == 201, r.text
        [pending] = await a.connections()
        assert (pending["did"], pending["status"]) == (b.did, "pending")
