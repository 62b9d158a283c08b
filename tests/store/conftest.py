"""Stores for the store's own tests: a fresh database on the suite's store
(``--store sqlite``: a file in the test's folder; ``--store postgresql``: a
new database in the session's cluster)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from quart_mesh.store import Database
from tests import stores


@pytest.fixture
def store_url(tmp_path: Path, _store: stores.Cluster | None) -> str:
    """The URL of a database no other test uses (not yet migrated)."""
    if _store is None:
        return f"sqlite:///{tmp_path / 'store.db'}"
    return _store.url(f"store_{uuid.uuid4().hex[:16]}")


@pytest.fixture
def cluster(_store: stores.Cluster | None) -> stores.Cluster:
    """The session's PostgreSQL cluster; the test is skipped on SQLite."""
    if _store is None:
        pytest.skip("about PostgreSQL (run with --store postgresql)")
    return _store


@pytest.fixture
def opened(store_url: str) -> Iterator[Database]:
    """A migrated store, for tests that drive it from threads (sync tests)."""
    db = Database(store_url)
    trio.run(db.open)
    yield db
    trio.run(db.close)
