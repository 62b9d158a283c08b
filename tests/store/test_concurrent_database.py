"""What concurrent writers need of the PostgreSQL database itself
(decision 0080): migration ``0034_stream_blocks`` up and down on a
database with data in it, ``0035_stream_lz4`` up and down, and the
sessions' settings (a transaction left idle is ended by PostgreSQL, and the
database URL's own ``options`` are kept beside it).

Skipped on SQLite: no blocks and no such settings there.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
import trio
from alembic import command
from sqlalchemy.engine import Connection

from quart_mesh.ids import new_id
from quart_mesh.store import Database, blocks
from quart_mesh.store.health import alembic_config
from tests import stores

_BEFORE, _BLOCKS = "0033_health_probe", "0034_stream_blocks"

#: how long a transaction may stay idle before PostgreSQL ends it (60 s)
_IDLE_MS = 60_000


def _migrate(conn: Connection, to: str, *, down: bool = False) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = conn
    (command.downgrade if down else command.upgrade)(cfg, to)


def _message(conn: Connection, room_id: str) -> int:
    """A message written as the store writes it: its position is the column's default."""
    return int(
        conn.execute(
            sa.text(
                "INSERT INTO messages (message_id, room_id, sender_id, sender_name, content,"
                " created_at) VALUES (:id, :room, :id, 'alice', 'hi', 0) RETURNING seq"
            ),
            {"id": new_id(), "room": room_id},
        ).scalar_one()
    )


def _positions(conn: Connection, room_id: str) -> tuple[int, int, int]:
    """A message, an outbox row and a stream row (one a transaction), as
    the store writes them: the columns' defaults give their positions."""
    queued = conn.execute(
        sa.text(
            "INSERT INTO relay_outbox (room_id, kind, body, created_at)"
            " VALUES (:room, 'message', '{}', 0) RETURNING seq"
        ),
        {"room": room_id},
    ).scalar_one()
    streamed = conn.execute(
        sa.text(
            "INSERT INTO cluster_stream (origin, body, created_at)"
            " VALUES ('test', '[]', 0) RETURNING position"
        )
    ).scalar_one()
    return _message(conn, room_id), int(queued), int(streamed)


def _after(later: tuple[int, int, int], earlier: tuple[int, int, int]) -> bool:
    return all(a > b for a, b in zip(later, earlier, strict=True))


def _blocks_installed(conn: Connection) -> bool:
    found = conn.execute(
        sa.text(
            "SELECT to_regclass('mesh_blocks') IS NOT NULL,"
            " to_regproc('mesh_reserve') IS NOT NULL,"
            " to_regproc('mesh_position') IS NOT NULL,"
            " to_regprocedure('mesh_final_block(boolean)') IS NOT NULL"
        )
    ).one()
    assert len(set(found)) == 1, f"0034 half installed: {found}"
    return bool(found[0])


def test_blocks_migrate_up_and_down_with_positions_that_only_grow(
    cluster: stores.Cluster,
) -> None:
    """0034 on a database written by the schema before it: positions after
    it (blocks, ``block << 20 | n``) follow every position before it; after
    a downgrade the plain sequences follow every block's position, and
    after an upgrade again the blocks follow those."""
    url = cluster.url(f"blocks_{new_id().lower()}")
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            _migrate(conn, _BEFORE)
            room_id = new_id()
            conn.execute(
                sa.text(
                    "INSERT INTO rooms (room_id, kind, name, name_key, description, created_at)"
                    " VALUES (:id, 'room', :name, :name, '', 0)"
                ),
                {"id": room_id, "name": f"r{room_id[-8:].lower()}"},
            )
            # an old sequence far ahead of the others
            conn.execute(sa.text("SELECT setval('messages_seq_seq', 5000000)"))
            old = _positions(conn, room_id)
            assert not _blocks_installed(conn)
        with engine.begin() as conn:
            _migrate(conn, _BLOCKS)
            assert _blocks_installed(conn)
        with engine.begin() as conn:
            first = _positions(conn, room_id)
            second = _message(conn, room_id)  # the same transaction: the same block
        assert _after(first, old)
        assert blocks.block_of(first[1]) == blocks.block_of(second) == first[2]
        assert first[1] < first[0] < second
        with engine.connect() as conn:  # nothing in flight: every block is final
            assert conn.exec_driver_sql("SELECT mesh_final_block(false)").scalar_one() >= first[2]
        with engine.begin() as conn:
            _migrate(conn, _BEFORE, down=True)
            assert not _blocks_installed(conn)
        with engine.begin() as conn:
            down = _positions(conn, room_id)
        assert _after(down, (second, *first[1:]))
        with engine.begin() as conn:
            _migrate(conn, "head")
        with engine.begin() as conn:
            again = _positions(conn, room_id)
        assert _after(again, down)
    finally:
        engine.dispose()


def _compression(conn: Connection) -> str:
    return str(
        conn.exec_driver_sql(
            "SELECT attcompression FROM pg_attribute"
            " WHERE attrelid = 'cluster_stream'::regclass AND attname = 'body'"
        ).scalar_one()
    )


def test_the_streams_entries_are_compressed_with_lz4_and_back(cluster: stores.Cluster) -> None:
    """0035: a stream row large enough to be compressed is compressed with
    LZ4 (Debian's PostgreSQL has it); a downgrade gives the column back the
    server's default, and rows written either way read the same."""
    url = cluster.url(f"lz4_{new_id().lower()}")
    engine = sa.create_engine(url)
    body = '[{"k":"change","kind":"join","args":["%s"]}]'
    try:
        with engine.begin() as conn:
            if int(conn.exec_driver_sql("SHOW server_version_num").scalar_one()) < 140_000:
                pytest.skip("PostgreSQL before 14 has no per-column compression")
            _migrate(conn, "0035_stream_lz4")
            if _compression(conn) == "":
                pytest.skip("this PostgreSQL has no LZ4 (the migration kept pglz)")
            assert _compression(conn) == "l"
            first = conn.exec_driver_sql(
                "INSERT INTO cluster_stream (origin, body, created_at)"
                " VALUES ('test', %(body)s, 0) RETURNING position",
                {"body": body % ("x" * 20_000)},
            ).scalar_one()
            method = conn.exec_driver_sql(
                "SELECT pg_column_compression(body) FROM cluster_stream WHERE position = %(p)s",
                {"p": first},
            ).scalar_one()
            assert method == "lz4"
        with engine.begin() as conn:
            _migrate(conn, _BLOCKS, down=True)
            assert _compression(conn) == ""
            conn.exec_driver_sql(
                "INSERT INTO cluster_stream (origin, body, created_at)"
                " VALUES ('test', %(body)s, 0)",
                {"body": body % ("y" * 20_000)},
            )
            bodies = (
                conn.exec_driver_sql("SELECT body FROM cluster_stream ORDER BY position")
                .scalars()
                .all()
            )
            assert [len(b) for b in bodies] == [len(body) - 2 + 20_000] * 2
    finally:
        engine.dispose()


def _settings(db: Database) -> dict[str, int]:
    with db.engine.connect() as conn:
        found = conn.exec_driver_sql(
            "SELECT name, setting FROM pg_settings WHERE name IN"
            " ('idle_in_transaction_session_timeout', 'statement_timeout')"
        ).all()
    return {name: int(setting) for name, setting in found}


def _with_options(url: str, options: str) -> str:
    return (
        sa.make_url(url)
        .update_query_dict({"options": options})
        .render_as_string(hide_password=False)
    )


def test_sessions_end_idle_transactions_and_keep_the_urls_own_options(
    cluster: stores.Cluster,
) -> None:
    """A transaction left open by a writer that stopped talking holds every
    process's delivery back: PostgreSQL ends it after a minute idle. The
    URL's own ``options`` (an operator's ``statement_timeout``) are kept,
    and one that sets the idle timeout itself wins."""
    url = cluster.url(f"options_{new_id().lower()}")
    plain = Database(url)
    own = Database(_with_options(url, "-c statement_timeout=12345"))
    idle = Database(_with_options(url, "-c idle_in_transaction_session_timeout=5000"))
    for db in (plain, own, idle):
        trio.run(db.open)
    try:
        assert _settings(plain)["idle_in_transaction_session_timeout"] == _IDLE_MS
        assert _settings(own) == {
            "idle_in_transaction_session_timeout": _IDLE_MS,
            "statement_timeout": 12345,
        }
        assert _settings(idle)["idle_in_transaction_session_timeout"] == 5000
    finally:
        for db in (plain, own, idle):
            trio.run(db.close)
