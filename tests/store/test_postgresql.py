"""PostgreSQL as a store that several processes write to (issue 15):
64-bit cursors, migrations under a lock, and cursors that commit in order.

Skipped on SQLite (run with ``--store postgresql``): one writer at a time
there makes commit order the cursor order by construction.
"""

from __future__ import annotations

import contextlib
import threading
import time
from functools import partial

import pytest
import sqlalchemy as sa
import trio
from alembic import command
from sqlalchemy.engine import Connection

from quart_mesh.ids import new_id
from quart_mesh.records import now_ms
from quart_mesh.services.bus import Bus
from quart_mesh.store import Database, blocks, messages, outbox, relay, rooms, state
from quart_mesh.store import cluster as cluster_repo
from quart_mesh.store import schema as s
from quart_mesh.store.dialect import WRITE_LOCK, hold_write_lock
from quart_mesh.store.health import alembic_config, code_heads
from tests import stores
from tests.store import rows


@pytest.fixture
def pg(cluster: stores.Cluster, opened: Database) -> Database:
    """A migrated PostgreSQL store."""
    return opened


def _shared_room(conn: Connection) -> str:
    room_id = rows.room(conn)
    relay.add_share(conn, room_id, new_id(), room_id, "out")
    return room_id


def test_cursors_past_two_to_the_31(pg: Database) -> None:
    # positions are block << 20 | n (store/blocks.py): block 2**12 is past 2**31
    block = 2**12
    big = block << blocks.SHIFT
    with rows.writing(pg.engine).begin() as conn:
        room_id, pid = _shared_room(conn), rows.participant(conn)
        conn.execute(sa.text("SELECT setval('mesh_blocks', :v, false)"), {"v": block})
    with rows.writing(pg.engine).begin() as conn:
        sent = messages.insert_message(conn, rows.message(room_id, "far"))
        relay.record(conn, room_id, "message", {"messageId": sent.message_id}, pid)
        rooms.add_member(conn, room_id, pid, now_ms())
        state.advance_reads(conn, pid, {room_id: sent.seq})
    assert sent.seq == big > 2**31
    with pg.engine.connect() as conn:
        page = messages.list_messages(conn, room_id, before=None, since=big - 1, limit=10)
        assert [(m.seq, m.content) for m in page] == [(big, "far")]
        assert relay.outbox_head(conn) == big + 1
        assert messages.head_seq(conn) == big
        assert state.unread_summary(conn, pid, "x")[room_id][2] == big
        # and the blocks themselves go on to 2**63 - 1 (positions to 2**63 - 1 too)
        maxima = conn.execute(
            sa.text(
                "SELECT sequencename, data_type::text, max_value FROM pg_sequences"
                " WHERE sequencename = 'mesh_blocks'"
            )
        ).all()
        assert maxima == [("mesh_blocks", "bigint", 2**63 - 1)]


def test_an_existing_database_is_upgraded_to_64_bit_cursors(cluster: stores.Cluster) -> None:
    url = cluster.url(f"upgrade_{new_id().lower()}")
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:  # the schema as 0015 left it, with a message
            cfg = alembic_config()
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
            after = rows.send(conn, room_id)
            page = messages.list_messages(conn, room_id, before=None, since=0, limit=10)
        # positions in blocks since 0034 (store/blocks.py), after every old one
        assert [m.seq for m in page] == [before, after]
        assert after > before
    finally:
        trio.run(db.close)


def _type(conn: Connection, table: str, column: str) -> str:
    query = sa.text(
        "SELECT data_type FROM information_schema.columns"
        " WHERE table_name = :table AND column_name = :column"
    )
    return str(conn.execute(query, {"table": table, "column": column}).scalar_one())


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
        (head,) = code_heads()  # (one: the migrations are a line)
        assert version == [(head,)]
    finally:
        for db in opened:
            await db.close()


def _after(engine: sa.Engine, table: sa.Table, cursor: int) -> list[int]:
    """A reader: the positions after *cursor* up to where every one is final
    (read first), as every reader of cursors does (``store/blocks.py``)."""
    with engine.connect() as conn:
        final = blocks.final_seq(conn)
        assert final is not None
        query = sa.select(table.c.seq).where(table.c.seq > cursor, table.c.seq <= final)
        return list(conn.execute(query.order_by(table.c.seq)).scalars())


@pytest.mark.parametrize("log", ["messages", "relay_outbox"])
def test_a_reader_never_passes_a_cursor_a_slower_writer_fills(pg: Database, log: str) -> None:
    """Writer A takes a cursor and holds its transaction open; writer B takes
    the next and commits at once (it does not wait for A). A reader that
    reads after B's commit must not pass A's cursor, or it never sees A's
    row (the "cursor skip"): it stops below A's block until A commits."""
    with rows.writing(pg.engine).begin() as conn:
        room_id, pid = _shared_room(conn), rows.participant(conn)
        rows.send(conn, room_id)
        relay.record(conn, room_id, "message", {}, pid)
    table = s.messages if log == "messages" else s.relay_outbox
    start = _after(pg.engine, table, 0)[-1]

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
        assert b_done.wait(30), "B waited for A: writes do not commit concurrently"
        with pg.engine.connect() as other:  # B's row is there, committed...
            committed = other.execute(sa.select(sa.func.max(table.c.seq))).scalar_one()
        assert committed > start
        seen += _after(pg.engine, table, start)  # ...and the reader stops below A's
        assert seen == []
    thread.join(30)
    assert not thread.is_alive()
    cursor = seen[-1] if seen else start
    seen += _after(pg.engine, table, cursor)  # the reader goes on from its cursor
    assert len(seen) == 2, f"the reader skipped a row: it saw {seen} after {start}"
    assert seen == sorted(seen)


def test_a_savepoint_rolled_back_gives_up_its_block_and_the_next_position_takes_another(
    pg: Database,
) -> None:
    """A block taken in a savepoint is announced there: rolling the savepoint
    back withdraws both, so readers pass it, and the transaction's later
    positions come from a new block (never from one nobody announces)."""
    with rows.writing(pg.engine).begin() as conn:
        room_id = rows.room(conn)

    def final() -> int:
        with pg.engine.connect() as other:
            return blocks.final_block(other)

    with rows.writing(pg.engine).begin() as conn:
        savepoint = conn.begin_nested()
        first = rows.send(conn, room_id) >> blocks.SHIFT
        assert final() < first  # announced: readers stop below it
        savepoint.rollback()  # a unit that failed in a group commit
        assert final() >= first  # withdrawn: nothing of it will commit
        second = rows.send(conn, room_id)  # a later unit of the same transaction
        third = rows.send(conn, room_id)
        assert second >> blocks.SHIFT == third >> blocks.SHIFT > first
        assert final() < second >> blocks.SHIFT
    assert final() >= third >> blocks.SHIFT
    with pg.engine.connect() as other:
        assert _after(pg.engine, s.messages, 0)[-2:] == [second, third]
        in_room = sa.select(sa.func.count()).where(s.messages.c.room_id == room_id)
        assert other.execute(in_room).scalar() == 2


def test_a_writer_killed_with_a_block_in_flight_holds_readers_back_only_while_it_lives(
    pg: Database,
) -> None:
    """A writer process that dies mid-transaction (its connection gone):
    PostgreSQL rolls it back and drops its announcement, and readers go on."""
    with rows.writing(pg.engine).begin() as conn:
        room_id = rows.room(conn)
    start = max(_after(pg.engine, s.messages, 0), default=0)
    dying = pg.engine.connect()
    transaction = dying.begin()
    doomed = rows.send(dying, room_id)
    with rows.writing(pg.engine).begin() as conn:
        later = rows.send(conn, room_id)
    assert _after(pg.engine, s.messages, start) == []  # held back by the open block
    pid = dying.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
    with pg.engine.connect() as admin:
        assert admin.exec_driver_sql(f"SELECT pg_terminate_backend({pid})").scalar()
        gone = f"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = {pid}"
        deadline = time.monotonic() + 30
        while not admin.exec_driver_sql(gone).scalar() and time.monotonic() < deadline:
            time.sleep(0.01)
    assert _after(pg.engine, s.messages, start) == [later]
    assert doomed < later
    with contextlib.suppress(sa.exc.DBAPIError):
        transaction.rollback()
    with contextlib.suppress(sa.exc.DBAPIError):
        dying.close()


@pytest.mark.parametrize("group_commit", [False, True])
async def test_a_write_aborted_by_a_deadlock_runs_again(pg: Database, group_commit: bool) -> None:
    """Writer B (another process) holds the write lock; this node's write
    locks a row, then waits for the write lock; B then waits for the row.
    PostgreSQL aborts one of them: when it is this node's, it runs again."""
    pid = await pg.write(rows.participant)
    room_id = await pg.write(rows.room)
    other = sa.create_engine(pg.url)
    touch = s.participants.update().where(s.participants.c.participant_id == pid)
    seqs: list[int] = []

    def unit(conn: Connection) -> int:
        conn.execute(touch.values(description="node"))
        hold_write_lock(conn)  # a check against a cap, after a row lock
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
                    b.exec_driver_sql(f"SELECT pg_advisory_xact_lock({WRITE_LOCK})")
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


async def test_two_processes_writing_to_the_stream_commit_out_of_order_and_read_in_order(
    cluster: stores.Cluster,
) -> None:
    """Two stores on one database, as two processes: A's unit records an
    entry and holds its transaction open; B's unit, started meanwhile,
    commits at once (no lock between them). B's row is in the table, but a
    reader of what is final stops below A's block until A commits, then
    reads A's row before B's."""
    url = cluster.url(f"stream_{new_id().lower()}")
    # processes a and b, writing to the cluster's stream (their buses not running)
    a, b = Database(url, bus=Bus("a")), Database(url, bus=Bus("b"))
    await a.open()
    await b.open()
    holding, release = threading.Event(), threading.Event()

    def slow(conn: Connection) -> None:
        blocks_of_a.append(conn.exec_driver_sql("SELECT mesh_reserve()").scalar_one())
        outbox.change(conn, outbox.Invalidate("test", "from a"))
        holding.set()
        release.wait(30)

    def quick(conn: Connection) -> None:
        outbox.change(conn, outbox.Invalidate("test", "from b"))

    blocks_of_a: list[int] = []
    try:
        start = await a.read(cluster_repo.head_position)
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                # quick units (sends): no write lock between them
                nursery.start_soon(partial(a.write, slow, quick=True))
                await trio.to_thread.run_sync(holding.wait)
                await b.write(quick, quick=True)  # commits while A is open
                raw = await a.read(partial(cluster_repo.read_stream, after=start, limit=10))
                assert [row.origin for row in raw] == ["b"]
                found, read_to = await a.read(
                    partial(cluster_repo.final_rows, after=start, limit=10)
                )
                assert found == []
                assert read_to < blocks_of_a[0]
                release.set()
        found, read_to = await a.read(partial(cluster_repo.final_rows, after=start, limit=10))
        assert [(row.origin, row.entries) for row in found] == [
            ("a", [outbox.Invalidate("test", "from a")]),
            ("b", [outbox.Invalidate("test", "from b")]),
        ]
        assert found[0].position == blocks_of_a[0] < found[1].position <= read_to
    finally:
        release.set()
        await a.close()
        await b.close()
