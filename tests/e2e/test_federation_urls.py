"""What a stranger's signed connection request can make a node do, between
real nodes (``python -m quart_mesh serve`` subprocesses) and a small real
server playing an internal service: call nothing on the node's own network
(the outbound guard), nothing at a URL that is not the requester's (the
manifest check), and not keep an admin from new connections (pending
requests expire, are limited per client address, and are declined here
without the requester's help)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import trio

from quart_mesh.ids import new_id
from tests.e2e.test_federation import _key, _signed
from tests.e2e.test_relay import Node, nodes
from tests.helpers import assert_error, wait_for
from tests.receiver import Receiver

pytestmark = pytest.mark.timeout(90)

REQUEST = "/api/connections/request"
MANIFEST = "/.well-known/mesh-manifest.json"


async def ask(node: Node, url: str) -> httpx.Response:
    """A signed connection request to *node* from a stranger's throwaway key,
    giving *url* as the stranger's address."""
    key, did = _key()
    body = {"did": did, "name": "stranger", "url": url, "connectionId": new_id()}
    raw, headers = _signed(key, did, REQUEST, body, audience=node.did)
    return await node.http.post(REQUEST, content=raw, headers=headers)


async def asked(node: Node, url: str) -> str:
    """The id of a stranger's request to *node*, which took it (201)."""
    r = await ask(node, url)
    assert r.status_code == 201, r.text
    return str(r.json()["connectionId"])


async def answer(node: Node, connection_id: str, verb: str, query: str = "") -> httpx.Response:
    path = f"/api/connections/{connection_id}/{verb}{query}"
    return await node.http.post(path, headers=node.owner.headers)


def assert_ended(r: httpx.Response, status: str, *, notified: bool) -> None:
    """A decline or disconnect that ended the connection here (200)."""
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["peerNotified"]) == (status, notified), r.text


async def test_a_stranger_cannot_make_a_node_call_its_own_network(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    internal = Receiver()  # an internal service on loopback: records every request
    port = await internal.start(nursery)
    guarded = {"MESH_OUTBOUND_ALLOW_PRIVATE": "false"}  # the default, said out loud
    async with nodes(tmp_path, nursery, "a", env=guarded) as (a,):
        # credentials and a path in the URL: refused as a URL before anything is stored
        r = await ask(a, f"http://user:secret@127.0.0.1:{port}/internal/admin/reset")
        assert_error(r, 400, "invalid_url")
        # a plain base URL is taken as a request; it is checked when answered
        r = await ask(a, f"http://127.0.0.1:{port}")
        assert r.status_code == 201, r.text
        connection_id = r.json()["connectionId"]
        r = await answer(a, connection_id, "accept")
        assert_error(r, 502, "peer_unreachable")
        assert "MESH_OUTBOUND_ALLOW_PRIVATE" in r.json()["error"], r.text
        [pending] = await a.connections()
        assert pending["status"] == "pending"
        # declining it ends it here; the requester cannot be told
        r = await answer(a, connection_id, "decline")
        assert r.status_code == 200, r.text
        assert (r.json()["status"], r.json()["peerNotified"]) == ("declined", False)
        assert [c["status"] for c in await a.connections()] == ["declined"]
        # an admin's own request to a private address is refused the same way
        r = await a.http.post(
            REQUEST, json={"url": f"http://localhost:{port}"}, headers=a.owner.headers
        )
        assert_error(r, 502, "peer_unreachable")
        assert "MESH_OUTBOUND_ALLOW_PRIVATE" in r.json()["error"], r.text
        assert internal.requests == []


async def test_pending_requests_are_checked_bounded_and_declined_here(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """A lab (loopback allowed) with the default expiry, a week; then A
    restarted with a 1-second one."""
    _, someone = _key()
    # another node, whose URL strangers claim as theirs: answers anything
    # with its manifest, and records what it is sent
    claimed = Receiver(lambda request: (200, {"did": someone, "name": "someone"}))
    elsewhere = f"http://127.0.0.1:{await claimed.start(nursery)}"
    async with nodes(tmp_path, nursery, "a", "b") as (a, b):
        # strangers claim that URL: its manifest names another DID, so A sends
        # it nothing, neither an accept, a decline nor a disconnect
        first, second = await asked(a, elsewhere), await asked(a, elsewhere)
        assert_error(await answer(a, first, "accept"), 502, "peer_mismatch")
        assert_ended(await answer(a, first, "decline"), "declined", notified=False)
        path = f"/api/connections/{second}"
        assert_error(await a.http.delete(path, headers=a.owner.headers), 502, "peer_mismatch")
        r = await a.http.delete(path, params={"force": "true"}, headers=a.owner.headers)
        assert_ended(r, "disconnected", notified=False)
        assert [(q.method, q.path) for q in claimed.requests] == [("GET", MANIFEST)] * 4

        # B's own request: its URL serves its manifest, so A accepts it
        r = await b.http.post(REQUEST, json={"url": a.url}, headers=b.owner.headers)
        assert r.status_code == 201, r.text
        r = await answer(a, r.json()["id"], "accept")
        assert r.status_code == 200, r.text
        [on_b] = await b.connections()
        assert (on_b["status"], on_b["did"]) == ("accepted", a.did)

        # a flood from one client address: 3 requests pending at most
        flood = [await asked(a, elsewhere) for _ in range(3)]
        r = await ask(a, elsewhere)
        assert_error(r, 429, "rate_limited")
        week = 7 * 24 * 3600  # until the oldest of them expires
        assert week - 60 <= int(r.headers["Retry-After"]) <= week, r.headers
        # declined here without contacting anyone: its slot, and only it, is free
        assert_error(await answer(a, flood[0], "decline", "?notify=maybe"), 400, "invalid_field")
        r = await answer(a, flood[0], "decline", "?notify=false")
        assert_ended(r, "declined", notified=False)
        flood.append(await asked(a, elsewhere))
        pending = {c["id"] for c in await a.connections() if c["status"] == "pending"}
        assert pending == set(flood[1:])
        assert_error(await ask(a, elsewhere), 429, "rate_limited")

        # unanswered requests expire (the three are older than A's new TTL):
        # not listed, not answerable, not counted
        assert b"Traceback" not in a.process.output  # (the restart drops this output)
        a.process.env = {**a.process.env, "MESH_FEDERATION_PENDING_TTL": "1"}
        await a.restart(nursery)

        async def expired() -> bool:
            return all(c["status"] != "pending" for c in await a.connections())

        await wait_for(expired, 10, interval=0.1)
        assert_error(await answer(a, flood[1], "accept"), 404, "connection_not_found")
        await asked(a, elsewhere)
        assert len(claimed.requests) == 4  # nothing but the four manifest checks, ever
