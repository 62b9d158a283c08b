"""Identifiers: ULIDs (sortable by creation time, unique across nodes).

A ULID is 26 characters of Crockford base32: 48 bits of milliseconds since
the epoch, then 80 random bits. Ids are opaque to clients; the node only
checks their shape so that a malformed id is a clean 400/404, never a crash.
"""

from __future__ import annotations

import os
import re
import threading
import time

__all__ = ["is_ulid", "new_id"]

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_ULID_RE = re.compile(r"^[0-7][0-9A-HJKMNP-TV-Z]{25}$")
#: every 10-bit value as its two characters
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]
_SHIFTS = range(120, -1, -10)
#: random bytes are taken from the OS in blocks (one system call for many
#: ids, not one each), per thread
_BLOCK = 10 * 256
_pools = threading.local()


def _forget_pool() -> None:
    _pools.__dict__.clear()


# a forked child must not hand out the bytes its parent also has
os.register_at_fork(after_in_child=_forget_pool)


def _random80() -> int:
    """80 bits from the operating system's CSPRNG (as ``secrets.randbits``)."""
    pool: bytes = getattr(_pools, "pool", b"")
    at: int = getattr(_pools, "at", _BLOCK)
    if at >= len(pool):
        pool, at = os.urandom(_BLOCK), 0
        _pools.pool = pool
    _pools.at = at + 10
    return int.from_bytes(pool[at : at + 10], "big")


def new_id(now_ms: int | None = None) -> str:
    """Return a fresh ULID string."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    value = (ms << 80) | _random80()
    # 130 bits as 13 pairs of characters, from the last
    pairs = _PAIRS
    return "".join([pairs[(value >> shift) & 1023] for shift in _SHIFTS])


def is_ulid(value: object) -> bool:
    """True if *value* is a string shaped like a ULID (upper-case)."""
    return isinstance(value, str) and _ULID_RE.match(value) is not None
