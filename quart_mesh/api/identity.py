"""DID identity (spec §4.10, §5.5): challenges, signature login, encrypted keys."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from ._common import caller, client_address, node, reply
from .contract import Body, Shape, accepts, answers, public
from .objects import Id, Session, Timestamp

bp = Blueprint("identity", __name__)


class ChallengeFor(Body):
    #: an Ed25519 ``did:key``
    did: str


class Verify(Body):
    did: str
    #: the challenge text from ``/api/identity/challenge``
    challenge: str
    #: the challenge signed with the DID's key (base64)
    signature: str
    #: the name to register with, if the DID is new here
    name: str | None = None


class StoreKey(Body):
    did: str
    #: the DID's private key, encrypted by the client (the node cannot read it)
    encrypted_key: str
    challenge: str
    signature: str
    public_key: str | None = None


class IssuedChallenge(Shape):
    """A challenge to sign with the DID's key before it expires."""

    challenge: str
    expires_at: Timestamp
    did: str


class DidSession(Session):
    """A session for the DID's participant (``created``: registered just now)."""

    created: bool


class LinkedKey(Shape):
    """The caller's linked DID."""

    did: str
    #: the DID's public key (base64url)
    public_key: str
    participant_id: Id
    created_at: Timestamp
    updated_at: Timestamp


class StoredKey(LinkedKey):
    """The caller's linked DID and its encrypted key (null if none is stored)."""

    encrypted_key: str | None


@bp.post("/api/identity/challenge")
@public()
@accepts(ChallengeFor)
@answers(IssuedChallenge)
async def challenge(data: ChallengeFor) -> tuple[Any, int]:
    """A challenge for a DID to sign (to sign in or link the DID)."""
    issued = await node().did_auth.challenge(data.did, address=client_address())
    return reply(issued.to_json())


@bp.post("/api/identity/verify")
@public("signed challenge")
@accepts(Verify)
@answers(DidSession)
@answers(DidSession, 201)
async def verify(data: Verify) -> tuple[Any, int]:
    """Sign in with a signed challenge: a token (201 when the DID registered just now)."""
    login = await node().did_auth.verify(
        data.did,
        data.challenge,
        data.signature,
        name=data.name,
        address=client_address(),
    )
    return reply(login.to_json(), 201 if login.created else 200)


@bp.post("/api/identity/store-key")
@accepts(StoreKey)
@answers(LinkedKey)
async def store_key(data: StoreKey) -> tuple[Any, int]:
    """Link a DID to the caller (a signed challenge) and store its encrypted key."""
    actor = await caller()
    record = await node().did_auth.store_key(
        actor,
        did=data.did,
        encrypted_key=data.encrypted_key,
        challenge=data.challenge,
        signature=data.signature,
        public_key=data.public_key,
    )
    return reply(record.to_json(with_key=False))


@bp.get("/api/identity/retrieve-key")
@answers(StoredKey)
async def retrieve_key() -> tuple[Any, int]:
    """The caller's linked DID and its encrypted key."""
    actor = await caller()
    record = await node().did_auth.retrieve_key(actor)
    return reply(record.to_json())
