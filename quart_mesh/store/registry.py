"""Repository: meshes listed by this node as a registry (one row per node DID)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from .dialect import insert
from .schema import registry_entries

__all__ = ["RegistryRow", "delete_entry", "list_recent", "upsert_entry"]


@dataclass(frozen=True, slots=True)
class RegistryRow:
    did: str
    name: str
    description: str
    url: str
    members: int
    bots: int
    version: str
    last_seen: int


def _row(r: Row[Any]) -> RegistryRow:
    return RegistryRow(
        r.did, r.name, r.description, r.url, r.members, r.bots, r.version, r.last_seen
    )


def upsert_entry(
    conn: Connection, row: RegistryRow, *, max_entries: int, cutoff: int, claim_url: bool = False
) -> bool:
    """Insert or replace the entry of ``row.did``.

    A new DID first drops the entries last seen before *cutoff* (expired:
    never listed again), then is refused (``False``) when *max_entries*
    entries are still kept. With *claim_url* (the URL was just seen serving
    this DID's manifest), other DIDs' entries at the same URL are dropped: a
    URL serves one mesh.
    """
    c = registry_entries.c
    if claim_url:
        conn.execute(sa.delete(registry_entries).where(c.url == row.url, c.did != row.did))
    values = {
        "name": row.name,
        "description": row.description,
        "url": row.url,
        "members": row.members,
        "bots": row.bots,
        "version": row.version,
        "last_seen": row.last_seen,
    }
    updated = conn.execute(sa.update(registry_entries).where(c.did == row.did).values(**values))
    if updated.rowcount:
        return True
    conn.execute(sa.delete(registry_entries).where(c.last_seen < cutoff))
    count = sa.select(sa.func.count()).select_from(registry_entries)
    if int(conn.execute(count).scalar_one()) >= max_entries:
        return False
    # another writer may add the same DID meanwhile: then this heartbeat replaces it
    query = insert(conn, registry_entries).values(did=row.did, **values)
    conn.execute(query.on_conflict_do_update(index_elements=["did"], set_=values))
    return True


def delete_entry(conn: Connection, did: str) -> None:
    conn.execute(sa.delete(registry_entries).where(registry_entries.c.did == did))


def list_recent(conn: Connection, since: int, limit: int) -> list[RegistryRow]:
    """Entries last seen at or after *since*, newest first."""
    c = registry_entries.c
    query = (
        sa.select(registry_entries)
        .where(c.last_seen >= since)
        .order_by(c.last_seen.desc(), c.did)
        .limit(limit)
    )
    return [_row(r) for r in conn.execute(query)]
