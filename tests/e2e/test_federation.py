"""Federation step 1 between two real nodes (``python -m quart_mesh serve``
subprocesses, each with its own data folder): connection requests, accept,
decline, disconnect, and the signatures on node-to-node calls."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from quart_mesh.federation.signing import canonical_string, sign_request
from quart_mesh.identity import did_from_public_key, load_or_create_node_identity
from quart_mesh.ids import new_id
from tests.e2e.test_cli_restart import ServerProcess
from tests.helpers import Mesh, User, assert_error

pytestmark = pytest.mark.timeout(60)

#: nodes on loopback calling each other: a lab, where private addresses are allowed
LAB = {"MESH_OUTBOUND_ALLOW_PRIVATE": "true"}


def _key() -> tuple[Ed25519PrivateKey, str]:
    key = Ed25519PrivateKey.generate()
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return key, did_from_public_key(raw)


def _signed(
    key: Ed25519PrivateKey,
    did: str,
    path: str,
    body: dict[str, Any],
    *,
    audience: str,
    timestamp: float | None = None,
    nonce: str | None = None,
) -> tuple[bytes, dict[str, str]]:
    """A request signed by hand with *key* (as *did*) for the node *audience*."""
    raw = json.dumps(body).encode()
    ts = str(int(time.time() if timestamp is None else timestamp))
    nonce = nonce or new_id().lower() + "nonce"
    signature = key.sign(canonical_string("POST", path, ts, nonce, raw, audience))
    return raw, {
        "Content-Type": "application/json",
        "X-Mesh-DID": did,
        "X-Mesh-Timestamp": ts,
        "X-Mesh-Nonce": nonce,
        "X-Mesh-Signature": base64.urlsafe_b64encode(signature).rstrip(b"=").decode(),
    }


async def _connections(http: httpx.AsyncClient, owner: User) -> list[dict[str, Any]]:
    r = await http.get("/api/connections", headers=owner.headers)
    assert r.status_code == 200, r.text
    return list(r.json())


async def test_connections_between_two_nodes(tmp_path: Path, nursery: trio.Nursery) -> None:
    with trio.fail_after(45):
        node_a = ServerProcess(tmp_path / "a", env=LAB)
        node_b = ServerProcess(tmp_path / "b", env=LAB)
        url_a = await node_a.start(nursery)
        url_b = await node_b.start(nursery)
        async with (
            httpx.AsyncClient(base_url=url_a, timeout=10) as a,
            httpx.AsyncClient(base_url=url_b, timeout=10) as b,
        ):
            owner_a = await Mesh(a).setup(meshName="Mesh A")
            owner_b = await Mesh(b).setup(meshName="Mesh B")
            bob = await Mesh(a).register("bob")
            did_a = (await a.get("/.well-known/mesh-manifest.json")).json()["did"]
            manifest_b = (await b.get("/.well-known/mesh-manifest.json")).json()
            did_b = manifest_b["did"]
            assert manifest_b["federation"] == {
                "enabled": True,
                "policy": "manual",
                "registry": None,
                "isRegistry": False,
            }
            assert "federation" in manifest_b["capabilities"]

            # members are not admins
            assert_error(await a.get("/api/connections", headers=bob.headers), 403, "forbidden")
            r = await a.post("/api/connections/request", json={"url": url_b}, headers=bob.headers)
            assert_error(r, 403, "forbidden")
            assert await _connections(a, owner_a) == []

            # request: pending on both
            r = await a.post(
                "/api/connections/request",
                json={"url": url_b, "message": "hello from A"},
                headers=owner_a.headers,
            )
            assert r.status_code == 201, r.text
            first = r.json()
            assert (first["status"], first["direction"], first["did"]) == (
                "pending",
                "outbound",
                did_b,
            )
            assert (first["name"], first["url"], first["sharedRooms"]) == ("Mesh B", url_b, [])
            [inbound] = await _connections(b, owner_b)
            assert inbound["id"] == first["id"]
            assert (inbound["status"], inbound["direction"]) == ("pending", "inbound")
            assert (inbound["did"], inbound["name"], inbound["url"]) == (did_a, "Mesh A", url_a)
            assert inbound["message"] == "hello from A"
            # a second request while one is pending is refused
            r = await a.post(
                "/api/connections/request", json={"url": url_b}, headers=owner_a.headers
            )
            assert_error(r, 409, "connection_exists")
            # the requester cannot accept its own request
            r = await a.post(f"/api/connections/{first['id']}/accept", headers=owner_a.headers)
            assert_error(r, 409, "invalid_state")

            # decline: declined on both
            r = await b.post(f"/api/connections/{first['id']}/decline", headers=owner_b.headers)
            assert r.status_code == 200, r.text
            assert (r.json()["status"], r.json()["peerNotified"]) == ("declined", True)
            assert [c["status"] for c in await _connections(a, owner_a)] == ["declined"]
            assert [c["status"] for c in await _connections(b, owner_b)] == ["declined"]

            # request again: a new pending request replaces the declined one
            r = await a.post(
                "/api/connections/request", json={"url": url_b + "/"}, headers=owner_a.headers
            )
            assert r.status_code == 201, r.text
            second = r.json()
            assert second["id"] != first["id"]
            [again] = await _connections(b, owner_b)
            assert (again["id"], again["status"]) == (second["id"], "pending")

            # accept: accepted on both
            r = await b.post(f"/api/connections/{second['id']}/accept", headers=owner_b.headers)
            assert r.status_code == 200, r.text
            [on_a] = await _connections(a, owner_a)
            [on_b] = await _connections(b, owner_b)
            assert on_a["status"] == on_b["status"] == "accepted"
            assert (on_a["direction"], on_b["direction"]) == ("outbound", "inbound")

            # node-to-node calls must be signed, fresh, new and by the peer's key
            path = "/api/connections/disconnected"
            notice = {"connectionId": second["id"]}
            assert_error(await b.post(path, json=notice), 401, "unsigned")
            # unsigned on the shared request path (no Authorization: a node's call)
            assert_error(
                await b.post("/api/connections/request", json={"url": url_a}), 401, "unsigned"
            )
            # forged: X-Mesh-DID is A's, the signature another key's
            forger, _ = _key()
            raw, headers = _signed(forger, did_a, path, notice, audience=did_b)
            assert_error(await b.post(path, content=raw, headers=headers), 401, "bad_signature")
            # stale
            stranger, stranger_did = _key()
            raw, headers = _signed(
                stranger, stranger_did, path, notice, audience=did_b, timestamp=time.time() - 400
            )
            assert_error(await b.post(path, content=raw, headers=headers), 401, "stale")
            # a node with no connection here is not heard on notices (its nonce
            # is not even kept: the same request again is refused the same way)
            raw, headers = _signed(stranger, stranger_did, path, notice, audience=did_b)
            assert_error(await b.post(path, content=raw, headers=headers), 401, "unknown_node")
            assert_error(await b.post(path, content=raw, headers=headers), 401, "unknown_node")
            # replayed: a stranger's connection request is let through, the
            # same bytes again are not
            body = {"did": stranger_did, "name": "x", "url": "http://127.0.0.1:9"}
            body["connectionId"] = new_id()
            request_path = "/api/connections/request"
            raw, headers = _signed(stranger, stranger_did, request_path, body, audience=did_b)
            assert (await b.post(request_path, content=raw, headers=headers)).status_code == 201
            r = await b.post(request_path, content=raw, headers=headers)
            assert_error(r, 401, "replayed")
            # known now, the stranger still speaks only for its own connection
            raw, headers = _signed(stranger, stranger_did, path, notice, audience=did_b)
            assert_error(await b.post(path, content=raw, headers=headers), 401, "wrong_peer")
            # A, the peer, about a connection that is not there
            key_a = load_or_create_node_identity(tmp_path / "a")
            unknown = json.dumps({"connectionId": new_id(), "did": did_a}).encode()
            headers = sign_request(key_a, "POST", path, unknown, audience=did_b)
            r = await b.post(path, content=unknown, headers=headers)
            assert_error(r, 404, "connection_not_found")
            # none of that changed the connection
            listed = {c["did"]: c["status"] for c in await _connections(b, owner_b)}
            assert listed == {did_a: "accepted", stranger_did: "pending"}

            # disconnect: disconnected on both
            r = await a.delete(f"/api/connections/{second['id']}", headers=owner_a.headers)
            assert r.status_code == 200, r.text
            assert [c["status"] for c in await _connections(a, owner_a)] == ["disconnected"]
            listed = {c["did"]: c["status"] for c in await _connections(b, owner_b)}
            assert listed == {did_a: "disconnected", stranger_did: "pending"}

            # a node that is down: a clean 502, nothing recorded
            before = await _connections(a, owner_a)
            assert await node_b.stop() == 0
            r = await a.post(
                "/api/connections/request", json={"url": url_b}, headers=owner_a.headers
            )
            assert_error(r, 502, "peer_unreachable")
            assert await _connections(a, owner_a) == before
        assert b"Traceback" not in node_a.output + node_b.output
        await node_a.stop()


async def test_a_node_with_federation_off_stands_alone(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    with trio.fail_after(45):
        node = ServerProcess(tmp_path / "solo", env={"MESH_FEDERATION_ENABLED": "false", **LAB})
        peer = ServerProcess(tmp_path / "peer", env=LAB)
        url = await node.start(nursery)
        url_peer = await peer.start(nursery)
        async with (
            httpx.AsyncClient(base_url=url, timeout=10) as solo,
            httpx.AsyncClient(base_url=url_peer, timeout=10) as other,
        ):
            owner = await Mesh(solo).setup()
            owner_peer = await Mesh(other).setup()
            manifest = (await solo.get("/.well-known/mesh-manifest.json")).json()
            assert manifest["federation"] == {
                "enabled": False,
                "policy": "none",
                "registry": None,
                "isRegistry": False,
            }
            # no connections either way
            r = await solo.post(
                "/api/connections/request", json={"url": url_peer}, headers=owner.headers
            )
            assert_error(r, 403, "federation_disabled")
            r = await other.post(
                "/api/connections/request", json={"url": url}, headers=owner_peer.headers
            )
            assert_error(r, 502, "peer_refused")
            assert await _connections(solo, owner) == []
            assert await _connections(other, owner_peer) == []
            # every node-to-node path refuses, signed or not
            key, did = _key()
            for path in ("/api/federation/relay", "/api/federation/rooms"):
                raw, headers = _signed(
                    key, did, path, {"connectionId": new_id()}, audience=manifest["did"]
                )
                r = await solo.post(path, content=raw, headers=headers)
                assert_error(r, 403, "federation_disabled")
            # and everything else works: rooms, messages, history
            mesh = Mesh(solo)
            room = await mesh.create_room(owner, "local")
            sent = await mesh.send(owner, room["roomId"], "still here")
            assert (sent["origin"], sent["trustLevel"]) == (None, "local")
            [stored] = await mesh.messages(owner, room["roomId"])
            assert stored["messageId"] == sent["messageId"]
        assert b"Traceback" not in node.output + peer.output
        await node.stop()
        await peer.stop()


async def test_pending_requests_are_capped(tmp_path: Path, nursery: trio.Nursery) -> None:
    with trio.fail_after(30):
        node = ServerProcess(tmp_path / "capped", env={"MESH_FEDERATION_MAX_PENDING": "2"})
        url = await node.start(nursery)
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            owner = await Mesh(http).setup()
            audience = (await http.get("/.well-known/mesh-manifest.json")).json()["did"]
            statuses = []
            for i in range(3):
                key, did = _key()
                body = {
                    "did": did,
                    "name": f"stranger {i}",
                    "url": f"http://127.0.0.1:{9 + i}",
                    "message": "let me in",
                    "connectionId": new_id(),
                }
                path = "/api/connections/request"
                raw, headers = _signed(key, did, path, body, audience=audience)
                r = await http.post(path, content=raw, headers=headers)
                statuses.append(r.status_code)
            assert statuses == [201, 201, 429]
            assert_error(r, 429, "rate_limited")
            assert [c["status"] for c in await _connections(http, owner)] == ["pending"] * 2
        await node.stop()
