"""Repository: vault entries (client-encrypted blobs, opaque to the node)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .schema import vault_entries

__all__ = ["VaultEntry", "count_entries", "delete_entry", "insert_entry", "list_entries"]


@dataclass(frozen=True, slots=True)
class VaultEntry:
    entry_id: str
    participant_id: str
    label: str
    provider: str | None
    blob: str = field(repr=False)
    created_at: int = 0


def list_entries(conn: Connection, participant_id: str) -> Sequence[VaultEntry]:
    """*participant_id*'s entries, oldest first."""
    c = vault_entries.c
    rows = conn.execute(
        sa.select(c.entry_id, c.participant_id, c.label, c.provider, c.blob, c.created_at)
        .where(c.participant_id == participant_id)
        .order_by(c.entry_id)
    )
    return [
        VaultEntry(r.entry_id, r.participant_id, r.label, r.provider, r.blob, r.created_at)
        for r in rows
    ]


def count_entries(conn: Connection, participant_id: str) -> int:
    c = vault_entries.c
    query = sa.select(sa.func.count()).select_from(vault_entries)
    return int(conn.execute(query.where(c.participant_id == participant_id)).scalar_one())


def insert_entry(conn: Connection, entry: VaultEntry) -> None:
    conn.execute(
        vault_entries.insert().values(
            entry_id=entry.entry_id,
            participant_id=entry.participant_id,
            label=entry.label,
            provider=entry.provider,
            blob=entry.blob,
            created_at=entry.created_at,
        )
    )


def delete_entry(conn: Connection, participant_id: str, entry_id: str) -> bool:
    """Delete *entry_id* if it belongs to *participant_id*; whether it did."""
    c = vault_entries.c
    result = conn.execute(
        vault_entries.delete().where(c.entry_id == entry_id, c.participant_id == participant_id)
    )
    return result.rowcount > 0
