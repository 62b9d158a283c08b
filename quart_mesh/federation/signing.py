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
from collections.abc import Awaitable, Callable, Mapping

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
    "Admit",
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
#: while the store is full, a peer is let through while it holds fewer than
#: this fraction (1/n) of ``max_entries`` live nonces...
PEER_SHARE = 10
#: ...or fewer than this many, whichever is more
MIN_PEER_SHARE = 100


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
    by its timestamp like any other.

    When about *max_entries* nonces are live, the store is *full*: rather
    than forgetting a nonce early (which would let it be replayed), new
    signed requests are refused (503 ``busy``) — but only those of signers
    that are not *peers* (a connection this node's admin accepted or asked
    for) and of peers that hold their share of the live nonces already
    (:data:`PEER_SHARE`-th of *max_entries*, at least :data:`MIN_PEER_SHARE`).
    So a signer that floods the store is refused, and a connected peer that
    keeps to its share is not. Live nonces are counted now and then (and
    this process adds those it stores since), not per request: the bound is
    approximate, and peers may hold their shares beyond it.
    """

    def __init__(self, db: Database, window_seconds: float, max_entries: int) -> None:
        self._db = db
        self._window = window_seconds
        self._max = max_entries
        #: most live nonces a peer may hold while the store is full
        self.peer_share = max(MIN_PEER_SHARE, max_entries // PEER_SHARE)
        self._next_prune = 0.0
        #: live nonces: as counted at the last prune, plus those this process added since
        self._live = 0

    @property
    def full(self) -> bool:
        """Whether about *max_entries* nonces were live when last counted."""
        return self._live >= self._max

    def expires_at(self, timestamp: int) -> float:
        """When a nonce signed at *timestamp* may be forgotten (unix seconds):
        from then on the timestamp check refuses the request, whatever the
        clocks of the node's hosts say."""
        return timestamp + self._window + _CLOCK_GRACE

    async def check_and_add(
        self, did: str, nonce: str, timestamp: int, now: float, *, peer: bool = False
    ) -> None:
        """Remember (*did*, *nonce*) for a request signed at *timestamp*.

        Args:
            now: unix seconds.
            peer: the signer is a peer this node chose (an accepted
                connection, or one this node asked for): while the store is
                full it is still let through, within its share.

        Cancellation: once handed to the store, the nonce is remembered even
        if the caller is cancelled.

        Raises:
            Unauthorized: ``replayed``, it was seen before (by any process).
            Unavailable: ``busy``, the store is full and this signer is not a
                peer or holds its share; or the store cannot be reached.
        """
        expires_at = int(self.expires_at(timestamp) * 1000)
        prune = now >= self._next_prune
        if prune:
            self._next_prune = now + (_RECOUNT_EVERY if self.full else _PRUNE_EVERY)
        elif self.full and not peer:
            raise Unavailable("too many signed requests; try again later", "busy")
        # expired: their timestamps are outside the window, whatever the clocks
        # say (expires_at already holds the window and the grace)
        cutoff = int(now * 1000)
        limit, share, live = self._max, self.peer_share, self._live

        def add(conn: Connection) -> tuple[int | None, str]:
            """(the live nonces if counted now, ``added``, ``replayed`` or ``busy``)"""
            counted = None
            if prune:
                repo.prune(conn, cutoff)
                counted = repo.count(conn)
            if (live if counted is None else counted) >= limit and (
                not peer or repo.count_of(conn, did, share) >= share
            ):
                return counted, "busy"
            return counted, "added" if repo.add(conn, did, nonce, expires_at) else "replayed"

        counted, outcome = await self._db.write(add)
        if counted is not None:
            self._live = counted
            if self.full:
                self._next_prune = min(self._next_prune, now + _RECOUNT_EVERY)
        if outcome == "busy":
            raise Unavailable("too many signed requests; try again later", "busy")
        if outcome == "replayed":
            raise Unauthorized("this signed request was already received", "replayed")
        self._live += 1


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


#: decides, once the signature holds, whether the signer may be heard at
#: all (raising otherwise: the nonce is then not stored) and whether it is
#: a peer this node chose (:meth:`Nonces.check_and_add`)
Admit = Callable[[str], Awaitable[bool]]


async def verify_request(
    headers: Mapping[str, str],
    method: str,
    path: str,
    body: bytes,
    *,
    audience: str,
    nonces: Nonces,
    max_skew: float,
    admit: Admit | None = None,
    now: float | None = None,
) -> str:
    """Check a signed request for the node *audience* (this node's DID);
    return the sender's DID.

    The checks of :func:`check_signature`, then *admit* (with the signing
    DID), then the nonce must not have been seen before (``replayed``). The
    nonce is remembered only once the signature holds and *admit* let the
    signer through, so neither forged requests nor signers refused there
    can fill the store.

    Raises:
        Unauthorized: ``unsigned``, ``stale``, ``bad_signature`` or ``replayed``.
        Unavailable: too many live nonces (``busy``), or the store is down.
        MeshError: what *admit* raises.
    """
    current = time.time() if now is None else now
    did, nonce, timestamp = check_signature(
        headers, method, path, body, audience=audience, max_skew=max_skew, now=current
    )
    peer = await admit(did) if admit is not None else False
    await nonces.check_and_add(did, nonce, timestamp, current, peer=peer)
    return did


def _b64url(text: str) -> bytes | None:
    if len(text) > _MAX_SIGNATURE_CHARS:
        return None
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
