"""Remote participants' names (``name@node``) are held to the same rule among
themselves: a peer that relays lookalike names gets each one after the first
numbered, never two that read the same (decision 0056). A local name has no ``@``, so none
can be a remote one's lookalike. Two real node processes; port 0 loopback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from quart_mesh.federation.signing import sign_request
from quart_mesh.identity import load_or_create_node_identity
from quart_mesh.ids import new_id
from quart_mesh.names import name_skeleton
from tests.e2e.test_relay import connect_nodes, nodes, share

pytestmark = pytest.mark.e2e


async def test_a_peer_cannot_bring_two_names_that_read_the_same(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    async with nodes(tmp_path, nursery, "a", "b") as (a, b):
        alice = await a.mesh.register("alice")
        room = await a.mesh.create_room(a.owner, "shared")
        await a.mesh.join(alice, room["roomId"])
        connection_id = await connect_nodes(a, b)
        await share(a, connection_id, room["roomId"], b)
        identity = load_or_create_node_identity(b.data_dir)  # the test speaks as node B

        def message(seq: int, name: str) -> dict[str, Any]:
            by = {
                "id": new_id(),
                "name": name,
                "kind": "human",
                "type": "human",
                "node": {"did": b.did, "name": "Mesh B"},
            }
            fields = {"messageId": new_id(), "content": f"from {name!r}", "createdAt": 1}
            return {"seq": seq, "room": room["roomId"], "by": by, "kind": "message", **fields}

        names = ["mallory", "m\u0430llory", "\uff4dallory", "MALLORY"]  # Cyrillic a; fullwidth m
        events = [message(seq, name) for seq, name in enumerate(names, 1)]
        raw = json.dumps({"connectionId": connection_id, "events": events}).encode()
        headers = sign_request(identity, "POST", "/api/federation/relay", raw, audience=a.did)
        headers["Content-Type"] = "application/json"
        r: httpx.Response = await a.http.post("/api/federation/relay", content=raw, headers=headers)
        assert r.status_code == 200, r.text
        assert [x["status"] for x in r.json()["results"]] == ["ok"] * 4, r.text
        page = await a.mesh.messages(alice, room["roomId"])
        senders = [m["senderName"] for m in page]
        # each keeps its spelling (in NFKC), numbered so that none reads as another
        assert senders == [
            "mallory@mesh-b",
            "m\u0430llory-2@mesh-b",
            "mallory-3@mesh-b",
            "MALLORY-4@mesh-b",
        ]
        assert len({name_skeleton(name) for name in senders}) == 4
