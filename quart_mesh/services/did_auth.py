"""DID identity (spec §4.10, §5.5): challenge, signature login, encrypted keys.

A client proves it holds the Ed25519 key a ``did:key`` names by signing a
challenge the node issued. Challenges:

- are ``mesh-challenge:<the node's DID>:<32 random bytes, base64url>``, so a
  signature made for this node cannot be replayed to another (a client may
  check that the DID in the text is the node's, from the mesh manifest);
- are bound to the DID they were issued for, expire after
  ``did_challenge_ttl_seconds`` and are single-use: the first attempt that
  names one consumes it, whatever its outcome, so a challenge cannot be used
  to guess signatures;
- live in the store (``store/challenges.py``, decision 0036), on both
  backends, so that a challenge one process issued verifies on another
  and is consumed once across all of them (one atomic ``UPDATE ...
  RETURNING``). At most about ``max_did_challenges`` are kept; beyond, the
  soonest to expire are dropped. Used and expired ones stay one more TTL to
  be told apart from ones never issued.

``store-key`` links a DID to the caller and keeps its client-encrypted private
key. Linking needs the same proof (a signed challenge): otherwise anyone could
claim someone else's public DID. The key blob is opaque: never parsed, logged
or shown to anyone but its owner.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import secrets
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from ..config import Settings
from ..errors import BadRequest, Conflict, Forbidden, NotFound, PayloadTooLarge, Unauthorized
from ..identity import b58decode, public_key_from_did, verify
from ..records import Participant, iso, now_ms
from ..security import Tokens
from ..store import Database
from ..store import agents as agents_repo
from ..store import challenges as challenges_repo
from ..store import identity_keys as repo
from .accounts import Accounts, SignedIn
from .authz import Actor, authorize
from .validation import check_name

__all__ = ["Challenge", "DidAuth", "DidLogin", "KeyRecord", "decode_signature", "parse_did"]

_PREFIX = "mesh-challenge"
#: longest challenge text the node issues is well below this
_MAX_CHALLENGE = 256
#: issued challenges between two checks of ``max_did_challenges`` (per process)
_CAP_EVERY = 32
#: an Ed25519 signature in base64 is 86 to 88 characters; allow for slack
_MAX_SIGNATURE = 200
_MAX_PUBLIC_KEY = 128


@dataclass(frozen=True, slots=True)
class Challenge:
    """A challenge issued for one DID."""

    text: str
    did: str
    #: wall-clock expiry, epoch milliseconds (shown as ``expiresAt``)
    expires_at: int

    def to_json(self) -> dict[str, Any]:
        return {"challenge": self.text, "expiresAt": iso(self.expires_at), "did": self.did}


@dataclass(frozen=True, slots=True)
class DidLogin:
    """A session from ``POST /api/identity/verify``; *created* if it registered."""

    session: SignedIn
    created: bool

    def to_json(self) -> dict[str, Any]:
        return {**self.session.to_json(), "created": self.created}


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """A participant's linked DID and its stored encrypted key."""

    participant_id: str
    did: str
    encrypted_key: str | None = field(repr=False)
    created_at: int
    updated_at: int

    @property
    def public_key(self) -> bytes:
        return public_key_from_did(self.did)

    def to_json(self, *, with_key: bool = True) -> dict[str, Any]:
        body: dict[str, Any] = {
            "did": self.did,
            "publicKey": _b64url(self.public_key),
            "participantId": self.participant_id,
            "createdAt": iso(self.created_at),
            "updatedAt": iso(self.updated_at),
        }
        if with_key:
            body["encryptedKey"] = self.encrypted_key
        return body


def parse_did(did: str) -> bytes:
    """The Ed25519 public key of a ``did:key``.

    Raises:
        BadRequest: not an Ed25519 ``did:key`` (``invalid_did``).
    """
    try:
        return public_key_from_did(did)
    except ValueError:
        raise BadRequest("did must be an Ed25519 did:key (did:key:z6Mk…)", "invalid_did") from None


def decode_signature(text: str) -> bytes | None:
    """The 64 bytes of an Ed25519 signature in base64url or standard base64,
    padded or not; ``None`` if *text* is not one."""
    raw = _b64decode(text, _MAX_SIGNATURE)
    return raw if raw is not None and len(raw) == 64 else None


def _b64decode(text: str, longest: int) -> bytes | None:
    if not text or len(text) > longest or not text.isascii():
        return None
    text = text.rstrip("=").replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _public_key_readings(text: str) -> list[bytes]:
    """Every 32-byte key *text* can be read as: base64 or base64url, hex, or
    multibase base58btc (``z…``, with or without the multicodec prefix
    ``0xed01``). A string may read as more than one (``z…`` is also base64)."""
    if not text or len(text) > _MAX_PUBLIC_KEY or not text.isascii():
        return []
    readings: list[bytes | None] = [_b64decode(text, _MAX_PUBLIC_KEY)]
    if len(text) == 64:
        with contextlib.suppress(ValueError):
            readings.append(bytes.fromhex(text))
    if text.startswith("z"):
        with contextlib.suppress(ValueError):
            raw = b58decode(text[1:])
            readings += [raw, raw[2:] if raw.startswith(b"\xed\x01") else None]
    return [raw for raw in readings if raw is not None and len(raw) == 32]


class DidAuth:
    """Issues and checks DID challenges; links DIDs and keeps their encrypted keys."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        accounts: Accounts,
        tokens: Tokens,
        node_did: str,
    ) -> None:
        self._settings = settings
        self._limits = settings.limits
        self._db = db
        self._accounts = accounts
        self._tokens = tokens
        self._node_did = node_did
        #: challenges this process issued since it last checked the cap
        self._issued = 0

    # challenges -----------------------------------------------------------------

    async def challenge(self, did: str, *, address: str | None = None) -> Challenge:
        """Issue a single-use challenge for *did* to sign (no authentication);
        *address* is the client's (``challenge_address``, counted in memory).

        Raises:
            Forbidden: the mesh is not set up (``not_initialized``).
            BadRequest: *did* is not an Ed25519 ``did:key``.
            RateLimited: too many challenges from *address*.
            Unavailable, Overloaded: the store cannot take it.
        """
        if self._accounts.mesh is None:
            raise Forbidden("the mesh is not set up yet", "not_initialized")
        parse_did(did)
        await self._accounts.rate_limits.address("challenge_address", address)
        ttl_ms = self._limits.did_challenge_ttl_seconds * 1000
        most = self._limits.max_did_challenges
        text = f"{_PREFIX}:{self._node_did}:{secrets.token_urlsafe(32)}"
        issued = Challenge(text, did, now_ms() + ttl_ms)
        self._issued += 1
        cap = self._issued >= _CAP_EVERY
        if cap:
            self._issued = 0

        def write(conn: Connection) -> None:
            # long expired ones go (recently expired ones stay, to be told
            # apart from challenges never issued): an index range, cheap
            challenges_repo.prune(conn, issued.expires_at - 2 * ttl_ms)
            if cap:  # a scan of the newest ones: now and then
                challenges_repo.keep_newest(conn, most - 1)
            challenges_repo.issue(conn, text, did, issued.expires_at)

        await self._db.write(write)
        return issued

    async def _prove(self, did: str, challenge: str, signature: str) -> None:
        """Consume *challenge* and check that *signature* is *did*'s over it.

        Raises:
            Unauthorized: ``unknown_challenge``, ``challenge_used``,
                ``challenge_expired``, ``challenge_mismatch`` or ``invalid_signature``.
        """
        consumed: challenges_repo.Consumed | challenges_repo.Refused = (
            challenges_repo.Refused.UNKNOWN
        )
        if len(challenge) <= _MAX_CHALLENGE and challenge.startswith(_PREFIX + ":"):
            consumed = await self._db.write(lambda conn: challenges_repo.consume(conn, challenge))
        if consumed is challenges_repo.Refused.UNKNOWN:
            raise Unauthorized(
                "unknown challenge: this node did not issue it, or dropped it",
                "unknown_challenge",
            )
        if consumed is challenges_repo.Refused.USED:
            raise Unauthorized(
                "the challenge was already used: request a new one", "challenge_used"
            )
        assert isinstance(consumed, challenges_repo.Consumed)
        if now_ms() >= consumed.expires_at:
            raise Unauthorized("the challenge has expired: request a new one", "challenge_expired")
        if consumed.did != did:
            raise Unauthorized("the challenge was issued for another DID", "challenge_mismatch")
        raw = decode_signature(signature)
        if raw is None or not verify(did, raw, challenge.encode("utf-8")):
            raise Unauthorized(
                "the signature does not verify with the DID's key", "invalid_signature"
            )

    # login ----------------------------------------------------------------------

    async def verify(
        self,
        did: str,
        challenge: str,
        signature: str,
        *,
        name: str | None = None,
        address: str | None = None,
    ) -> DidLogin:
        """Log in as the participant *did* is linked to; on an open mesh, an
        unlinked DID registers a new agent (kind bot, type ``nanoclaw``, role
        ``agent``) named *name* (default ``did-`` + 12 hex digits of its key).
        *address* is the client's: attempts count as logins and registrations
        as registrations from it (rate limits ``login_address`` and
        ``registration_address``).

        Raises:
            Forbidden: the mesh is not set up; an unlinked DID on a closed mesh.
            BadRequest: a malformed DID or name (the challenge is then kept).
            RateLimited: too many attempts from *address* (the challenge is
                then kept), or too many registrations (after the proof).
            Unauthorized: the challenge or signature does not hold (consumed).
            Conflict: the name is taken.
        """
        mesh = self._accounts.mesh
        if mesh is None:
            raise Forbidden("the mesh is not set up yet", "not_initialized")
        public_key = parse_did(did)
        if name is not None:
            name = check_name(name, self._limits)
        limiter = self._accounts.rate_limits
        await limiter.address("login_address", address)
        await self._prove(did, challenge, signature)
        participant = await self._db.read(lambda conn: repo.participant_for_did(conn, did))
        if participant is not None:
            return DidLogin(await self._accounts.sign_in(participant, "did"), created=False)
        if mesh.registration_mode != "open":
            raise Forbidden(
                "registration is closed on this mesh: this DID is not linked to anyone",
                "registration_closed",
            )
        await limiter.address("registration_address", address)
        name = name or f"did-{public_key.hex()[:12]}"

        def record(conn: Connection, participant: Participant) -> None:
            at = now_ms()
            agents_repo.insert_agent(
                conn,
                participant.participant_id,
                managed=False,
                webhook_url=None,
                webhook_secret=None,
                created_by=None,
                created_at=at,
            )
            _link(conn, participant.participant_id, did, None, at)

        try:
            session = await self._accounts.create_bot(
                name, "nanoclaw", "agent", "", record, via="did"
            )
        except Conflict:
            # the same DID may have registered a moment ago (a concurrent attempt)
            participant = await self._db.read(lambda conn: repo.participant_for_did(conn, did))
            if participant is None:
                raise
            return DidLogin(await self._accounts.sign_in(participant, "did"), created=False)
        return DidLogin(session, created=True)

    # encrypted keys -------------------------------------------------------------

    async def store_key(
        self,
        actor: Actor,
        *,
        did: str,
        encrypted_key: str,
        challenge: str,
        signature: str,
        public_key: str | None = None,
    ) -> KeyRecord:
        """Link *did* to the caller (one DID per participant: a new one replaces
        the old) and store its client-encrypted private key, after checking
        the caller holds the key (a signed challenge).

        Raises:
            Forbidden: may not link a DID (``identity.link``); the challenge or
                signature does not hold (its code says why; consumed).
            BadRequest: a malformed DID, key blob or public key.
            PayloadTooLarge: the key blob is over ``max_encrypted_key_bytes``.
            Conflict: the DID is linked to another participant (``did_taken``).
        """
        authorize(actor, "identity.link")
        key = parse_did(did)
        self._check_blob(encrypted_key)
        if public_key is not None:
            readings = _public_key_readings(public_key)
            if not readings:
                raise BadRequest(
                    "publicKey must be a 32-byte Ed25519 key in base64, hex or multibase",
                    "invalid_public_key",
                )
            if key not in readings:
                raise BadRequest("publicKey is not the key the DID names", "public_key_mismatch")
        try:
            await self._prove(did, challenge, signature)
        except Unauthorized as error:
            # the caller's token is good: this is a refusal, not a failed login
            raise Forbidden(error.message, error.code) from None
        participant_id = actor.participant_id

        def write(conn: Connection) -> KeyRecord:
            at = now_ms()
            _link(conn, participant_id, did, encrypted_key, at)
            found = repo.get_for_participant(conn, participant_id)
            assert found is not None
            return _record(found)

        return await self._db.write(write)

    def _check_blob(self, encrypted_key: str) -> None:
        if not encrypted_key:
            raise BadRequest("encryptedKey must not be empty", "invalid_encrypted_key")
        if "\x00" in encrypted_key:
            raise BadRequest("encryptedKey must not contain NUL", "invalid_encrypted_key")
        size = len(encrypted_key.encode("utf-8"))
        limit = self._limits.max_encrypted_key_bytes
        if size > limit:
            raise PayloadTooLarge(
                f"encryptedKey is {size} bytes; the limit is {limit}", "key_too_large"
            )

    async def retrieve_key(self, actor: Actor) -> KeyRecord:
        """The caller's own DID and encrypted key (``encryptedKey`` is ``null``
        if it logged in by DID and never stored one).

        Raises:
            Forbidden: may not keep a DID (``identity.link``).
            NotFound: no DID is linked to the caller (``key_not_found``).
        """
        authorize(actor, "identity.link")
        found = await self._db.read(
            lambda conn: repo.get_for_participant(conn, actor.participant_id)
        )
        if found is None:
            raise NotFound("no DID is linked to you", "key_not_found")
        return _record(found)


def _link(conn: Connection, participant_id: str, did: str, blob: str | None, at: int) -> None:
    """Link in a savepoint, so a DID taken by someone else fails alone."""
    taken = repo.get_by_did(conn, did)
    if taken is not None and taken.participant_id != participant_id:
        raise Conflict("this DID is linked to another participant", "did_taken")
    try:
        with conn.begin_nested():
            repo.link(conn, participant_id, did, blob, at)
    except IntegrityError:
        raise Conflict("this DID is linked to another participant", "did_taken") from None


def _record(row: repo.IdentityKey) -> KeyRecord:
    return KeyRecord(row.participant_id, row.did, row.encrypted_key, row.created_at, row.updated_at)
