"""Repository: rate-limit buckets shared by every process (decision 0036).

One row per (rule, key) holds the GCRA number of ``services/ratelimit.py``:
the wall-clock millisecond at which the key's bucket is full again. A hit
is one ``INSERT ... ON CONFLICT DO UPDATE ... RETURNING``, so two processes
counting the same key at once are serialized by the row, and neither can
miss the other's hit. A row whose time has passed is a full bucket, the
same as no row: :func:`prune` deletes them.
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..names import normalize
from .dialect import insert
from .schema import rate_counters

__all__ = ["add", "clear_login", "login_name_key", "peek", "prune", "storage_key", "take"]

#: keys longer than this are stored as their SHA-256 (a casefolded login
#: name may be longer than the column)
_LONGEST_KEY = 128


def storage_key(key: str) -> str:
    """*key* as stored: itself, or ``sha256:<hex>`` if it is long."""
    if len(key) <= _LONGEST_KEY:
        return key
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


def take(conn: Connection, rule: str, key: str, *, now: int, interval: int, tolerance: int) -> int:
    """Count one *rule* action for *key* at *now* (epoch ms) if its bucket
    allows it: at most *tolerance* ms of credit in use, each action using
    *interval* ms.

    Returns:
        0 if allowed (and counted), else the ms until it would be.
    """
    c = rate_counters.c
    now_ = sa.literal(now, sa.BigInteger)
    # the bucket's time, or now if it is full (both sides of the upsert)
    base = sa.case((c.full_at > now_, c.full_at), else_=now_)
    over = base - now_ > tolerance
    query = (
        insert(conn, rate_counters)
        .values(rule=rule, key=storage_key(key), full_at=now + interval, allowed=True)
        .on_conflict_do_update(
            index_elements=["rule", "key"],
            # every SET expression reads the row as it was before this hit
            set_={
                "full_at": sa.case((over, c.full_at), else_=base + interval),
                "allowed": sa.not_(over),
            },
        )
        .returning(c.full_at, c.allowed)
    )
    full_at, allowed = conn.execute(query).one()
    if allowed:
        return 0
    return max(1, int(full_at) - tolerance - now)


def add(conn: Connection, rule: str, key: str, *, now: int, interval: int, ceiling: int) -> int:
    """Count one *rule* action for *key* at *now* (epoch ms) whatever its
    bucket holds (a failure that happened), the bucket's time moved at most
    to *ceiling* ms after *now*.

    Returns:
        The bucket's new time (epoch ms).
    """
    c = rate_counters.c
    now_ = sa.literal(now, sa.BigInteger)
    base = sa.case((c.full_at > now_, c.full_at), else_=now_)
    top = sa.literal(now + ceiling, sa.BigInteger)
    moved = base + interval
    query = (
        insert(conn, rate_counters)
        .values(rule=rule, key=storage_key(key), full_at=now + min(interval, ceiling), allowed=True)
        .on_conflict_do_update(
            index_elements=["rule", "key"],
            set_={"full_at": sa.case((moved > top, top), else_=moved), "allowed": True},
        )
        .returning(c.full_at)
    )
    return int(conn.execute(query).scalar_one())


def peek(conn: Connection, rule: str, key: str) -> int | None:
    """The time (epoch ms) of *key*'s bucket for *rule*, ``None`` if it has none."""
    c = rate_counters.c
    found = conn.execute(
        sa.select(c.full_at).where(c.rule == rule, c.key == storage_key(key))
    ).scalar_one_or_none()
    return None if found is None else int(found)


def login_name_key(name: str) -> str:
    """The key of a login name (casefolded, as logins are counted) in the
    login rules: a fixed-length digest, so that the per (name, address)
    keys of one name share a prefix :func:`clear_login` can find."""
    # in NFKC, as names are looked up: a fullwidth spelling is the same name
    return hashlib.sha256(normalize(name[:200]).casefold().encode("utf-8")).hexdigest()[:32]


def clear_login(conn: Connection, name: str) -> int:
    """Forget the login counts of *name* (``quart-mesh user unlock``): its
    slowdown and its attempts from every address; how many buckets went."""
    c = rate_counters.c
    key = login_name_key(name)
    result = conn.execute(
        sa.delete(rate_counters).where(
            sa.or_(
                sa.and_(c.rule == "login_slowdown", c.key == key),
                sa.and_(c.rule == "login_name", c.key.like(key + " %")),
            )
        )
    )
    return int(result.rowcount or 0)


def prune(conn: Connection, now: int) -> int:
    """Delete the buckets that are full again at *now*; how many went."""
    result = conn.execute(sa.delete(rate_counters).where(rate_counters.c.full_at <= now))
    return int(result.rowcount or 0)
