"""PostgreSQL as a store that several processes write to (issue 15):
64-bit cursors, migrations under a lock, and cursors that commit in order.

Skipped on SQLite (run with ``--store postgresql``): one writer at a time
there makes commit order the cursor order by construction.
"""

from __future__ import annotations

import threading
from functools import partial
from pathlib import Path

import pytest
import sqlalchemy as sa
import trio
from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from quart_mesh.ids import new_id
from quart_mesh.records import now_ms
from quart_mesh.store import Database, database, messages, outbox, relay, rooms, state
from quart_mesh.store import cluster as cluster_repo
from quart_mesh.store import schema as s
from quart_mesh.store.dialect import SEQUENCE_LOCK
from tests import stores
from tests.store import rows


@pytest.fixture
def pg(cluster: stores.Cluster, opened: Database) -> Database:
    """A migrated PostgreSQL store."""
    return opened


def _set_sequence(conn: Connection, table: str, value: int) -> None:
    conn.execute(
        sa.text(f"SELECT setval(pg_get_serial_sequence('{table}', 'seq'), :v)"), {"v": value}
    )


def _shared_room(conn: Connection) -> str:
    room_id = rows.room(conn)
    relay.add_share(conn, room_id, new_id(), room_id, "out")
    return room_id


def test_cursors_past_two_to_the_31(pg: Database) -> None:
    big = 2**31 + 5
    with rows.writing(pg.engine).begin() as conn:
        room_id, pid = _shared_room(conn), rows.participant(conn)
        _set_sequence(conn, "messages", big)
        _set_sequence(conn, "relay_outbox", big)
        sent = messages.insert_message(conn, rows.message(room_id, "far"))
        relay.record(conn, room_id, "message", {"messageId": sent.message_id}, pid)
        rooms.add_member(conn, room_id, pid, now_ms())
        state.advance_reads(conn, pid, {room_id: sent.seq})
    assert sent.seq == big + 1
    with pg.engine.connect() as conn:
        page = messages.list_messages(conn, room_id, before=None, since=big, limit=10)
        assert [(m.seq, m.content) for m in page] == [(big + 1, "far")]
        assert relay.outbox_head(conn) == big + 1
        assert messages.head_seq(conn) == big + 1
        assert state.unread_summary(conn, pid, "x")[room_id][2] == big + 1
        # and the sequences themselves go on to 2**63 - 1
        maxima = conn.execute(
            sa.text(
                "SELECT sequencename, data_type::text, max_value FROM pg_sequences"
                " WHERE sequencename IN ('messages_seq_seq', 'relay_outbox_seq_seq')"
            )
        ).all()
        assert sorted(maxima) == [
            ("messages_seq_seq", "bigint", 2**63 - 1),
            ("relay_outbox_seq_seq", "bigint", 2**63 - 1),
        ]


def test_an_existing_database_is_upgraded_to_64_bit_cursors(cluster: stores.Cluster) -> None:
    url = cluster.url(f"upgrade_{new_id().lower()}")
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:  # the schema as 0015 left it, with a message
            cfg = AlembicConfig()
            cfg.set_main_option(
                "script_location", str(Path(database.__file__).parent / "migrations")
            )
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0015")
            # a room as 0015 stores it (the store's insert writes today's columns)
            room_id = new_id()
            conn.execute(
                sa.text(
                    "INSERT INTO rooms (room_id, kind, name, name_key, description, created_at)"
                    " VALUES (:id, 'room', :name, :name, '', 0)"
                ),
                {"id": room_id, "name": f"r{room_id[-8:].lower()}"},
            )
            # and a message as 0015 stores it (today's insert writes the search vector too)
            before = conn.execute(
                sa.text(
                    "INSERT INTO messages (message_id, room_id, sender_id, sender_name,"
                    " content, created_at) VALUES (:id, :room, :id, 'alice', 'hi', 0)"
                    " RETURNING seq"
                ),
                {"id": new_id(), "room": room_id},
            ).scalar_one()
            assert _type(conn, "messages", "seq") == "integer"
    finally:
        engine.dispose()
    db = Database(url)
    trio.run(db.open)
    try:
        with db.engine.begin() as conn:
            for table, column in [
                ("messages", "seq"),
                ("relay_outbox", "seq"),
                ("room_reads", "last_read_seq"),
            ]:
                assert _type(conn, table, column) == "bigint"
            _set_sequence(conn, "messages", 2**40)
            after = rows.send(conn, room_id)
            page = messages.list_messages(conn, room_id, before=None, since=0, limit=10)
        assert [m.seq for m in page] == [before, after] == [before, 2**40 + 1]
    finally:
        trio.run(db.close)


def _type(conn: Connection, table: str, column: str) -> str:
    query = sa.text(
        "SELECT data_type FROM information_schema.columns"
        " WHERE table_name = :table AND column_name = :column"
    )
    return str(conn.execute(query, {"table": table, "column": column}).scalar_one())


def _head() -> str:
    versions = Path(database.__file__).parent / "migrations"
    head = ScriptDirectory(str(versions)).get_current_head()
    assert head is not None
    return head


async def test_processes_starting_together_migrate_once(cluster: stores.Cluster) -> None:
    url = cluster.url(f"starts_{new_id().lower()}")
    opened = [Database(url) for _ in range(4)]
    try:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for db in opened:  # each opens in a thread of its own, at once
                    nursery.start_soon(db.open)
        version = await opened[0].read(
            lambda conn: conn.exec_driver_sql("SELECT version_num FROM alembic_version").all()
        )
        assert version == [(_head(),)]
    finally:
        for db in opened:
            await db.close()


def _after(engine: sa.Engine, query: sa.Select[tuple[int]], cursor: int) -> list[int]:
    with engine.connect() as conn:
        return list(conn.execute(query.where(sa.column("seq") > cursor).order_by("seq")).scalars())


@pytest.mark.parametrize("log", ["messages", "relay_outbox"])
def test_a_reader_never_passes_a_cursor_a_slower_writer_fills(pg: Database, log: str) -> None:
    """Writer A takes a cursor and holds its transaction open; writer B takes
    the next and commits. A reader that read after B's commit must not have
    passed A's cursor, or it never sees A's row (the "cursor skip")."""
    with rows.writing(pg.engine).begin() as conn:
        room_id, pid = _shared_room(conn), rows.participant(conn)
        rows.send(conn, room_id)
        relay.record(conn, room_id, "message", {}, pid)
    table = s.messages if log == "messages" else s.relay_outbox
    query = sa.select(table.c.seq)
    start = _after(pg.engine, query, 0)[-1]

    def write(conn: Connection) -> None:
        if log == "messages":
            rows.send(conn, room_id)
        else:
            relay.record(conn, room_id, "reaction", {}, pid)

    seen: list[int] = []
    b_done = threading.Event()

    def writer_b() -> None:
        with rows.writing(pg.engine).begin() as conn:
            write(conn)
        b_done.set()

    thread = threading.Thread(target=writer_b)
    with rows.writing(pg.engine).begin() as conn:
        write(conn)  # writer A: a cursor taken, not committed
        thread.start()
        b_done.wait(rows.WAITS)  # B commits now if nothing holds it back
        seen += _after(pg.engine, query, start)  # the reader, while A is open
    thread.join(30)
    assert not thread.is_alive()
    cursor = seen[-1] if seen else start
    seen += _after(pg.engine, query, cursor)  # the reader goes on from its cursor
    assert len(seen) == 2, f"the reader skipped a row: it saw {seen} after {start}"
    assert seen == sorted(seen)


def test_a_savepoint_rolled_back_releases_the_cursor_lock_and_it_is_taken_again(
    pg: Database,
) -> None:
    with rows.writing(pg.engine).begin() as conn:
        room_id = rows.room(conn)
    probe = f"SELECT pg_try_advisory_xact_lock({SEQUENCE_LOCK})"

    def free() -> bool:
        with pg.engine.connect() as other:
            return bool(other.exec_driver_sql(probe).scalar())

    with rows.writing(pg.engine).begin() as conn:
        savepoint = conn.begin_nested()
        rows.send(conn, room_id)
        assert not free()
        savepoint.rollback()  # a unit that failed in a group commit
        assert free()
        rows.send(conn, room_id)  # a later unit of the same transaction
        assert not free()
        rows.send(conn, room_id)
    assert free()


@pytest.mark.parametrize("group_commit", [False, True])
async def test_a_write_aborted_by_a_deadlock_runs_again(pg: Database, group_commit: bool) -> None:
    """Writer B (another process) holds the cursor lock; this node's write
    locks a row, then waits for the cursor lock; B then waits for the row.
    PostgreSQL aborts one of them: when it is this node's, it runs again."""
    pid = await pg.write(rows.participant)
    room_id = await pg.write(rows.room)
    other = sa.create_engine(pg.url)
    touch = s.participants.update().where(s.participants.c.participant_id == pid)
    seqs: list[int] = []

    def unit(conn: Connection) -> int:
        conn.execute(touch.values(description="node"))
        return rows.send(conn, room_id)

    async def write() -> None:
        seqs.append(await pg.write(unit))

    try:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                if group_commit:
                    await nursery.start(pg.run)
                with other.begin() as b:
                    # B's own deadlock check comes late: this node's is the one aborted
                    b.exec_driver_sql("SET LOCAL deadlock_timeout = '30s'")
                    b.exec_driver_sql(f"SELECT pg_advisory_xact_lock({SEQUENCE_LOCK})")
                    nursery.start_soon(write)
                    while not await pg.read(_waits_for_cursor_lock):
                        await trio.sleep(0.01)
                    # the deadlock closes here; B goes on once the write is aborted
                    await trio.to_thread.run_sync(b.execute, touch.values(description="b"))
                # B committed: the write's second run goes on
                while not seqs:
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
        assert len(seqs) == 1
        with pg.engine.connect() as conn:
            query = sa.select(s.participants.c.description)
            found = conn.execute(query.where(s.participants.c.participant_id == pid))
            assert found.scalar_one() == "node"  # the second run committed after B
    finally:
        other.dispose()


def _waits_for_cursor_lock(conn: Connection) -> bool:
    query = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    return bool(conn.exec_driver_sql(query).scalar())


async def test_two_processes_writing_to_the_stream_commit_in_order(
    cluster: stores.Cluster,
) -> None:
    """Two stores on one database, as two processes: A's unit records an
    entry and holds its transaction open; B's unit, started meanwhile, waits
    for A's commit (the sequence lock is taken first), so a reader of the
    stream never sees B's row without A's before it."""
    url = cluster.url(f"stream_{new_id().lower()}")
    a, b = Database(url), Database(url)
    await a.open()
    await b.open()
    a.stream_origin, b.stream_origin = "a", "b"
    holding, release = threading.Event(), threading.Event()

    def slow(conn: Connection) -> None:
        outbox.change(conn, "invalidate", "test", "from a")
        holding.set()
        release.wait(rows.WAITS)

    def quick(conn: Connection) -> None:
        outbox.change(conn, "invalidate", "test", "from b")

    def waiting_for_a_lock(conn: Connection) -> int:
        query = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        return int(conn.exec_driver_sql(query).scalar_one())

    try:
        start = await a.read(cluster_repo.head_position)
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(a.write, slow)
                await trio.to_thread.run_sync(holding.wait)
                nursery.start_soon(b.write, quick)
                while not await a.read(waiting_for_a_lock):  # B waits for A now
                    await trio.sleep(0.01)
                assert await a.read(partial(cluster_repo.read_stream, after=start, limit=10)) == []
                release.set()
        found = await a.read(partial(cluster_repo.read_stream, after=start, limit=10))
        assert [(row.origin, row.entries) for row in found] == [
            ("a", [outbox.Change("invalidate", ("test", "from a"))]),
            ("b", [outbox.Change("invalidate", ("test", "from b"))]),
        ]
        assert found[0].position < found[1].position
    finally:
        release.set()
        await a.close()
        await b.close()
