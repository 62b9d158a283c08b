"""Repository: the mesh configuration row and participants."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..names import name_skeletons, normalize
from ..records import MeshConfig, Participant
from .dialect import in_statements, insert
from .schema import mesh_config, participants, revoked_tokens

__all__ = [
    "count_by_kind_and_role",
    "count_with_role",
    "delete_participant",
    "get_mesh_config",
    "get_participant",
    "get_participant_by_name",
    "insert_mesh_config",
    "insert_participant",
    "list_participants",
    "list_revoked_tokens",
    "move_role",
    "name_conflict",
    "name_taken",
    "participant_from_row",
    "password_hash_of",
    "prune_revoked_tokens",
    "revoke_token",
    "set_display_name",
    "set_last_seen",
    "set_password",
    "set_role",
    "set_tokens_not_before",
]


def get_mesh_config(conn: Connection) -> MeshConfig | None:
    row = conn.execute(sa.select(mesh_config).where(mesh_config.c.id == 1)).first()
    if row is None:
        return None
    return MeshConfig(
        name=row.name,
        description=row.description,
        visibility=row.visibility,
        registration_mode=row.registration_mode,
        guests_can_send=bool(row.guests_can_send),
        owner_id=row.owner_id,
        created_at=row.created_at,
        default_room_id=row.default_room_id,
        registry_enabled=None if row.registry_enabled is None else bool(row.registry_enabled),
        link_previews=None if row.link_previews is None else bool(row.link_previews),
    )


def insert_mesh_config(conn: Connection, config: MeshConfig) -> None:
    conn.execute(
        mesh_config.insert().values(
            id=1,
            name=config.name,
            description=config.description,
            visibility=config.visibility,
            registration_mode=config.registration_mode,
            guests_can_send=config.guests_can_send,
            owner_id=config.owner_id,
            created_at=config.created_at,
            default_room_id=config.default_room_id,
            registry_enabled=config.registry_enabled,
            link_previews=config.link_previews,
        )
    )


def participant_from_row(row: Any) -> Participant:
    return Participant(
        participant_id=row.participant_id,
        name=row.name,
        kind=row.kind,
        type=row.type,
        role=row.role,
        created_at=row.created_at,
        last_seen_at=row.last_seen_at,
        description=row.description,
        origin=row.origin_did,
        # queries that pick columns of the participant may leave it out
        tokens_not_before=row._mapping.get("tokens_not_before"),
        display_name=row._mapping.get("display_name"),
    )


def name_conflict(conn: Connection, name: str) -> tuple[str, str] | None:
    """Why *name* cannot be a new participant's: ``("name_taken", name)``
    (the same name, case-insensitively) or ``("name_confusable", other)``
    (*other* looks the same: a skeleton of it is *name*'s); None if it can."""
    query = sa.select(participants.c.name).where(participants.c.name_key == name.casefold())
    same = conn.execute(query).first()
    if same is not None:
        return "name_taken", same.name
    written, folded = name_skeletons(name)
    query = sa.select(participants.c.name).where(
        (participants.c.name_skeleton == written) | (participants.c.folded_skeleton == folded)
    )
    like = conn.execute(query).first()
    return None if like is None else ("name_confusable", like.name)


def name_taken(conn: Connection, name: str) -> bool:
    """Whether *name* is taken or looks like a name that is (see :func:`name_conflict`)."""
    return name_conflict(conn, name) is not None


def insert_participant(
    conn: Connection, participant: Participant, password_hash: str | None
) -> None:
    """Insert a participant. Raises ``IntegrityError`` if the name is taken
    or looks like one that is (its skeleton is taken)."""
    written, folded = name_skeletons(participant.name)
    conn.execute(
        participants.insert().values(
            participant_id=participant.participant_id,
            name=participant.name,
            name_key=participant.name.casefold(),
            name_skeleton=written,
            folded_skeleton=folded,
            kind=participant.kind,
            type=participant.type,
            role=participant.role,
            password_hash=password_hash,
            description=participant.description,
            created_at=participant.created_at,
            last_seen_at=participant.last_seen_at,
            origin_did=participant.origin,
            display_name=participant.display_name,
        )
    )


def get_participant(conn: Connection, participant_id: str) -> Participant | None:
    row = conn.execute(
        sa.select(participants).where(participants.c.participant_id == participant_id)
    ).first()
    return None if row is None else participant_from_row(row)


def get_participant_by_name(conn: Connection, name: str) -> tuple[Participant, str | None] | None:
    """The participant named *name* (case-insensitive; as typed or in NFKC,
    which is how names are stored) and its password hash."""
    keys = {name.casefold(), normalize(name).casefold()}
    row = conn.execute(
        sa.select(participants)
        .where(participants.c.name_key.in_(keys))
        # the name as typed first, for a name stored before names were NFKC
        .order_by((participants.c.name_key == name.casefold()).desc())
    ).first()
    return None if row is None else (participant_from_row(row), row.password_hash)


def password_hash_of(conn: Connection, participant_id: str) -> tuple[str | None] | None:
    """*participant_id*'s password hash (in a 1-tuple; ``None`` if no such
    participant), its row share-locked until the transaction ends on
    PostgreSQL: a reset committing meanwhile waits, or is seen."""
    row = conn.execute(
        sa.select(participants.c.password_hash)
        .where(participants.c.participant_id == participant_id)
        .with_for_update(read=True)
    ).first()
    return None if row is None else (row.password_hash,)


def list_participants(conn: Connection) -> Sequence[Participant]:
    rows = conn.execute(sa.select(participants).order_by(participants.c.name_key))
    return [participant_from_row(row) for row in rows]


def set_last_seen(conn: Connection, seen: dict[str, int]) -> None:
    """Write each participant's ``lastSeen``: a statement per distinct time
    (many going offline together share one)."""
    by_time: dict[int, list[str]] = {}
    for participant_id, at in seen.items():
        by_time.setdefault(at, []).append(participant_id)
    for at, ids in sorted(by_time.items()):
        for run in in_statements(sorted(ids)):
            conn.execute(
                participants.update()
                .where(participants.c.participant_id.in_(run))
                .values(last_seen_at=at)
            )


def set_display_name(
    conn: Connection, participant_id: str, display_name: str | None
) -> Participant | None:
    """Set (None: clear) *participant_id*'s display name; the participant
    as it is now, or None if there is no such participant."""
    conn.execute(
        participants.update()
        .where(participants.c.participant_id == participant_id)
        .values(display_name=display_name)
    )
    return get_participant(conn, participant_id)


def delete_participant(conn: Connection, participant_id: str) -> bool:
    result = conn.execute(
        participants.delete().where(participants.c.participant_id == participant_id)
    )
    return result.rowcount > 0


def set_role(conn: Connection, participant_id: str, role: str) -> Participant | None:
    """Give a participant *role*; the updated participant, or None if unknown."""
    conn.execute(
        participants.update()
        .where(participants.c.participant_id == participant_id)
        .values(role=role)
    )
    return get_participant(conn, participant_id)


def move_role(conn: Connection, old: str, new: str) -> list[str]:
    """Give every holder of role *old* role *new*; their ids."""
    ids = [
        row.participant_id
        for row in conn.execute(
            sa.select(participants.c.participant_id).where(participants.c.role == old)
        )
    ]
    if ids:
        conn.execute(participants.update().where(participants.c.role == old).values(role=new))
    return ids


def count_with_role(conn: Connection, role: str) -> int:
    query = sa.select(sa.func.count()).select_from(participants).where(participants.c.role == role)
    return int(conn.execute(query).scalar_one())


def count_by_kind_and_role(conn: Connection) -> list[tuple[str, str, int]]:
    """How many participants of each (kind, role) there are."""
    query = sa.select(participants.c.kind, participants.c.role, sa.func.count()).group_by(
        participants.c.kind, participants.c.role
    )
    return [(row[0], row[1], int(row[2])) for row in conn.execute(query)]


def set_password(conn: Connection, participant_id: str, password_hash: str) -> None:
    conn.execute(
        participants.update()
        .where(participants.c.participant_id == participant_id)
        .values(password_hash=password_hash)
    )


def set_tokens_not_before(conn: Connection, participant_id: str, at: int) -> None:
    """Refuse *participant_id*'s tokens issued before *at* (unix seconds)."""
    conn.execute(
        participants.update()
        .where(participants.c.participant_id == participant_id)
        .values(tokens_not_before=at)
    )


def revoke_token(conn: Connection, token_id: str, participant_id: str, expires_at: int) -> None:
    """Record a signed-out token (idempotent)."""
    query = insert(conn, revoked_tokens).values(
        token_id=token_id, participant_id=participant_id, expires_at=expires_at
    )
    conn.execute(query.on_conflict_do_nothing())


def list_revoked_tokens(conn: Connection, now: int) -> dict[str, int]:
    """Signed-out tokens that have not expired yet: token id -> expiry (unix seconds)."""
    rows = conn.execute(
        sa.select(revoked_tokens.c.token_id, revoked_tokens.c.expires_at).where(
            revoked_tokens.c.expires_at > now
        )
    )
    return {row.token_id: int(row.expires_at) for row in rows}


def prune_revoked_tokens(conn: Connection, now: int) -> None:
    """Forget signed-out tokens that have expired (they are refused as expired anyway)."""
    conn.execute(revoked_tokens.delete().where(revoked_tokens.c.expires_at <= now))
