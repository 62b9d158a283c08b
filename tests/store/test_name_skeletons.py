"""Migration 0021_names on a store that already holds lookalike names: it
completes, the older name keeps the skeleton, and a new lookalike is still
refused by the store's unique index (decision 0056)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import command
from sqlalchemy.exc import IntegrityError

from quart_mesh.names import name_skeleton
from quart_mesh.records import Participant, Room
from quart_mesh.store import Database
from quart_mesh.store import accounts as accounts_repo
from quart_mesh.store import rooms as rooms_repo
from quart_mesh.store.health import alembic_config

CYRILLIC_O = "\u043e"

_PARTICIPANT = sa.text(
    "INSERT INTO participants (participant_id, name, name_key, kind, type, role,"
    " description, created_at) VALUES (:id, :name, :key, 'human', 'human', 'member', '', :at)"
)
_ROOM = sa.text(
    "INSERT INTO rooms (room_id, kind, name, name_key, description, created_at)"
    " VALUES (:id, :kind, :name, :key, '', :at)"
)


def _at_0020(url: str) -> None:
    """A store migrated to 0020, holding names that 0021 finds alike."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0020")
            people = [
                ("01AAAAAAAAAAAAAAAAAAAAAAA1", "owner", 1),
                ("01AAAAAAAAAAAAAAAAAAAAAAA2", CYRILLIC_O + "wner", 2),
                ("01AAAAAAAAAAAAAAAAAAAAAAA3", "\uff4fwner", 3),  # fullwidth, not NFKC
                ("01AAAAAAAAAAAAAAAAAAAAAAA4", "ALICE", 4),
                ("01AAAAAAAAAAAAAAAAAAAAAAA5", "\u0430lice", 5),  # a Cyrillic a
            ]
            for pid, name, at in people:
                conn.execute(
                    _PARTICIPANT, {"id": pid, "name": name, "key": name.casefold(), "at": at}
                )
            rooms = [
                ("01BBBBBBBBBBBBBBBBBBBBBBB1", "room", "Town Square", 1),
                ("01BBBBBBBBBBBBBBBBBBBBBBB2", "room", "T" + CYRILLIC_O + "wn Square", 2),
                ("01BBBBBBBBBBBBBBBBBBBBBBB3", "dm", "dm", 3),
                ("01BBBBBBBBBBBBBBBBBBBBBBB4", "dm", "dm", 4),
            ]
            for rid, kind, name, at in rooms:
                key = name.casefold() if kind == "room" else None
                conn.execute(_ROOM, {"id": rid, "kind": kind, "name": name, "key": key, "at": at})
    finally:
        engine.dispose()


async def test_the_upgrade_keeps_lookalikes_and_the_older_keeps_the_skeleton(
    store_url: str,
) -> None:
    _at_0020(store_url)
    db = Database(store_url)
    await db.open()  # migrates to head: must not fail on the lookalikes
    try:

        def skeletons(conn: sa.Connection) -> tuple[dict[str, Any], ...]:
            people = conn.execute(
                sa.text("SELECT name, name_skeleton, folded_skeleton FROM participants")
            )
            rooms = conn.execute(
                sa.text("SELECT room_id, name_skeleton, folded_skeleton FROM rooms")
            )
            return {r[0]: tuple(r[1:]) for r in people}, {r[0]: tuple(r[1:]) for r in rooms}

        people, rooms = await db.read(skeletons)
        assert people == {
            "owner": ("owner", "owner"),
            CYRILLIC_O + "wner": (None, None),
            "\uff4fwner": (None, None),
            "ALICE": ("allce", "alice"),
            # its lower case looks like ALICE's: that key stays ALICE's
            "\u0430lice": ("alice", None),
        }
        assert rooms == {
            "01BBBBBBBBBBBBBBBBBBBBBBB1": ("town square", "town square"),
            "01BBBBBBBBBBBBBBBBBBBBBBB2": (None, None),
            "01BBBBBBBBBBBBBBBBBBBBBBB3": (None, None),
            "01BBBBBBBBBBBBBBBBBBBBBBB4": (None, None),
        }
        # a new lookalike meets the older name's skeleton
        assert await db.read(lambda conn: accounts_repo.name_conflict(conn, "0WNER")) == (
            "name_confusable",
            "owner",
        )
        assert await db.read(lambda conn: accounts_repo.name_conflict(conn, "alice2")) is None
        assert await db.read(lambda conn: rooms_repo.room_name_conflict(conn, "town square ")) == (
            "name_confusable",
            "Town Square",
        )
        # and the unique index refuses it even unchecked (another process's race)
        intruder = Participant("01AAAAAAAAAAAAAAAAAAAAAAA9", "0WNER", "human", "human", "member", 9)
        room = Room("01BBBBBBBBBBBBBBBBBBBBBBB9", "room", "T0wn Square", "", None, 9)

        def refused(conn: sa.Connection) -> list[bool]:
            answers = []
            for insert in (
                lambda: accounts_repo.insert_participant(conn, intruder, None),
                lambda: rooms_repo.insert_room(conn, room),
            ):
                try:
                    with conn.begin_nested():
                        insert()
                except IntegrityError:
                    answers.append(True)
                else:
                    answers.append(False)
            return answers

        assert await db.write(refused) == [True, True]
        assert name_skeleton("T0wn Square") == "town square"
    finally:
        await db.close()
