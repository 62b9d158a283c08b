"""Identifiers: ULIDs (sortable by creation time, unique across nodes).

A ULID is 26 characters of Crockford base32: 48 bits of milliseconds since
the epoch, then 80 random bits. Ids are opaque to clients; the node only
checks their shape so that a malformed id is a clean 400/404, never a crash.
"""

from __future__ import annotations

import re
import secrets
import time

__all__ = ["is_ulid", "new_id"]

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_ULID_RE = re.compile(r"^[0-7][0-9A-HJKMNP-TV-Z]{25}$")


def new_id(now_ms: int | None = None) -> str:
    """Return a fresh ULID string."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    value = (ms << 80) | secrets.randbits(80)
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def is_ulid(value: object) -> bool:
    """True if *value* is a string shaped like a ULID (upper-case)."""
    return isinstance(value, str) and _ULID_RE.match(value) is not None
