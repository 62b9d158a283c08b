"""The nonce store of signed node-to-node requests (``federation/signing.py``),
driven with explicit clock values on the suite's store (a fresh database):
how long a nonce is kept, and who is refused ``busy`` when too many are live."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from quart_mesh.errors import Unauthorized, Unavailable
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


async def test_when_full_only_strangers_and_peers_over_their_share_are_refused(
    db: Database,
) -> None:
    nonces = Nonces(db, WINDOW, max_entries=10)
    share = nonces.peer_share  # a tenth of max_entries, at least 100
    assert share == 100
    now, ts = T0, int(T0)
    for n in range(10):
        await nonces.check_and_add("did:key:stranger", f"s{n:015d}", ts, now)
    # full: a stranger is refused at once, whoever it is
    for did in ("did:key:stranger", "did:key:other"):
        with pytest.raises(Unavailable, match="too many") as refused:
            await nonces.check_and_add(did, "x" * 16, ts, now)
        assert refused.value.code == "busy"
    # a peer floods: let through up to its share, then refused...
    for n in range(share):
        await nonces.check_and_add("did:key:m", f"m{n:015d}", ts, now, peer=True)
    with pytest.raises(Unavailable, match="too many"):
        await nonces.check_and_add("did:key:m", "m" * 16, ts, now, peer=True)
    # ...while another peer, within its share, is not
    for n in range(5):
        await nonces.check_and_add("did:key:b", f"b{n:015d}", ts, now, peer=True)
    assert await db.read(lambda conn: repo.count_of(conn, "did:key:b", 1000)) == 5
    # once they expire, the store takes anyone again
    later = ts + WINDOW + 60 + 1
    await nonces.check_and_add("did:key:stranger", "s" * 16, int(later), later)
    assert await db.read(repo.count) == 1
