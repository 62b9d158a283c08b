"""Node-to-node request signatures (``docs/federation.md``, decision 0027).

A signed request carries four headers::

    X-Mesh-DID        the sender node's did:key (Ed25519)
    X-Mesh-Timestamp  unix seconds (decimal)
    X-Mesh-Nonce      16-128 characters of [A-Za-z0-9_-], fresh per request
    X-Mesh-Signature  base64url (padding optional) Ed25519 signature of
                      METHOD \\n PATH \\n TIMESTAMP \\n NONCE \\n sha256-hex(body)
                      \\n AUDIENCE (the receiving node's DID)

The audience line names the node the request is for: the receiver rebuilds
the string with its own DID, so a request one node signed for another cannot
be replayed to this one (``bad_signature``).

Building headers and checking signatures does no I/O. Nonces are
remembered in the store (:class:`Nonces`, ``store/nonces.py``, decision
0036), shared by every process of the mesh and kept across restarts, so a
request one process accepted is ``replayed`` on any other, and at any time
until its timestamp has left the skew window (after which it is ``stale``).
Refusals are :class:`~quart_mesh.errors.Unauthorized` with the codes
``unsigned``, ``bad_signature``, ``stale`` and ``replayed``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
import time
from collections.abc import Mapping

from sqlalchemy.engine import Connection

from ..errors import Unauthorized, Unavailable
from ..identity import NodeIdentity, verify
from ..store import Database
from ..store import nonces as repo

__all__ = [
    "HEADER_DID",
    "HEADER_NONCE",
    "HEADER_SIGNATURE",
    "HEADER_TIMESTAMP",
    "Nonces",
    "canonical_string",
    "check_signature",
    "is_signed",
    "sign_request",
    "verify_request",
]

HEADER_DID = "X-Mesh-DID"
HEADER_TIMESTAMP = "X-Mesh-Timestamp"
HEADER_NONCE = "X-Mesh-Nonce"
HEADER_SIGNATURE = "X-Mesh-Signature"
_HEADERS = (HEADER_DID, HEADER_TIMESTAMP, HEADER_NONCE, HEADER_SIGNATURE)
_NONCE = re.compile(r"[A-Za-z0-9_-]{16,128}")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
#: an Ed25519 signature is 64 bytes: 86 base64url characters without padding
_MAX_SIGNATURE_CHARS = 100
#: nonces are kept this long past the skew window, for clocks that differ
#: a little between the node's hosts (seconds)
_CLOCK_GRACE = 60
#: how often a process forgets expired nonces and counts the live ones (seconds)
_PRUNE_EVERY = 30.0
#: how often, while too many are live, it counts again (seconds)
_RECOUNT_EVERY = 1.0


def canonical_string(
    method: str, path: str, timestamp: str, nonce: str, body: bytes, audience: str
) -> bytes:
    """The bytes a node signs, six lines:
    ``METHOD\\nPATH\\nTIMESTAMP\\nNONCE\\nSHA256-HEX(body)\\nAUDIENCE``.

    Args:
        audience: the DID of the node the request is for (the receiver).
    """
    digest = hashlib.sha256(body).hexdigest()
    return f"{method.upper()}\n{path}\n{timestamp}\n{nonce}\n{digest}\n{audience}".encode()


def sign_request(
    identity: NodeIdentity,
    method: str,
    path: str,
    body: bytes,
    *,
    audience: str,
    now: float | None = None,
) -> dict[str, str]:
    """The four ``X-Mesh-*`` headers for a request from this node.

    Args:
        path: the request's path on the receiver, without query string.
        audience: the receiving node's DID (every other node refuses the
            request: ``bad_signature``).
    """
    timestamp = str(int(time.time() if now is None else now))
    nonce = secrets.token_urlsafe(24)
    signature = identity.sign(canonical_string(method, path, timestamp, nonce, body, audience))
    return {
        HEADER_DID: identity.did,
        HEADER_TIMESTAMP: timestamp,
        HEADER_NONCE: nonce,
        HEADER_SIGNATURE: base64.urlsafe_b64encode(signature).rstrip(b"=").decode("ascii"),
    }


def is_signed(headers: Mapping[str, str]) -> bool:
    """Whether the request carries any of the signature headers (any case)."""
    names = {key.lower() for key, value in headers.items() if value}
    return any(name.lower() in names for name in _HEADERS)


class Nonces:
    """Nonces seen within the skew window, per sender DID, in the store.

    A nonce is remembered until its timestamp has left the window (plus a
    grace for clock differences between hosts), after which the timestamp
    check alone refuses it; so nothing is forgotten early, not even by a
    restart, and a request signed before this process started is judged
    by its timestamp like any other. When about *max_entries* nonces are
    live, new signed requests are refused (503 ``busy``) rather than
    forgetting a nonce early, which would let it be replayed. Live nonces
    are counted now and then, not per request: the bound is approximate.
    """

    def __init__(self, db: Database, window_seconds: float, max_entries: int) -> None:
        self._db = db
        self._window = window_seconds
        self._max = max_entries
        self._next_prune = 0.0
        self._full = False

    async def check_and_add(self, did: str, nonce: str, timestamp: int, now: float) -> None:
        """Remember (*did*, *nonce*) for a request signed at *timestamp*.

        Cancellation: once handed to the store, the nonce is remembered even
        if the caller is cancelled.

        Raises:
            Unauthorized: ``replayed``, it was seen before (by any process).
            Unavailable: ``busy``, too many nonces are live; or the store
                cannot be reached.
        """
        expires_at = int((timestamp + self._window + _CLOCK_GRACE) * 1000)
        prune = now >= self._next_prune
        if prune:
            self._next_prune = now + (_RECOUNT_EVERY if self._full else _PRUNE_EVERY)
        elif self._full:
            raise Unavailable("too many signed requests; try again later", "busy")
        # expired: their timestamps are outside the window, whatever the clocks
        # say (expires_at already holds the window and the grace)
        cutoff = int(now * 1000)

        def add(conn: Connection) -> tuple[bool, bool]:
            """(whether too many are live, whether this one was added)"""
            if prune:
                repo.prune(conn, cutoff)
                if repo.count(conn) >= self._max:
                    return True, False
            return False, repo.add(conn, did, nonce, expires_at)

        full, added = await self._db.write(add)
        if prune:
            self._full = full
        if full:
            raise Unavailable("too many signed requests; try again later", "busy")
        if not added:
            raise Unauthorized("this signed request was already received", "replayed")


def check_signature(
    headers: Mapping[str, str],
    method: str,
    path: str,
    body: bytes,
    *,
    audience: str,
    max_skew: float,
    now: float,
) -> tuple[str, str, int]:
    """The sender's DID, nonce and timestamp of a request whose signature
    holds (no I/O; :func:`verify_request` also checks the nonce).

    Header names are matched in any case. Checks, in order: all headers
    present and well-formed (``unsigned``), timestamp within *max_skew*
    seconds of *now* (``stale``), signature by the DID's key of the
    canonical string for *audience* (``bad_signature``).

    Args:
        audience: this node's DID: a request signed for another node fails.

    Raises:
        Unauthorized: with one of the codes above.
    """
    lowered = {key.lower(): value for key, value in headers.items()}
    values = {name: lowered.get(name.lower(), "").strip() for name in _HEADERS}
    missing = [name for name, value in values.items() if not value]
    if missing:
        raise Unauthorized(
            "node-to-node requests must be signed: missing " + ", ".join(missing), "unsigned"
        )
    did, timestamp, nonce, signature = (values[name] for name in _HEADERS)
    if not _TIMESTAMP.fullmatch(timestamp):
        raise Unauthorized(f"{HEADER_TIMESTAMP} must be unix seconds", "unsigned")
    if not _NONCE.fullmatch(nonce):
        raise Unauthorized(f"{HEADER_NONCE} must be 16-128 of [A-Za-z0-9_-]", "unsigned")
    if abs(now - int(timestamp)) > max_skew:
        raise Unauthorized(
            f"{HEADER_TIMESTAMP} is more than {max_skew:g} s from this node's clock", "stale"
        )
    raw = _b64url(signature)
    signed = canonical_string(method, path, timestamp, nonce, body, audience)
    if raw is None or not verify(did, raw, signed):
        raise Unauthorized(
            f"the signature does not verify for {HEADER_DID}; it must be signed for "
            f"this node's DID ({audience})",
            "bad_signature",
        )
    return did, nonce, int(timestamp)


async def verify_request(
    headers: Mapping[str, str],
    method: str,
    path: str,
    body: bytes,
    *,
    audience: str,
    nonces: Nonces,
    max_skew: float,
    now: float | None = None,
) -> str:
    """Check a signed request for the node *audience* (this node's DID);
    return the sender's DID.

    The checks of :func:`check_signature`, then the nonce must not have been
    seen before (``replayed``). The nonce is remembered only once the
    signature holds, so forged requests cannot fill the store.

    Raises:
        Unauthorized: ``unsigned``, ``stale``, ``bad_signature`` or ``replayed``.
        Unavailable: too many live nonces (``busy``), or the store is down.
    """
    current = time.time() if now is None else now
    did, nonce, timestamp = check_signature(
        headers, method, path, body, audience=audience, max_skew=max_skew, now=current
    )
    await nonces.check_and_add(did, nonce, timestamp, current)
    return did


def _b64url(text: str) -> bytes | None:
    if len(text) > _MAX_SIGNATURE_CHARS:
        return None
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
