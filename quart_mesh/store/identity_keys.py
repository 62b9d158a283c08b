"""Repository: DIDs linked to participants and their client-encrypted keys.

The ``encrypted_key`` column is an opaque string the client encrypted; nothing
here (or anywhere in the node) reads its contents.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..errors import Conflict
from ..records import Participant
from .accounts import participant_from_row
from .dialect import insert, insert_new
from .schema import identity_keys, participants

__all__ = ["IdentityKey", "get_by_did", "get_for_participant", "link", "participant_for_did"]


@dataclass(frozen=True, slots=True)
class IdentityKey:
    participant_id: str
    did: str
    encrypted_key: str | None = field(repr=False)
    created_at: int
    updated_at: int


def _from_row(row: sa.Row[tuple[str, str, str | None, int, int]]) -> IdentityKey:
    return IdentityKey(
        participant_id=row.participant_id,
        did=row.did,
        encrypted_key=row.encrypted_key,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _select() -> sa.Select[tuple[str, str, str | None, int, int]]:
    c = identity_keys.c
    return sa.select(c.participant_id, c.did, c.encrypted_key, c.created_at, c.updated_at)


def get_for_participant(conn: Connection, participant_id: str) -> IdentityKey | None:
    row = conn.execute(_select().where(identity_keys.c.participant_id == participant_id)).first()
    return None if row is None else _from_row(row)


def get_by_did(conn: Connection, did: str) -> IdentityKey | None:
    row = conn.execute(_select().where(identity_keys.c.did == did)).first()
    return None if row is None else _from_row(row)


def participant_for_did(conn: Connection, did: str) -> Participant | None:
    """The participant *did* is linked to, if any."""
    query = (
        sa.select(participants)
        .join(identity_keys, identity_keys.c.participant_id == participants.c.participant_id)
        .where(identity_keys.c.did == did)
    )
    row = conn.execute(query).first()
    return None if row is None else participant_from_row(row)


def link(
    conn: Connection, participant_id: str, did: str, encrypted_key: str | None, at: int
) -> None:
    """Link *did* to *participant_id* (replacing the DID it had) and store the
    encrypted key (``None`` keeps the one stored, if the DID is unchanged).

    Raises ``IntegrityError`` if *did* is linked to another participant.
    """
    current = get_for_participant(conn, participant_id)
    if current is None:
        query = insert(conn, identity_keys).values(
            participant_id=participant_id,
            did=did,
            encrypted_key=encrypted_key,
            created_at=at,
            updated_at=at,
        )
        if insert_new(conn, query, index_elements=["participant_id"]):
            return
        # another writer linked a DID to this participant meanwhile: replace it
        current = get_for_participant(conn, participant_id)
        if current is None:  # and unlinked it again
            raise Conflict("the DID link changed meanwhile: try again", "conflict")
    if encrypted_key is None and current.did == did:
        encrypted_key = current.encrypted_key
    conn.execute(
        identity_keys.update()
        .where(identity_keys.c.participant_id == participant_id)
        .values(did=did, encrypted_key=encrypted_key, updated_at=at)
    )
