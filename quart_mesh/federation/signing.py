"""Node-to-node request signatures (``docs/federation.md``, decision 0027).

A signed request carries four headers::

    X-Mesh-DID        the sender node's did:key (Ed25519)
    X-Mesh-Timestamp  unix seconds (decimal)
    X-Mesh-Nonce      16-128 characters of [A-Za-z0-9_-], fresh per request
    X-Mesh-Signature  base64url (padding optional) Ed25519 signature of
                      METHOD \\n PATH \\n TIMESTAMP \\n NONCE \\n sha256-hex(body)

This module does no I/O: it builds headers and checks them, raising
:class:`~quart_mesh.errors.Unauthorized` with the codes ``unsigned``,
``bad_signature``, ``stale`` and ``replayed``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
import time
from collections.abc import Mapping

from ..errors import Unauthorized, Unavailable
from ..identity import NodeIdentity, verify

__all__ = [
    "HEADER_DID",
    "HEADER_NONCE",
    "HEADER_SIGNATURE",
    "HEADER_TIMESTAMP",
    "NonceCache",
    "canonical_string",
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


def canonical_string(method: str, path: str, timestamp: str, nonce: str, body: bytes) -> bytes:
    """The bytes a node signs: ``METHOD\\nPATH\\nTIMESTAMP\\nNONCE\\nSHA256-HEX(body)``."""
    digest = hashlib.sha256(body).hexdigest()
    return f"{method.upper()}\n{path}\n{timestamp}\n{nonce}\n{digest}".encode()


def sign_request(
    identity: NodeIdentity, method: str, path: str, body: bytes, *, now: float | None = None
) -> dict[str, str]:
    """The four ``X-Mesh-*`` headers for a request from this node.

    Args:
        path: the request's path on the receiver, without query string.
    """
    timestamp = str(int(time.time() if now is None else now))
    nonce = secrets.token_urlsafe(24)
    signature = identity.sign(canonical_string(method, path, timestamp, nonce, body))
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


class NonceCache:
    """Nonces seen within the skew window, per sender DID; bounded.

    A nonce is remembered until its timestamp has left the window, after which
    the timestamp check alone refuses it. When *max_entries* nonces are live,
    new signed requests are refused (503 ``busy``) rather than forgetting a
    nonce early, which would let it be replayed.
    """

    def __init__(
        self, window_seconds: float, max_entries: int, *, not_before: float | None = None
    ) -> None:
        self._window = window_seconds
        self._max = max_entries
        self._seen: dict[tuple[str, str], float] = {}
        #: requests signed before this second are refused as ``stale``: nonces
        #: live in memory, so an earlier run of the node may have seen them
        self._not_before = int(time.time() if not_before is None else not_before)

    def __len__(self) -> int:
        return len(self._seen)

    def check_and_add(self, did: str, nonce: str, timestamp: int, now: float) -> None:
        """Remember (*did*, *nonce*).

        Raises:
            Unauthorized: ``replayed``, it was seen before.
            Unavailable: ``busy``, the cache is full of live nonces.
        """
        if timestamp < self._not_before:
            raise Unauthorized("this request was signed before this node started", "stale")
        key = (did, nonce)
        if key in self._seen:
            raise Unauthorized("this signed request was already received", "replayed")
        if len(self._seen) >= self._max:
            self._seen = {k: exp for k, exp in self._seen.items() if exp > now}
            if len(self._seen) >= self._max:
                raise Unavailable("too many signed requests; try again later", "busy")
        self._seen[key] = timestamp + self._window


def verify_request(
    headers: Mapping[str, str],
    method: str,
    path: str,
    body: bytes,
    *,
    nonces: NonceCache,
    max_skew: float,
    now: float | None = None,
) -> str:
    """Check a signed request; return the sender's DID.

    Header names are matched in any case. Checks, in order: all headers
    present and well-formed (``unsigned``), timestamp within *max_skew*
    seconds of now (``stale``), signature by the DID's key
    (``bad_signature``), nonce not seen before (``replayed``). The nonce is
    remembered only once the signature holds, so forged requests
    cannot fill the cache.

    Raises:
        Unauthorized: with one of the codes above.
        Unavailable: the nonce cache is full.
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
    current = time.time() if now is None else now
    if abs(current - int(timestamp)) > max_skew:
        raise Unauthorized(
            f"{HEADER_TIMESTAMP} is more than {max_skew:g} s from this node's clock", "stale"
        )
    raw = _b64url(signature)
    if raw is None or not verify(did, raw, canonical_string(method, path, timestamp, nonce, body)):
        raise Unauthorized(f"the signature does not verify for {HEADER_DID}", "bad_signature")
    nonces.check_and_add(did, nonce, int(timestamp), current)
    return did


def _b64url(text: str) -> bytes | None:
    if len(text) > _MAX_SIGNATURE_CHARS:
        return None
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
