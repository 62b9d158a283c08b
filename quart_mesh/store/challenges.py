"""Repository: DID login challenges (decisions 0020 and 0036).

Every process of a mesh issues and checks challenges here, so a challenge
issued by one verifies on another. Use is one statement,
``UPDATE ... SET used = true WHERE challenge = ? AND NOT used RETURNING``:
of two attempts at once, on one process or two, exactly one gets the row.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .schema import did_challenges

__all__ = ["Consumed", "Refused", "consume", "issue", "keep_newest", "prune"]


class Refused(enum.Enum):
    """Why a challenge could not be consumed."""

    UNKNOWN = "unknown"
    USED = "used"


@dataclass(frozen=True, slots=True)
class Consumed:
    """A challenge this attempt consumed: whom it was issued for, and until when."""

    did: str
    expires_at: int


def issue(conn: Connection, challenge: str, did: str, expires_at: int) -> None:
    conn.execute(
        sa.insert(did_challenges).values(
            challenge=challenge, did=did, expires_at=expires_at, used=False
        )
    )


def consume(conn: Connection, challenge: str) -> Consumed | Refused:
    """Mark *challenge* used if it is not yet; say whom it was for, or why not."""
    c = did_challenges.c
    row = conn.execute(
        sa.update(did_challenges)
        .where(c.challenge == challenge, c.used == sa.false())
        .values(used=True)
        .returning(c.did, c.expires_at)
    ).first()
    if row is not None:
        return Consumed(row.did, int(row.expires_at))
    known = conn.execute(sa.select(c.used).where(c.challenge == challenge)).first()
    return Refused.UNKNOWN if known is None else Refused.USED


def prune(conn: Connection, before: int) -> int:
    """Delete the challenges that expired before *before*; how many went."""
    query = sa.delete(did_challenges).where(did_challenges.c.expires_at < before)
    return int(conn.execute(query).rowcount or 0)


def keep_newest(conn: Connection, most: int) -> int:
    """Delete all but the *most* latest-expiring challenges; how many went."""
    c = did_challenges.c
    edge = conn.execute(
        sa.select(c.expires_at).order_by(c.expires_at.desc()).offset(most).limit(1)
    ).scalar()
    if edge is None:
        return 0
    return int(conn.execute(sa.delete(did_challenges).where(c.expires_at <= edge)).rowcount or 0)
