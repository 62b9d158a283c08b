"""Each node's remote participants are its own (decision 0058), in the cases
the end-to-end tests (``tests/e2e/test_relay_speakers.py``) do not reach: a
hub that introduced someone before this node connected with that person's
home node neither merges with the home node's own participant nor silences
it; once connected, the hub no longer speaks for that node's people, and
after the connection ends it speaks only as its own introduction; the cap on
remote participants counts per introducing node. Also the store's side of a
relayed time replaced. In-process node, on either store; the peers are
played by their keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

import quart_mesh.federation.remote as remote_module
from quart_mesh import MeshApp
from quart_mesh.federation.inbound import Receiver
from quart_mesh.identity import load_or_create_node_identity
from quart_mesh.ids import new_id
from quart_mesh.node import Node
from quart_mesh.records import Room, now_ms
from quart_mesh.store import connections as connections_repo
from quart_mesh.store import messages as messages_repo
from quart_mesh.store import relay as relay_repo
from quart_mesh.store import rooms as rooms_repo
from quart_mesh.store.schema import participants


async def connected(node: Node, tmp_path: Path, name: str) -> tuple[str, str, str]:
    """An accepted connection with the peer *name*, which shares a room of
    its own: (its DID, the connection id, the room's id on the peer)."""
    did = load_or_create_node_identity(tmp_path / name).did
    connection_id, home_room, mirror = new_id(), new_id(), new_id()

    def write(conn: Connection) -> None:
        now = now_ms()
        row = connections_repo.ConnectionRow(
            connection_id, did, name, "http://127.0.0.1:9", "outbound", "accepted", "", now, now
        )
        connections_repo.replace_connection(conn, row)
        room = Room(mirror, "room", f"{name}-room@{name}", "", None, now, origin=did)
        rooms_repo.insert_room(conn, room)
        relay_repo.add_share(conn, mirror, connection_id, home_room, "in")

    await node.db.write(write)
    return did, connection_id, home_room


def person(did: str, pid: str | None = None) -> dict[str, Any]:
    node = {"did": did, "name": "Home"}
    return {"id": pid or new_id(), "name": "dave", "kind": "human", "type": "human", "node": node}


async def relay(
    receiver: Receiver, peer: tuple[str, str, str], seq: int, by: dict[str, Any]
) -> tuple[str, str | None]:
    """One message by *by*, relayed by *peer* in its room: (status, code)."""
    did, connection_id, room = peer
    event = {
        "seq": seq,
        "kind": "message",
        "room": room,
        "messageId": new_id(),
        "content": "hello",
        "createdAt": now_ms(),
        "by": by,
    }
    answer = await receiver.receive_relay(did, {"connectionId": connection_id, "events": [event]})
    [result] = answer["results"]
    return result["status"], result.get("code")


async def test_each_node_speaks_only_as_the_participants_it_introduced(
    app: MeshApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remote_module, "MAX_REMOTES", 2)
    node = app.node
    assert node.federation.relay is not None
    receiver = node.federation.relay.receiver
    hub = await connected(node, tmp_path, "hub")
    home_did = load_or_create_node_identity(tmp_path / "home").did
    stranger = load_or_create_node_identity(tmp_path / "stranger").did
    dave, xavier = person(home_did), person(stranger)
    # not connected with their nodes: the hub introduces them, as many as allowed
    assert [
        await relay(receiver, hub, 1, dave),
        await relay(receiver, hub, 2, xavier),
        await relay(receiver, hub, 3, person(stranger)),
    ] == [("ok", None), ("ok", None), ("refused", "too_many_participants")]

    def dave_as(introducer: str) -> Any:
        return node.db.read(lambda c: relay_repo.find_remote(c, introducer, home_did, dave["id"]))

    by_hub = await dave_as(hub[0])
    assert by_hub is not None

    # connected now: dave's own node speaks for him as its own participant,
    # not the hub's (nothing the hub said is his); the hub no longer speaks
    # for that node's people, old or new
    home = await connected(node, tmp_path, "home")
    assert home[0] == home_did
    assert await relay(receiver, home, 1, dave) == ("ok", None)
    by_home = await dave_as(home_did)
    assert by_home is not None
    assert by_home.participant_id != by_hub.participant_id
    assert await dave_as(hub[0]) == by_hub
    assert await relay(receiver, hub, 4, dave) == ("refused", "not_peer_participant")
    assert await relay(receiver, hub, 5, person(home_did)) == ("refused", "not_peer_participant")
    # the cap counts what each node introduced: the hub's are as they were
    assert await relay(receiver, hub, 6, person(stranger)) == ("refused", "too_many_participants")
    assert await relay(receiver, hub, 7, xavier) == ("ok", None)
    assert await relay(receiver, home, 2, person(home_did)) == ("ok", None)

    # the connection with dave's node ends: the hub speaks again, but only as
    # its own introduction, never as the home node's dave
    await node.db.write(
        lambda c: relay_repo.set_connection_status(c, home[1], "disconnected", now_ms())
    )
    assert await relay(receiver, hub, 8, dave) == ("ok", None)
    assert await dave_as(hub[0]) == by_hub
    assert await dave_as(home_did) == by_home


async def test_a_time_out_of_the_window_is_stored_replaced(app: MeshApp, tmp_path: Path) -> None:
    # the store's side of it (on either store); the window itself is
    # tested end to end (tests/e2e/test_relay_speakers.py)
    node = app.node
    assert node.federation.relay is not None
    did, connection_id, room = await connected(node, tmp_path, "peer")
    event = {
        "seq": 1,
        "kind": "message",
        "room": room,
        "messageId": new_id(),
        "content": "from 1970",
        "createdAt": 0,
        "by": person(did),
    }
    start = now_ms()
    answer = await node.federation.relay.receiver.receive_relay(
        did, {"connectionId": connection_id, "events": [event]}
    )
    assert answer["results"] == [{"seq": 1, "status": "ok"}]
    stored = await node.db.read(lambda c: messages_repo.get_message(c, event["messageId"]))
    assert stored is not None
    assert stored.time_replaced is True
    assert start <= stored.created_at <= now_ms()
    assert stored.to_json()["timestampReplaced"] is True


async def test_a_hub_cannot_make_up_people_who_look_like_a_known_nodes(
    app: MeshApp, tmp_path: Path
) -> None:
    node = app.node
    assert node.federation.relay is not None
    receiver = node.federation.relay.receiver
    hub = await connected(node, tmp_path, "hub")
    await connected(node, tmp_path, "Mesh B")  # the genuine Mesh B
    posing, asking, expired = (
        load_or_create_node_identity(tmp_path / name).did for name in ("x", "y", "z")
    )

    def rows(conn: Connection) -> None:
        # x asked to connect as "Mesh B", then withdrew; y asks now; z asked
        # longer ago than requests wait (expired, not yet deleted)
        for did, status, created in (
            (posing, "disconnected", now_ms()),
            (asking, "pending", now_ms()),
            (expired, "pending", 0),
        ):
            row = connections_repo.ConnectionRow(
                new_id(), did, "Mesh B", "http://127.0.0.1:9", "inbound", status, "", created, 0
            )
            connections_repo.replace_connection(conn, row)

    await node.db.write(rows)

    def claiming(did: str, name: str) -> dict[str, Any]:
        return {**person(did), "name": name, "node": {"did": did, "name": "Mesh B"}}

    # a node that only claimed the name, through the hub: shown via the hub
    assert await relay(receiver, hub, 1, claiming(posing, "carol")) == ("ok", None)
    # a node asking to connect speaks for its people itself, until its request expires
    assert await relay(receiver, hub, 2, claiming(asking, "yves")) == (
        "refused",
        "not_peer_participant",
    )
    assert await relay(receiver, hub, 3, claiming(expired, "zoe")) == ("ok", None)
    names = {
        p.name for p in await node.db.read(lambda c: _remote_names(c, (posing, asking, expired)))
    }
    assert names == {"carol@mesh-b-via-hub", "zoe@mesh-b-via-hub"}


def _remote_names(conn: Connection, dids: tuple[str, ...]) -> list[Any]:
    c = participants.c
    return list(conn.execute(sa.select(c.name).where(c.origin_did.in_(dids))))
