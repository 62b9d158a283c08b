"""Who a peer may speak for, between real nodes (``python -m quart_mesh
serve`` subprocesses on loopback, decision 0058): a node that relays for a
third node cannot take over, or make up, the people of a node this one is
connected with; a remote participant is bound to the node that introduced
it; a room override gives a relayed participant nothing beyond Tier 4; and a
relayed time outside the sane window is replaced by the time it arrived.

The forged relays are signed with the real nodes' own keys (the test speaks
as node M, or B), through :func:`relay_as` alone."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from quart_mesh.federation.signing import sign_request
from quart_mesh.identity import load_or_create_node_identity
from quart_mesh.ids import new_id
from quart_mesh.records import now_ms
from tests.e2e.test_relay import (
    Node,
    connect_nodes,
    load_did,
    nodes,
    share,
    wait_for_message,
)
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(120)

#: beyond the node's position for any genuine event of these tests
FORGED = 1_000_000


async def relay_as(
    sender: Node, receiver: Node, connection_id: str, events: list[dict[str, Any]]
) -> list[tuple[str, str | None]]:
    """Relay *events* to *receiver* as node *sender* (signed with its own
    key, as its link would); each event's (status, code)."""
    identity = load_or_create_node_identity(sender.data_dir)
    raw = json.dumps({"connectionId": connection_id, "events": events}).encode()
    headers = sign_request(identity, "POST", "/api/federation/relay", raw, audience=receiver.did)
    headers["Content-Type"] = "application/json"
    r: httpx.Response = await receiver.http.post(
        "/api/federation/relay", content=raw, headers=headers
    )
    assert r.status_code == 200, r.text
    return [(x["status"], x.get("code")) for x in r.json()["results"]]


def person(name: str, did: str, pid: str | None = None, node: str = "Mesh B") -> dict[str, Any]:
    return {
        "id": pid or new_id(),
        "name": name,
        "kind": "human",
        "type": "human",
        "node": {"did": did, "name": node},
    }


def message(seq: int, room: str, by: dict[str, Any], content: str, **extra: Any) -> dict[str, Any]:
    fields = {"messageId": new_id(), "content": content, "createdAt": now_ms(), **extra}
    return {"seq": seq, "kind": "message", "room": room, "by": by, **fields}


async def test_a_node_speaks_only_for_its_own_people(tmp_path: Path, nursery: trio.Nursery) -> None:
    async with nodes(tmp_path, nursery, "a", "b", "m") as (a, b, m):
        bob = await b.mesh.register("bob")
        # B shares its room with A, where bob has spoken
        b_room = (await b.mesh.create_room(b.owner, "b-room"))["roomId"]
        await b.mesh.join(bob, b_room)
        to_b = await connect_nodes(a, b)
        on_a = await share(b, to_b, b_room, a)
        await a.mesh.join(a.owner, on_a)
        said = await b.mesh.send(bob, b_room, "bob here")
        [heard] = [
            x
            for x in await wait_for_message(a, a.owner, on_a, said["messageId"])
            if x["messageId"] == said["messageId"]
        ]
        remote_bob = heard["senderId"]
        assert (heard["senderName"], heard["origin"]) == ("bob@mesh-b", b.did)
        before = await a.get(f"/api/participants/{remote_bob}")

        # M, connected to A (not to B), shares its own room with A
        to_m = await connect_nodes(a, m)
        m_room = (await m.mesh.create_room(m.owner, "m-room"))["roomId"]
        on_a_m = await share(m, to_m, m_room, a)
        await a.mesh.join(a.owner, on_a_m)
        stranger = load_did(tmp_path)  # a node A is not connected with
        other = load_or_create_node_identity(tmp_path / "other").did  # nor with this one
        xavier = person("xavier", stranger, node="Mesh X")
        results = await relay_as(
            m,
            a,
            to_m,
            [
                # B's own bob, said by M: refused (A hears B's people from B)
                message(1, m_room, person("bob", b.did, bob.participant_id), "bob (not)"),
                # a new person of B, made up by M: refused too
                message(2, m_room, person("eve", b.did), "eve@mesh-b (not)"),
                # a person of a node A does not know: M may introduce it
                message(3, m_room, xavier, "xavier, through M"),
                # another node that calls itself "Mesh B": not B's handle here
                message(4, m_room, person("mallory", other, node="Mesh B"), "mallory"),
            ],
        )
        assert results == [
            ("refused", "not_peer_participant"),
            ("refused", "not_peer_participant"),
            ("ok", None),
            ("ok", None),
        ]
        # bob is unchanged on A; nobody else looks like B's
        assert await a.get(f"/api/participants/{remote_bob}") == before
        names = {p["name"]: p for p in await a.get("/api/participants")}
        assert [n for n in names if n.endswith("@mesh-b")] == ["bob@mesh-b"]
        assert names["xavier@mesh-x"]["origin"] == stranger
        assert names["mallory@mesh-b-via-mesh-m"]["origin"] == other
        page = await a.mesh.messages(a.owner, on_a_m)
        assert [(x["senderName"], x["content"]) for x in page] == [
            ("xavier@mesh-x", "xavier, through M"),
            ("mallory@mesh-b-via-mesh-m", "mallory"),
        ]

        # B's own relays go on as before, as the same participant
        again = await b.mesh.send(bob, b_room, "still bob")
        page = await wait_for_message(a, a.owner, on_a, again["messageId"])
        assert [x["senderId"] for x in page] == [remote_bob, remote_bob]

        # xavier as M introduced him is M's to speak for: when B relays the
        # same person in its own room, that is B's introduction, another
        # participant — B can neither speak as M's nor silence it
        results = await relay_as(b, a, to_b, [message(FORGED, b_room, xavier, "xavier via B")])
        assert results == [("ok", None)]
        page = await a.mesh.messages(a.owner, on_a)
        assert [x["content"] for x in page] == ["bob here", "still bob", "xavier via B"]
        via_b = page[-1]
        via_m = (await a.mesh.messages(a.owner, on_a_m))[0]
        assert via_b["senderId"] != via_m["senderId"]
        assert via_b["senderName"] == "xavier-2@mesh-x"


async def test_relayed_actions_stay_at_tier_4_and_in_time(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    async with nodes(tmp_path, nursery, "a", "b") as (a, b):
        alice = await a.mesh.register("alice")
        room = (await a.mesh.create_room(a.owner, "guarded"))["roomId"]
        await a.mesh.join(alice, room)
        connection_id = await connect_nodes(a, b)
        mirror = await share(a, connection_id, room, b)
        note = await a.mesh.send(alice, room, "alice's note")
        await b.mesh.join(b.owner, mirror)
        own = await b.mesh.send(b.owner, mirror, "B's owner here")
        page = await wait_for_message(a, alice, room, own["messageId"])
        remote_owner = page[-1]["senderId"]
        await wait_for_message(b, b.owner, mirror, note["messageId"])

        # A's owner allows B's owner (here) to delete messages in the room:
        # a relayed participant stays at Tier 4, so it still deletes only its own
        r = await a.http.post(
            f"/api/rooms/{room}/permissions",
            json={
                "targetType": "participant",
                "target": remote_owner,
                "permission": "messages.delete",
                "effect": "allow",
            },
            headers=a.owner.headers,
        )
        assert r.status_code == 201, r.text
        for message_id in (note["messageId"], own["messageId"]):  # allowed on B, both
            r = await b.http.delete(
                f"/api/rooms/{mirror}/messages/{message_id}", headers=b.owner.headers
            )
            assert r.status_code == 200, r.text

        async def own_deleted() -> bool:  # relayed in order: the first one was answered
            page = await a.mesh.messages(alice, room)
            return own["messageId"] not in [x["messageId"] for x in page]

        await wait_for(own_deleted, 20, interval=0.1)
        page = await a.mesh.messages(alice, room)
        assert [x["messageId"] for x in page] == [note["messageId"]]

        # relayed times: kept within the window, else replaced by the time of arrival
        hour, day = 3600 * 1000, 24 * 3600 * 1000
        tim = person("tim", b.did)
        start = now_ms()
        times = {
            "from 1970": 0,
            "from next week": start + 7 * day,
            "a minute ahead": start + 60 * 1000,
            "an hour ago": start - hour,
            "a month and a day ago": start - 31 * day,
        }
        events = [
            message(FORGED + n, room, tim, content, createdAt=created)
            for n, (content, created) in enumerate(times.items())
        ]
        events.append(message(FORGED + 10, room, tim, "before 1970", createdAt=-1))
        results = await relay_as(b, a, connection_id, events)
        end = now_ms()
        assert results == [("ok", None)] * 5 + [("refused", "invalid_event")]
        got = {x["content"]: x for x in (await a.mesh.messages(alice, room))[1:]}
        assert list(got) == list(times)

        def ms(m: dict[str, Any]) -> int:
            return int(datetime.fromisoformat(m["timestamp"]).timestamp() * 1000)

        for content in ("from 1970", "from next week", "a month and a day ago"):
            assert start <= ms(got[content]) <= end, got[content]
            assert got[content]["timestampReplaced"] is True
        # a little ahead (within the clock skew allowed) is taken as now, unmarked
        assert start <= ms(got["a minute ahead"]) <= end
        assert ms(got["an hour ago"]) == times["an hour ago"]
        for content in ("a minute ahead", "an hour ago"):
            assert "timestampReplaced" not in got[content]
