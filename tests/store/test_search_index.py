"""The search index of messages stored before it existed (migration
0027_search_and_mutes): indexed in the background, newest first, in
batches, with progress in the log (decision 0059)."""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa
from alembic import command

from quart_mesh.config import Limits
from quart_mesh.errors import ConfigError
from quart_mesh.records import now_ms
from quart_mesh.search_text import parse_query
from quart_mesh.services import search as search_service
from quart_mesh.services.search import Search
from quart_mesh.store import Database
from quart_mesh.store import messages as messages_repo
from quart_mesh.store import rooms as rooms_repo
from quart_mesh.store import search as repo
from quart_mesh.store.health import alembic_config
from tests.store import rows

COUNT = 2500


def _migrate(store_url: str, revision: str, *, down: bool = False) -> None:
    engine = sa.create_engine(store_url)
    try:
        with engine.begin() as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            (command.downgrade if down else command.upgrade)(cfg, revision)
    finally:
        engine.dispose()


async def _found(db: Database, who: str, q: str) -> list[str]:
    query = parse_query(q)

    def read(conn: sa.Connection) -> list[str]:
        seqs = repo.search(
            conn,
            who,
            (True, frozenset()),
            query.terms,
            repo.Filters(),
            relevance=False,
            below=None,
            offset=0,
            limit=COUNT + 10,
        )
        return [m.content for m in messages_repo.messages_by_seq(conn, seqs)]

    return await db.read(read)


async def test_earlier_messages_are_indexed_in_the_background(
    store_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = Database(store_url)
    await db.open()

    def fill(conn: sa.Connection) -> tuple[str, str]:
        alice = rows.participant(conn, "alice")
        room = rows.room(conn, "old")
        rooms_repo.add_member(conn, room, alice, now_ms())
        for i in range(COUNT):
            rows.send(conn, room, f"walnut number {i}")
        rows.send(conn, room, "Crème brûlée at noon")
        return alice, room

    alice, room = await db.write(fill)
    await db.close()
    # back to before the index, and up again: as an upgrade finds a mesh
    _migrate(store_url, "0026_federation_trust", down=True)
    db = Database(store_url)
    await db.open()
    try:
        assert await db.read(repo.pending_count) == COUNT + 1
        assert await _found(db, alice, "walnut") == []
        # an edit before the indexer reaches the message: its new words only
        first = await db.read(
            lambda conn: messages_repo.list_messages(conn, room, before=None, since=0, limit=1)
        )
        await db.write(
            lambda conn: messages_repo.update_content(
                conn, first[0].message_id, "a pecan now", now_ms()
            )
        )
        monkeypatch.setattr(search_service, "INDEX_BATCH", 1000)
        with caplog.at_level(logging.INFO, logger="quart_mesh.services.search"):
            await Search(db, Limits()).run_indexer()
        said = [r.getMessage() for r in caplog.records]
        assert f"search: indexing {COUNT + 1} earlier messages" in said
        assert any(s.startswith(f"search: indexed {COUNT + 1} earlier messages in") for s in said)
        assert await db.read(repo.pending_count) == 0
        found = await _found(db, alice, "walnut")
        assert len(found) == COUNT - 1
        assert found[0] == f"walnut number {COUNT - 1}"  # newest first
        assert await _found(db, alice, "pecan") == ["a pecan now"]
        assert await _found(db, alice, "creme brulee") == ["Crème brûlée at noon"]
        # nothing left: a second run says nothing and changes nothing
        caplog.clear()
        await Search(db, Limits()).run_indexer()
        assert not [r for r in caplog.records if r.name == "quart_mesh.services.search"]
    finally:
        await db.close()


async def test_a_new_language_indexes_everything_again(store_url: str) -> None:
    if not store_url.startswith("postgresql"):
        pytest.skip("the text search configuration is PostgreSQL's (--store postgresql)")
    db = Database(store_url)
    await db.open()
    try:

        def fill(conn: sa.Connection) -> str:
            alice = rows.participant(conn, "alice")
            room = rows.room(conn, "runs")
            rooms_repo.add_member(conn, room, alice, now_ms())
            rows.send(conn, room, "she was running late")
            return alice

        alice = await db.write(fill)
        await Search(db, Limits()).run_indexer()  # "simple": words as written
        assert await _found(db, alice, "run") == []
        await Search(db, Limits(), language="english").run_indexer()
        assert await _found(db, alice, "run") == ["she was running late"]
        config = await db.read(
            lambda conn: conn.execute(sa.text("SELECT config FROM search_index")).scalar()
        )
        assert config == "english"
    finally:
        await db.close()


async def test_an_unknown_language_stops_the_node_with_a_clear_error(store_url: str) -> None:
    if not store_url.startswith("postgresql"):
        pytest.skip("the text search configuration is PostgreSQL's (--store postgresql)")
    db = Database(store_url)
    await db.open()
    try:
        with pytest.raises(ConfigError, match="klingon"):
            await Search(db, Limits(), language="klingon").run_indexer()
        # nothing changed: sends still index with the configuration before
        config = await db.read(
            lambda conn: conn.execute(sa.text("SELECT config FROM search_index")).scalar()
        )
        assert config == "simple"
    finally:
        await db.close()
