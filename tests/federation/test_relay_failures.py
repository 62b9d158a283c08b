"""The relay receiver when the store fails part way through a batch (fault
injected into the message insert): nothing is marked applied that was not,
so the peer's resent batch delivers every message once. In-process node,
real SQLite file; the peer is played by its key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError

import quart_mesh.services.messages as messages_service
from quart_mesh import MeshApp
from quart_mesh.errors import MeshError
from quart_mesh.identity import load_or_create_node_identity
from quart_mesh.ids import new_id
from quart_mesh.node import Node
from quart_mesh.records import Message, Room, now_ms
from quart_mesh.store import connections as connections_repo
from quart_mesh.store import messages as messages_repo
from quart_mesh.store import relay as relay_repo
from quart_mesh.store import rooms as rooms_repo

SENDER = new_id()


async def peer_with_a_shared_room(node: Node, tmp_path: Path) -> tuple[str, str, str]:
    """An accepted connection with a peer that shares a room: (peer DID,
    connection id, the room's id on the peer)."""
    did = load_or_create_node_identity(tmp_path / "peer").did
    connection_id, home_room, mirror = new_id(), new_id(), new_id()

    def write(conn: Connection) -> None:
        now = now_ms()
        row = connections_repo.ConnectionRow(
            connection_id, did, "Peer", "http://127.0.0.1:9", "outbound", "accepted", "", now, now
        )
        connections_repo.replace_connection(conn, row)
        rooms_repo.insert_room(conn, Room(mirror, "room", "lobby@peer", "", None, now, origin=did))
        relay_repo.add_share(conn, mirror, connection_id, home_room, "in")

    await node.db.write(write)
    return did, connection_id, home_room


def message(seq: int, room: str, did: str) -> dict[str, Any]:
    return {
        "seq": seq,
        "kind": "message",
        "room": room,
        "messageId": new_id(),
        "content": f"m{seq}",
        "createdAt": now_ms(),
        "by": {
            "id": SENDER,
            "name": "alice",
            "kind": "human",
            "type": "human",
            "node": {"did": did, "name": "Peer"},
        },
    }


def fail_once(monkeypatch: pytest.MonkeyPatch, message_id: str, error: Exception) -> None:
    """The first insert of *message_id* raises *error*."""
    real = messages_repo.insert_message
    failed: list[bool] = []

    def insert(conn: Connection, draft: Message) -> Message:
        if draft.message_id == message_id and not failed:
            failed.append(True)
            raise error
        return real(conn, draft)

    monkeypatch.setattr(messages_service.repo, "insert_message", insert)


@pytest.mark.parametrize(
    "error",
    [
        OperationalError("INSERT", {}, Exception("database is locked")),
        RuntimeError("a unit failed"),
    ],
    ids=["store-unavailable", "unit-error"],
)
async def test_a_failed_message_is_not_marked_applied(
    app: MeshApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    node = app.node
    did, connection_id, room = await peer_with_a_shared_room(node, tmp_path)
    relay = node.federation.relay
    assert relay is not None
    first = message(1, room, did)
    second = message(2, room, did)
    # a "to" on another node: a store read before the second is queued, so
    # the two may commit in different transactions
    second["to"] = {**first["by"], "id": new_id(), "name": "bob"}
    third = {
        "seq": 3,
        "kind": "edit",
        "room": room,
        "messageId": first["messageId"],
        "content": "m1 edited",
        "by": first["by"],
    }
    fail_once(monkeypatch, first["messageId"], error)
    batch = {"connectionId": connection_id, "events": [first, second, third]}
    with pytest.raises(MeshError) as refused:
        await relay.receiver.receive_relay(did, batch)
    assert refused.value.status == 503
    assert await node.db.read(lambda c: relay_repo.applied_of(c, connection_id)) == 0
    # the peer sends the batch again: each message once, the edit applied
    answer = await relay.receiver.receive_relay(did, batch)
    statuses = [r["status"] for r in answer["results"]]
    assert (statuses[0], statuses[2]) == ("ok", "ok"), statuses
    stored = await node.db.read(lambda c: messages_repo.get_message(c, first["messageId"]))
    assert stored is not None
    assert stored.content == "m1 edited"
    assert await node.db.read(lambda c: messages_repo.get_message(c, second["messageId"]))
    assert await node.db.read(lambda c: relay_repo.applied_of(c, connection_id)) == 3


async def test_positions_the_store_cannot_hold_are_refused(app: MeshApp, tmp_path: Path) -> None:
    node = app.node
    did, connection_id, room = await peer_with_a_shared_room(node, tmp_path)
    relay = node.federation.relay
    assert relay is not None
    events = [{**message(1, room, did), "seq": seq} for seq in (2**64, 0, -1, True, "1")]
    answer = await relay.receiver.receive_relay(
        did, {"connectionId": connection_id, "events": events}
    )
    assert [r["code"] for r in answer["results"]] == ["invalid_event"] * 5
