"""Shared rooms and the durable relay between real nodes (``python -m
quart_mesh serve`` subprocesses, each with its own data folder and SQLite
file): sharing, conversation both ways over WebSocket and polling, edits,
deletes and reactions, remote participants at Tier 4, a peer down while
messages are sent, node restarts, three nodes, and a peer that misbehaves."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from quart_mesh.federation.signing import sign_request
from quart_mesh.identity import load_or_create_node_identity
from quart_mesh.ids import new_id
from tests.e2e.test_cli_restart import ServerProcess
from tests.helpers import Mesh, User, assert_error, connect, wait_for
from tests.receiver import free_port

pytestmark = pytest.mark.timeout(120)


@dataclass
class Node:
    name: str
    data_dir: Path
    port: int
    url: str
    process: ServerProcess
    http: httpx.AsyncClient
    owner: User
    did: str

    @property
    def mesh(self) -> Mesh:
        return Mesh(self.http)

    async def get(self, path: str, user: User | None = None, **params: Any) -> Any:
        r = await self.http.get(path, headers=(user or self.owner).headers, params=params)
        assert r.status_code == 200, r.text
        return r.json()

    async def connections(self) -> list[dict[str, Any]]:
        return list(await self.get("/api/connections"))

    async def start(self, nursery: trio.Nursery) -> None:
        """Start (again) on the same port and data folder."""
        self.process = ServerProcess(self.data_dir, "--port", str(self.port), env=self.process.env)
        assert await self.process.start(nursery) == self.url

    async def restart(self, nursery: trio.Nursery) -> None:
        assert await self.process.stop() == 0
        await self.start(nursery)


@asynccontextmanager
async def nodes(
    tmp_path: Path, nursery: trio.Nursery, *names: str, env: dict[str, str] | None = None
) -> AsyncIterator[list[Node]]:
    """Start one node per name on a fixed loopback port (so that a restarted
    node keeps its address), each set up with an owner and a mesh name. The
    nodes are a lab: their calls to each other on loopback are allowed
    (``MESH_OUTBOUND_ALLOW_PRIVATE``, unless *env* says otherwise)."""
    started: list[Node] = []
    for name in names:
        port = free_port()
        data_dir = tmp_path / name
        # quick retries: a peer coming back is noticed within a second
        lab = {"MESH_FEDERATION_RETRY_MAX": "1", "MESH_OUTBOUND_ALLOW_PRIVATE": "true"}
        process = ServerProcess(data_dir, "--port", str(port), env={**lab, **(env or {})})
        # ServerProcess puts --port 0 first; the later --port wins
        url = await process.start(nursery)
        assert url.endswith(f":{port}"), url
        client = httpx.AsyncClient(base_url=url, timeout=15)
        owner = await Mesh(client).setup(meshName=f"Mesh {name.upper()}")
        did = (await client.get("/.well-known/mesh-manifest.json")).json()["did"]
        started.append(Node(name, data_dir, port, url, process, client, owner, did))
    try:
        yield started
    finally:
        for node in started:
            await node.http.aclose()
            assert b"Traceback" not in node.process.output, node.process.output.decode()
    for node in started:
        if node.process.process.returncode is None:
            await node.process.stop()


async def connect_nodes(a: Node, b: Node) -> str:
    r = await a.http.post("/api/connections/request", json={"url": b.url}, headers=a.owner.headers)
    assert r.status_code == 201, r.text
    connection_id: str = r.json()["id"]
    r = await b.http.post(f"/api/connections/{connection_id}/accept", headers=b.owner.headers)
    assert r.status_code == 200, r.text
    return connection_id


async def share(home: Node, connection_id: str, room_id: str, peer: Node) -> str:
    """Share *room_id* of *home* with *peer*; the id of the peer's mirror room."""
    r = await home.http.post(
        f"/api/connections/{connection_id}/rooms",
        json={"roomId": room_id},
        headers=home.owner.headers,
    )
    assert r.status_code == 201, r.text
    assert r.json()["direction"] == "outbound"
    [connection] = [c for c in await peer.connections() if c["id"] == connection_id]
    [mirror] = [s for s in connection["sharedRooms"] if s["homeRoomId"] == room_id]
    assert mirror["direction"] == "inbound"
    return str(mirror["roomId"])


async def wait_for_messages(
    node: Node, user: User, room_id: str, count: int, timeout: float = 30
) -> list[dict[str, Any]]:
    """The room's messages once there are at least *count* (polling the history)."""
    page: list[dict[str, Any]] = []

    async def enough() -> bool:
        page[:] = await node.mesh.messages(user, room_id, limit=200)
        return len(page) >= count

    await wait_for(enough, timeout, interval=0.1)
    return page


async def wait_for_message(
    node: Node, user: User, room_id: str, message_id: str, timeout: float = 30
) -> list[dict[str, Any]]:
    """The room's messages once *message_id* is among them (polling the history)."""
    page: list[dict[str, Any]] = []

    async def arrived() -> bool:
        page[:] = await node.mesh.messages(user, room_id, limit=200)
        return message_id in [m["messageId"] for m in page]

    await wait_for(arrived, timeout, interval=0.1)
    return page


async def poll(node: Node, user: User, cursor: str | None, timeout: float = 10) -> dict[str, Any]:
    body: dict[str, Any] = {"timeout": timeout}
    if cursor is not None:
        body["cursor"] = cursor
    r = await node.http.post("/api/poll", json=body, headers=user.headers)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def test_shared_room_conversation_both_ways(tmp_path: Path, nursery: trio.Nursery) -> None:
    async with nodes(tmp_path, nursery, "a", "b") as (a, b):
        alice = await a.mesh.register("alice")
        bob = await b.mesh.register("bob")
        lobby = await a.mesh.create_room(a.owner, "lobby")
        await a.mesh.join(alice, lobby["roomId"])

        # nothing can be shared before the nodes are connected
        r = await a.http.post(
            f"/api/connections/{new_id()}/rooms",
            json={"roomId": lobby["roomId"]},
            headers=a.owner.headers,
        )
        assert_error(r, 404, "connection_not_found")
        connection_id = await connect_nodes(a, b)
        # only admins share, only rooms that exist
        path = f"/api/connections/{connection_id}/rooms"
        r = await a.http.post(path, json={"roomId": lobby["roomId"]}, headers=alice.headers)
        assert_error(r, 403, "forbidden")
        r = await a.http.post(path, json={"roomId": new_id()}, headers=a.owner.headers)
        assert_error(r, 404, "room_not_found")
        mirror_id = await share(a, connection_id, lobby["roomId"], b)
        r = await a.http.post(path, json={"roomId": lobby["roomId"]}, headers=a.owner.headers)
        assert_error(r, 409, "already_shared")

        # B lists the remote room; its members join it like any room
        [mirror] = [room for room in await b.get("/api/rooms", bob) if room["roomId"] == mirror_id]
        assert (mirror["name"], mirror["origin"]) == ("lobby@mesh-a", a.did)
        # a mirror cannot be shared on by the peer
        r = await b.http.post(
            f"/api/connections/{connection_id}/rooms",
            json={"roomId": mirror_id},
            headers=b.owner.headers,
        )
        assert_error(r, 409, "not_home_room")
        await b.mesh.join(bob, mirror_id)
        cursor = (await poll(b, bob, None, timeout=0))["cursor"]

        async with connect(a.url, alice) as alice_ws:
            # A -> B: alice over WebSocket, bob polls
            await alice_ws.send(type="send_message", roomId=lobby["roomId"], content="hello B")
            sent = await alice_ws.expect("message", content="hello B")
            assert (sent["trustLevel"], sent["origin"]) == ("local", None)
            got = await poll(b, bob, cursor)
            [relayed] = got["messages"]
            cursor = got["cursor"]
            assert relayed["messageId"] == sent["messageId"]
            assert (relayed["roomId"], relayed["content"]) == (mirror_id, "hello B")
            assert relayed["senderName"] == "alice@mesh-a"
            assert (relayed["trustLevel"], relayed["origin"]) == ("federated", a.did)
            remote_alice = relayed["senderId"]
            profile = await b.get(f"/api/participants/{remote_alice}", bob)
            assert (profile["role"], profile["origin"]) == ("agent", a.did)
            assert profile["trustLevel"] == "federated"

            # B -> A: bob over REST, addressed to alice; alice gets it live
            reply = await b.mesh.send(bob, mirror_id, "hi alice", to=remote_alice)
            live = await alice_ws.expect("message", messageId=reply["messageId"])
            assert (live["senderName"], live["content"]) == ("bob@mesh-b", "hi alice")
            assert (live["trustLevel"], live["origin"]) == ("federated", b.did)
            assert live["to"] == alice.participant_id  # addressed to alice herself on A
            remote_bob = live["senderId"]
            bob_on_a = await a.get(f"/api/participants/{remote_bob}")
            assert (bob_on_a["name"], bob_on_a["role"]) == ("bob@mesh-b", "agent")

            # edits and deletes by their author, reactions both ways
            r = await b.http.patch(
                f"/api/rooms/{mirror_id}/messages/{reply['messageId']}",
                json={"content": "hi alice (edited)"},
                headers=bob.headers,
            )
            assert r.status_code == 200, r.text
            edited = await alice_ws.expect("message_edited", messageId=reply["messageId"])
            assert edited["content"] == "hi alice (edited)"
            await alice_ws.send(
                type="add_reaction",
                roomId=lobby["roomId"],
                messageId=reply["messageId"],
                emoji="wave",
            )
            await alice_ws.expect("reaction_added", messageId=reply["messageId"])
            relayed: list[dict[str, Any]] = []

            async def reacted_on_b() -> bool:
                page = await b.mesh.messages(bob, mirror_id)
                relayed[:] = [m for m in page if m["messageId"] == reply["messageId"]]
                return bool(relayed[0]["reactions"])

            await wait_for(reacted_on_b, 20, interval=0.1)
            [on_b] = relayed
            assert on_b["content"] == "hi alice (edited)"
            assert on_b["reactions"] == [
                {"emoji": "wave", "count": 1, "participantIds": [remote_alice]}
            ]
            r = await b.http.delete(
                f"/api/rooms/{mirror_id}/messages/{reply['messageId']}", headers=bob.headers
            )
            assert r.status_code == 200, r.text
            await alice_ws.expect("message_deleted", messageId=reply["messageId"])

            # Tier 4 on A, whatever B's owner is at home and whatever role A gives it
            owner_note = await a.mesh.send(alice, lobby["roomId"], "alice's own words")
            await wait_for_messages(b, bob, mirror_id, 2)
            await b.mesh.join(b.owner, mirror_id)
            marker = await b.mesh.send(b.owner, mirror_id, "owner of B here")
            remote_owner = (await alice_ws.expect("message", messageId=marker["messageId"]))[
                "senderId"
            ]
            r = await a.http.put(
                f"/api/participants/{remote_owner}/role",
                json={"role": "moderator"},
                headers=a.owner.headers,
            )
            assert r.status_code == 200, r.text
            # on B its owner may delete alice's message; A refuses the relayed delete
            r = await b.http.delete(
                f"/api/rooms/{mirror_id}/messages/{owner_note['messageId']}",
                headers=b.owner.headers,
            )
            assert r.status_code == 200, r.text
            after = await b.mesh.send(b.owner, mirror_id, "after the delete")
            await alice_ws.expect("message", messageId=after["messageId"])
            kept = await a.mesh.messages(alice, lobby["roomId"])
            assert owner_note["messageId"] in [m["messageId"] for m in kept]

            on_a = {p["name"]: p for p in await a.get("/api/participants")}
            assert on_a["bob@mesh-b"]["origin"] == b.did
            assert on_a["bob@mesh-b"]["trustLevel"] == "federated"
            assert on_a["alice"]["trustLevel"] == "local"
            # a remote participant has no password to log in with
            r = await a.http.post(
                "/api/auth/login", json={"name": "bob@mesh-b", "password": "anything at all"}
            )
            assert_error(r, 401, "invalid_credentials")

            # the connection lists its shares on both sides
            [on_a_conn] = await a.connections()
            assert [s["roomId"] for s in on_a_conn["sharedRooms"]] == [lobby["roomId"]]
            assert on_a_conn["relay"]["running"] is True

            # disconnect: sharing stops at once, on both nodes
            r = await b.http.delete(f"/api/connections/{connection_id}", headers=b.owner.headers)
            assert r.status_code == 200, r.text
            for node in (a, b):
                [conn] = await node.connections()
                assert (conn["status"], conn["sharedRooms"]) == ("disconnected", [])
                assert conn["relay"] is None  # no link is left that could send
            await b.mesh.send(bob, mirror_id, "nobody hears this")
            await a.mesh.send(alice, lobby["roomId"], "nor this")
            await alice_ws.expect("message", content="nor this")
            assert [f for f in await alice_ws.settle() if f["type"] == "message"] == []
            page = await b.mesh.messages(bob, mirror_id, limit=200)
            assert "nor this" not in [m["content"] for m in page]


async def test_relay_is_durable_across_downtime_and_restarts(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    async with nodes(tmp_path, nursery, "a", "b") as (a, b):
        alice = await a.mesh.register("alice")
        bob = await b.mesh.register("bob")
        room = await a.mesh.create_room(a.owner, "ops")
        await a.mesh.join(alice, room["roomId"])
        connection_id = await connect_nodes(a, b)
        mirror_id = await share(a, connection_id, room["roomId"], b)
        await b.mesh.join(bob, mirror_id)

        # B is down while A sends; A restarts in the middle
        assert await b.process.stop() == 0
        sent = [await a.mesh.send(alice, room["roomId"], f"m{i}") for i in range(10)]

        async def failing() -> bool:
            return bool((await a.connections())[0]["relay"]["failures"])

        await wait_for(failing, 10, interval=0.1)
        [link] = await a.connections()
        assert "cannot reach the peer" in link["relay"]["lastError"]
        assert link["relay"]["waiting"] == 10
        await a.restart(nursery)
        sent += [await a.mesh.send(alice, room["roomId"], f"m{i}") for i in range(10, 20)]

        # B comes back: every message once, in order, with its own id
        await b.start(nursery)
        got = await wait_for_messages(b, bob, mirror_id, 20)
        assert [m["messageId"] for m in got] == [m["messageId"] for m in sent]
        assert [m["content"] for m in got] == [f"m{i}" for i in range(20)]

        async def answered() -> bool:  # A hears B's answer to the last batch
            return not (await a.connections())[0]["relay"]["waiting"]

        await wait_for(answered, 10, interval=0.1)

        # the other way round: A down, B sends, B restarts, A comes back
        assert await a.process.stop() == 0
        back = [await b.mesh.send(bob, mirror_id, f"r{i}") for i in range(5)]
        await b.restart(nursery)
        await a.start(nursery)
        got = await wait_for_messages(a, alice, room["roomId"], 25)
        assert [m["messageId"] for m in got[20:]] == [m["messageId"] for m in back]
        # nothing arrived twice on either node: each link relays in order, so
        # a repeat would come before a message sent now
        mark_b = await b.mesh.send(bob, mirror_id, "mark from B")
        mark_a = await a.mesh.send(alice, room["roomId"], "mark from A")
        for node, user, room_id in ((a, alice, room["roomId"]), (b, bob, mirror_id)):
            for mark in (mark_a, mark_b):
                page = await wait_for_message(node, user, room_id, mark["messageId"])
            assert len(page) == 27, [m["content"] for m in page]
            assert len({m["messageId"] for m in page}) == 27

        # ending a connection with a peer that is down: refused, unless forced
        assert await b.process.stop() == 0
        r = await a.http.delete(f"/api/connections/{connection_id}", headers=a.owner.headers)
        assert_error(r, 502, "peer_unreachable")
        r = await a.http.delete(
            f"/api/connections/{connection_id}?force=true", headers=a.owner.headers
        )
        assert r.status_code == 200, r.text
        assert (r.json()["status"], r.json()["peerNotified"]) == ("disconnected", False)
        # B comes back with a message still to relay: A refuses it, B keeps retrying
        await b.start(nursery)
        await b.mesh.send(bob, mirror_id, "after A left")

        async def refused() -> bool:
            return bool((await b.connections())[0]["relay"]["lastError"] == "the peer answered 403")

        await wait_for(refused, 15, interval=0.1)
        assert len(await a.mesh.messages(alice, room["roomId"], limit=200)) == 27
        # B's admin ends it too: both disconnected, nothing shared
        r = await b.http.delete(f"/api/connections/{connection_id}", headers=b.owner.headers)
        assert r.status_code == 200, r.text
        assert r.json()["peerNotified"] is True
        for node in (a, b):
            [conn] = await node.connections()
            assert (conn["status"], conn["sharedRooms"], conn["relay"]) == (
                "disconnected",
                [],
                None,
            )


async def test_three_nodes_share_one_room(tmp_path: Path, nursery: trio.Nursery) -> None:
    async with nodes(tmp_path, nursery, "a", "b", "c") as (a, b, c):
        bob = await b.mesh.register("bob")
        carol = await c.mesh.register("carol")
        hall = await a.mesh.create_room(a.owner, "hall")
        to_b = await connect_nodes(a, b)
        to_c = await connect_nodes(c, a)
        on_b = await share(a, to_b, hall["roomId"], b)
        on_c = await share(a, to_c, hall["roomId"], c)
        await b.mesh.join(bob, on_b)
        await c.mesh.join(carol, on_c)

        async with connect(b.url, bob) as bob_ws:
            # C -> A -> B: carol polls on C, bob listens on B's WebSocket
            first = await c.mesh.send(carol, on_c, "hello from C")
            heard = await bob_ws.expect("message", messageId=first["messageId"])
            assert heard["senderName"] == "carol@mesh-c"
            assert (heard["origin"], heard["trustLevel"]) == (c.did, "federated")
            # B -> A -> C
            await bob_ws.send(type="send_message", roomId=on_b, content="hello from B")
            mine = await bob_ws.expect("message", content="hello from B")
            got = await wait_for_messages(c, carol, on_c, 2)
            assert [m["messageId"] for m in got] == [first["messageId"], mine["messageId"]]
            assert got[1]["senderName"] == "bob@mesh-b"
            assert got[1]["origin"] == b.did
            # A has both, each once; nothing went back where it came from
            on_a = await wait_for_messages(a, a.owner, hall["roomId"], 2)
            assert [m["content"] for m in on_a] == ["hello from C", "hello from B"]
            # A's links to B and C relay in order: anything sent back or twice
            # would come before a message A's owner sends now
            mark = await a.mesh.send(a.owner, hall["roomId"], "mark from A")
            frames = await bob_ws.until("message", timeout=20, messageId=mark["messageId"])
            assert [f["messageId"] for f in frames if f["type"] == "message"] == [mark["messageId"]]
            page = await wait_for_message(c, carol, on_c, mark["messageId"])
            assert [m["content"] for m in page] == ["hello from C", "hello from B", "mark from A"]

            # a managed bot on C answers bob on B: the ordinary bot path, both ways
            spawn = {"name": "echo", "type": "echo", "model": "none", "rooms": [on_c]}
            r = await c.http.post("/api/agents/spawn", json=spawn, headers=c.owner.headers)
            assert r.status_code == 201, r.text

            async def echo_joined() -> bool:
                room = await c.get(f"/api/rooms/{on_c}")
                return "echo" in {m["name"] for m in room["members"]}

            await wait_for(echo_joined, 20, interval=0.1)
            await bob_ws.send(type="send_message", roomId=on_b, content="ping")
            echo = await bob_ws.expect("message", timeout=20, content="echo: ping")
            assert (echo["senderName"], echo["origin"]) == ("echo@mesh-c", c.did)
            assert echo["trustLevel"] == "federated"


async def test_a_misbehaving_peer_is_held_to_this_nodes_rules(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    # the per-peer limit refills at 10 events a second, in bursts of 30
    env = {"MESH_RATE_FEDERATION_RELAY": "600/1min:30"}
    async with nodes(tmp_path, nursery, "a", "b", env=env) as (a, b):
        alice = await a.mesh.register("alice")
        room = await a.mesh.create_room(a.owner, "guarded")
        await a.mesh.join(alice, room["roomId"])
        connection_id = await connect_nodes(a, b)
        await share(a, connection_id, room["roomId"], b)
        note = await a.mesh.send(alice, room["roomId"], "alice's note")
        # the test speaks as node B, with B's own key (and claims another name)
        identity = load_or_create_node_identity(b.data_dir)
        seqs = iter(range(1, 10_000))

        async def relay(events: list[Any], *, connection: str = connection_id) -> httpx.Response:
            raw = json.dumps({"connectionId": connection, "events": events}).encode()
            headers = sign_request(identity, "POST", "/api/federation/relay", raw, audience=a.did)
            headers["Content-Type"] = "application/json"
            return await a.http.post("/api/federation/relay", content=raw, headers=headers)

        def by(name: str = "mallory", did: str = b.did, pid: str | None = None) -> dict[str, Any]:
            return {
                "id": pid or new_id(),
                "name": name,
                "kind": "human",
                "type": "human",
                "node": {"did": did, "name": "Mesh Admin"},
            }

        base = {"room": room["roomId"], "by": by()}

        def event(kind: str, **fields: Any) -> dict[str, Any]:
            return {"seq": next(seqs), **base, "kind": kind, **fields}

        def message(content: str, **extra: Any) -> dict[str, Any]:
            fields = {"messageId": new_id(), "content": content, "createdAt": 1, **extra}
            return event("message", **fields)

        ok = message("mallory was here")
        again = {**ok, "seq": next(seqs)}  # the same message under a new position
        r = await relay(
            [
                ok,
                again,
                event("delete", messageId=note["messageId"]),  # not hers
                event("edit", messageId=note["messageId"], content="owned"),
                message("x" * 17_000),  # over the content limit (16 KiB)
                {**message("as alice"), "by": by("alice", did=a.did, pid=alice.participant_id)},
                {**message("as a third node"), "by": by("eve", did=load_did(tmp_path))},
                {**message("elsewhere"), "room": new_id()},
                {**message("no position"), "seq": None},
                event("nonsense"),
                "not an object",
            ]
        )
        assert r.status_code == 200, r.text
        results = [(x["status"], x.get("code")) for x in r.json()["results"]]
        assert results == [
            ("ok", None),
            ("duplicate", None),
            ("refused", "forbidden"),
            ("refused", "forbidden"),
            ("refused", "content_too_large"),
            ("refused", "own_participant"),
            ("refused", "not_peer_participant"),
            ("refused", "room_not_shared"),
            ("refused", "invalid_event"),
            ("refused", "invalid_event"),
            ("refused", "invalid_event"),
        ]
        # the same batch again: every position is known, nothing is applied twice
        r = await relay([ok])
        assert [x["status"] for x in r.json()["results"]] == ["duplicate"]
        page = await a.mesh.messages(alice, room["roomId"])
        # the name comes from the connection (Mesh B), not from what B claims
        assert [(m["senderName"], m["content"]) for m in page] == [
            ("alice", "alice's note"),
            ("mallory@mesh-b", "mallory was here"),
        ]
        assert page[1]["editedAt"] is None
        assert page[1]["trustLevel"] == "federated"
        # a room preset binds remote participants like local ones
        r = await a.http.post(
            f"/api/rooms/{room['roomId']}/permissions/preset",
            json={"preset": "read_only"},
            headers=a.owner.headers,
        )
        assert r.status_code == 200, r.text
        refused = message("in a read-only room")
        r = await relay([refused])
        assert [x["code"] for x in r.json()["results"]] == ["forbidden"]
        r = await a.http.post(
            f"/api/rooms/{room['roomId']}/permissions/preset",
            json={"preset": "default"},
            headers=a.owner.headers,
        )
        assert r.status_code == 200, r.text
        # a message is recognized by its id, not only its position: one that
        # is not here is applied when it comes again (after a store failure,
        # or, as here, a refusal that no longer holds); an edit is not
        edit = event("edit", messageId=ok["messageId"], content="mallory was here!")
        r = await relay([refused, edit])
        assert [x["status"] for x in r.json()["results"]] == ["ok", "ok"]
        r = await relay([refused, edit])
        assert [x["status"] for x in r.json()["results"]] == ["duplicate", "duplicate"]

        # not signed, forged, replayed, for a connection that is not B's, too many events
        r = await a.http.post("/api/federation/relay", json={"events": []})
        assert_error(r, 401, "unsigned")
        raw = json.dumps({"connectionId": connection_id, "events": [message("forged")]}).encode()
        forger = load_or_create_node_identity(tmp_path / "forger")
        headers = sign_request(forger, "POST", "/api/federation/relay", raw, audience=a.did)
        headers["X-Mesh-DID"] = b.did  # B's name, another key
        r = await a.http.post("/api/federation/relay", content=raw, headers=headers)
        assert_error(r, 401, "bad_signature")
        raw = json.dumps({"connectionId": connection_id, "events": [message("once")]}).encode()
        headers = sign_request(identity, "POST", "/api/federation/relay", raw, audience=a.did)
        headers["Content-Type"] = "application/json"
        r = await a.http.post("/api/federation/relay", content=raw, headers=headers)
        assert [x["status"] for x in r.json()["results"]] == ["ok"]
        r = await a.http.post("/api/federation/relay", content=raw, headers=headers)
        assert_error(r, 401, "replayed")
        assert_error(await relay([], connection=new_id()), 404, "connection_not_found")
        assert_error(await relay([{}] * 501), 400, "too_many_events")

        # the per-peer rate limit: 429 with Retry-After part way through a
        # batch; sent again, the batch resumes where it stopped (what was
        # applied is not charged or applied again) until all of it is in
        batch = [message(f"burst {i}") for i in range(40)]
        r = await relay(batch)
        assert_error(r, 429, "rate_limited")
        with trio.fail_after(30):
            while r.status_code == 429:
                # real time: the limiter runs in node A's own process, on its clock
                await trio.sleep(float(r.headers["Retry-After"]))
                r = await relay(batch)
        assert r.status_code == 200, r.text
        statuses = [x["status"] for x in r.json()["results"]]
        assert (statuses[0], statuses[-1]) == ("duplicate", "ok"), statuses
        page = await a.mesh.messages(alice, room["roomId"], limit=200)
        assert [m["content"] for m in page[4:]] == [f"burst {i}" for i in range(40)]


def load_did(tmp_path: Path) -> str:
    """The DID of a node that is not connected to anyone."""
    return load_or_create_node_identity(tmp_path / "stranger").did
