"""Secrets, password hashing and access tokens.

- The node's JWT signing secret is 32 random bytes in ``<data_dir>/secret.key``,
  created on first start with mode 0600 and reused afterwards.
- Passwords are hashed with argon2id (argon2-cffi's defaults: RFC 9106 low
  memory profile) in worker threads, bounded by a capacity limiter.
- Tokens are HS256 JWTs with claims ``sub`` (participant id), ``kind``
  (human | guest | bot), ``iat``, ``exp`` and ``jti``. A token is only as good
  as its participant: every request looks the participant up, so a deleted
  participant's tokens stop working at once.
"""

from __future__ import annotations

import collections
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import jwt
import trio
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from .data_folder import create_once
from .errors import Unauthorized

__all__ = ["Passwords", "TokenClaims", "Tokens", "load_or_create_secret", "new_token_id"]

SECRET_FILE = "secret.key"
_SECRET_FILE = SECRET_FILE


def load_or_create_secret(data_dir: Path) -> bytes:
    """Return the node's signing secret, creating it (mode 0600) if missing."""
    path = data_dir / _SECRET_FILE
    secret = bytes.fromhex(create_once(path, lambda: secrets.token_bytes(32).hex()).strip())
    if len(secret) < 32:
        raise ValueError(f"{path} holds a secret shorter than 32 bytes")
    return secret


def new_token_id() -> str:
    """A token's id (its ``jti``): 16 URL-safe characters (96 random bits),
    never beginning with ``-``, which a command line (``quart-mesh tokens
    revoke NAME ID``) would read as an option."""
    while (token_id := secrets.token_urlsafe(12)).startswith("-"):
        pass
    return token_id


class Passwords:
    """argon2id hashing off the event loop."""

    def __init__(self, threads: int = 2, hasher: PasswordHasher | None = None) -> None:
        #: argon2id, RFC 9106's low-memory parameters (64 MiB, 3 passes, 4
        #: lanes) unless *hasher* gives others (a hash keeps its own: every
        #: hash verifies, whatever hashes new passwords)
        self._hasher = hasher or PasswordHasher()
        self._limiter = trio.CapacityLimiter(threads)
        self._dummy_hash: str | None = None

    async def hash(self, password: str) -> str:
        return await trio.to_thread.run_sync(self._hasher.hash, password, limiter=self._limiter)

    async def verify(self, password_hash: str | None, password: str) -> bool:
        """True if *password* matches. With no hash, spends the same time and says no."""
        known = password_hash is not None
        if password_hash is None:
            if self._dummy_hash is None:
                self._dummy_hash = await self.hash(secrets.token_hex(16))
            password_hash = self._dummy_hash
        ok = await trio.to_thread.run_sync(
            self._check, password_hash, password, limiter=self._limiter
        )
        return known and ok

    def _check(self, password_hash: str, password: str) -> bool:
        try:
            return self._hasher.verify(password_hash, password)
        except (VerificationError, InvalidHashError):
            return False


@dataclass(frozen=True, slots=True)
class TokenClaims:
    participant_id: str
    kind: str
    token_id: str
    expires_at: int
    #: unix seconds (``iat``)
    issued_at: int = 0


class Tokens:
    """Issues and checks the node's JWTs."""

    algorithm = "HS256"

    #: tokens verified lately (the signature checked once, not per request)
    _VERIFIED = 4096

    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        #: token -> its claims, for tokens whose signature was verified:
        #: the expiry is checked again on every use; revocation, and whether
        #: the participant still exists, are checked by the caller as ever
        self._verified: collections.OrderedDict[str, TokenClaims] = collections.OrderedDict()

    def issue(self, participant_id: str, kind: str, ttl_seconds: int) -> str:
        return self.mint(participant_id, kind, ttl_seconds)[0]

    def mint(self, participant_id: str, kind: str, ttl_seconds: int) -> tuple[str, TokenClaims]:
        """A new token and its claims (to record it: ``store/tokens.py``)."""
        now = int(time.time())
        token_id = new_token_id()
        claims = {
            "sub": participant_id,
            "kind": kind,
            "iat": now,
            "exp": now + ttl_seconds,
            "jti": token_id,
        }
        token = jwt.encode(claims, self._secret, algorithm=self.algorithm)
        return token, TokenClaims(participant_id, kind, token_id, now + ttl_seconds, now)

    def check(self, token: str) -> TokenClaims:
        """Decode and verify *token* (a token verified lately is only
        checked for expiry: the signature of the same bytes was checked).

        Raises:
            Unauthorized: bad signature, expired, or malformed.
        """
        known = self._verified.get(token)
        if known is not None:
            if known.expires_at <= time.time():
                raise Unauthorized("the token has expired", "token_expired")
            return known
        claims = self._verify(token)
        self._verified[token] = claims
        if len(self._verified) > self._VERIFIED:
            self._verified.popitem(last=False)  # the oldest verified
        return claims

    def _verify(self, token: str) -> TokenClaims:
        try:
            claims = jwt.decode(
                token,
                self._secret,
                algorithms=[self.algorithm],
                options={"require": ["sub", "exp", "iat", "jti"]},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthorized("the token has expired", "token_expired") from None
        except jwt.PyJWTError:
            raise Unauthorized("the token is not valid", "invalid_token") from None
        sub, kind = claims.get("sub"), claims.get("kind")
        if not isinstance(sub, str) or not isinstance(kind, str):
            raise Unauthorized("the token is not valid", "invalid_token")
        return TokenClaims(sub, kind, str(claims["jti"]), int(claims["exp"]), int(claims["iat"]))
