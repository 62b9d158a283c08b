"""Migration 0030_daily_use's columns in the store: a changed display name
or room description changes the snapshot's fingerprint (a cached snapshot
is not served after either)."""

from __future__ import annotations

from quart_mesh.store import Database
from quart_mesh.store import accounts as accounts_repo
from quart_mesh.store import rooms as rooms_repo
from quart_mesh.store.snapshot import fingerprint, participant_rows
from tests.store import rows


async def test_a_new_description_or_display_name_changes_the_fingerprint(store_url: str) -> None:
    db = Database(store_url)
    await db.open()
    try:
        await _changes(db)
    finally:
        await db.close()


async def _changes(db: Database) -> None:
    pid = await db.write(lambda conn: rows.participant(conn, "bob"))
    room_id = await db.write(lambda conn: rows.room(conn, "plans"))
    before = await db.read(fingerprint)

    await db.write(lambda conn: rooms_repo.set_description(conn, room_id, "new"))
    after_room = await db.read(fingerprint)
    assert after_room != before
    room = await db.read(lambda conn: rooms_repo.get_room(conn, room_id))
    assert room is not None
    assert room.description == "new"

    await db.write(lambda conn: accounts_repo.set_display_name(conn, pid, "Bob B"))
    after_name = await db.read(fingerprint)
    assert after_name != after_room
    assert [row[-1] for row in await db.read(participant_rows)] == ["Bob B"]
