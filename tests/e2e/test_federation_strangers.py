"""Signed requests from nodes this one does not trust (issue 28), between
real nodes (``python -m quart_mesh serve``, the helpers of ``test_relay.py``):
a stranger's flood of signed requests cannot keep real nodes from
connecting (nor fill the nonce store they need), and a request a node signed
for another node cannot be replayed here. The stranger is a throwaway key
(``_signed``); the other node, M, a small real server with a DID made
here. Who is heard on which path: ``tests/federation/test_admission.py``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from quart_mesh.identity import load_or_create_node_identity
from quart_mesh.ids import new_id
from tests.e2e.test_federation import _key, _signed
from tests.e2e.test_relay import connect_nodes, nodes, share, wait_for_message
from tests.helpers import assert_error
from tests.receiver import Receiver, Request

pytestmark = pytest.mark.timeout(120)

REQUEST_PATH = "/api/connections/request"
#: the node-to-node paths a stranger is not heard on (``disconnected``: unless
#: it has a connection here, within its address's budget)
PEER_PATHS = (
    "/api/federation/relay",
    "/api/federation/rooms",
    "/api/federation/rooms/unshared",
    "/api/connections/accepted",
    "/api/connections/declined",
    "/api/connections/disconnected",
)


async def test_a_strangers_flood_does_not_keep_nodes_from_connecting(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """A stranger on its own address (127.0.0.2) floods A with signed
    requests timed as far ahead as the skew allows (kept longest): refused on
    the peers' paths, let through within A's budget for strangers on the
    others, nothing kept beyond it; so a real node's request afterwards is
    taken (A's nonce store, of 20 here, never fills), and the two connect."""
    env = {
        "MESH_FEDERATION_MAX_NONCES": "20",
        "MESH_RATE_FEDERATION_STRANGER_ADDRESS": "5/1h",
        "MESH_RATE_EXEMPT": "none",  # loopback limited per address like any client
    }
    async with (
        nodes(tmp_path, nursery, "a", "b", env=env) as (a, b),
        httpx.AsyncClient(
            base_url=a.url,
            timeout=15,
            transport=httpx.AsyncHTTPTransport(local_address="127.0.0.2"),
        ) as elsewhere,
    ):
        alice = await a.mesh.register("alice")
        bob = await b.mesh.register("bob")
        room = await a.mesh.create_room(a.owner, "lobby")
        await a.mesh.join(alice, room["roomId"])
        stranger = _key()
        did = stranger[1]
        ahead = time.time() + 299

        async def send(
            path: str, body: dict[str, Any], signer: tuple[Ed25519PrivateKey, str] = stranger
        ) -> httpx.Response:
            raw, headers = _signed(*signer, path, body, audience=a.did, timestamp=ahead)
            return await elsewhere.post(path, content=raw, headers=headers)

        def ask(signer: tuple[Ed25519PrivateKey, str] = stranger) -> dict[str, Any]:
            url = "http://127.0.0.1:9"
            return {"did": signer[1], "name": "Stranger", "url": url, "connectionId": new_id()}

        # unknown here: not heard on the peers' paths (and nothing is kept)
        for path in PEER_PATHS * 3:
            r = await send(path, {"connectionId": new_id(), "did": did})
            assert_error(r, 401, "unknown_node")
        # one request, declined by A's admin without contacting anyone
        r = await send(REQUEST_PATH, ask())
        assert r.status_code == 201, r.text
        declined = r.json()["connectionId"]
        r = await a.http.post(
            f"/api/connections/{declined}/decline?notify=false", headers=a.owner.headers
        )
        assert r.status_code == 200, r.text
        # known now, the stranger is still no peer: not heard on the peers'
        # paths, and its notices count against its address's budget (5)
        for path in PEER_PATHS:
            if path != "/api/connections/disconnected":
                r = await send(path, {"connectionId": declined, "did": did})
                assert_error(r, 403, "not_connected")
        statuses = []
        for _ in range(30):
            r = await send("/api/connections/disconnected", {"connectionId": new_id()})
            statuses.append(r.status_code)
        assert statuses == [404] * 4 + [429] * 26, statuses
        assert_error(r, 429, "rate_limited")
        assert float(r.headers["Retry-After"]) > 0
        # the budget is the address's, whoever signs: a fresh key's request too
        fresh = _key()
        r = await send(REQUEST_PATH, ask(fresh), signer=fresh)
        assert_error(r, 429, "rate_limited")
        assert [(c["did"], c["status"]) for c in await a.connections()] == [(did, "declined")]

        # a real node's request is taken, not refused busy: it connects and relays
        connection_id = await connect_nodes(b, a)
        mirror = await share(a, connection_id, room["roomId"], b)
        await b.mesh.join(bob, mirror)
        sent = await b.mesh.send(bob, mirror, "still here")
        page = await wait_for_message(a, alice, room["roomId"], sent["messageId"])
        assert page[-1]["content"] == "still here"
        [link] = [c for c in await b.connections() if c["id"] == connection_id]
        assert (link["relay"]["failures"], link["relay"]["lastError"]) == (0, None)


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
