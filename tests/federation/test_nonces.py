"""The nonce store of signed node-to-node requests (``federation/signing.py``),
driven with explicit clock values on the suite's store (a fresh database):
how long a nonce is kept."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from quart_mesh.errors import Unauthorized
from quart_mesh.federation.signing import Nonces
from quart_mesh.store import Database
from quart_mesh.store import nonces as repo
from tests import stores

T0 = 1_800_000_000.0
WINDOW = 300


@pytest.fixture
async def db(tmp_path: Path, _store: stores.Cluster | None) -> AsyncIterator[Database]:
    if _store is None:
        db = Database(f"sqlite:///{tmp_path / 'store.db'}")
    else:
        db = Database(_store.url(f"nonces_{uuid.uuid4().hex[:16]}"))
    await db.open()
    try:
        yield db
    finally:
        await db.close()


async def test_a_nonce_is_forgotten_right_after_its_timestamp_leaves_the_window(
    db: Database,
) -> None:
    nonces = Nonces(db, WINDOW, max_entries=1000)
    future = int(T0) + 299  # as far ahead as the skew allows
    await nonces.check_and_add("did:key:a", "n" * 16, future, T0)
    gone = future + WINDOW + 60  # the window, and a minute's grace for clocks
    # still known (and refused) until then...
    with pytest.raises(Unauthorized, match="already received"):
        await nonces.check_and_add("did:key:a", "n" * 16, future, gone - 1)
    assert await db.read(repo.count) == 1
    # ...and forgotten at the next prune after it, not a window later
    await nonces.check_and_add("did:key:a", "m" * 16, int(gone), gone + 31)
    assert await db.read(repo.count) == 1
