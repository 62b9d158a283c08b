"""Repository: nonces of signed node-to-node requests (decisions 0027, 0036).

The primary key (did, nonce) does the work: :func:`add` is an insert that
does nothing on conflict, so of two deliveries of one signed request, to
one process or two, exactly one adds the row and the other is a replay.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .dialect import insert, insert_new
from .schema import federation_nonces

__all__ = ["add", "count", "count_of", "prune"]


def add(conn: Connection, did: str, nonce: str, expires_at: int) -> bool:
    """Remember (*did*, *nonce*) until *expires_at*; False if it was already."""
    query = insert(conn, federation_nonces).values(did=did, nonce=nonce, expires_at=expires_at)
    return insert_new(conn, query, index_elements=["did", "nonce"])


def prune(conn: Connection, before: int) -> int:
    """Forget the nonces that expired before *before*; how many went."""
    query = sa.delete(federation_nonces).where(federation_nonces.c.expires_at < before)
    return int(conn.execute(query).rowcount or 0)


def count(conn: Connection) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(federation_nonces)).scalar_one())


def count_of(conn: Connection, did: str, limit: int) -> int:
    """How many nonces of *did* are kept, counting at most *limit* (the
    primary key's index is read for *did* only, and no further than that)."""
    mine = (
        sa.select(sa.literal(1))
        .select_from(federation_nonces)
        .where(federation_nonces.c.did == did)
        .limit(limit)
        .subquery()
    )
    return int(conn.execute(sa.select(sa.func.count()).select_from(mine)).scalar_one())
