"""The zero-knowledge vault (spec §4.9, §5.9): each participant's own
client-encrypted blobs (typically API keys).

The node stores a blob as the opaque string it was sent and gives it back only
to its owner. It never decrypts, parses or logs one, and never sees the
passphrase: encryption happens on the client (``quart_mesh.vault_client`` and
``docs/vault.md`` describe the one format clients share). Another
participant's entry answers like a missing one (404), so existence does not
leak.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Connection

from ..config import Limits
from ..errors import BadRequest, Conflict, NotFound, PayloadTooLarge
from ..ids import is_ulid, new_id
from ..records import iso, now_ms
from ..store import Database
from ..store import vault as repo
from .authz import Actor, authorize

__all__ = ["Vault", "VaultItem"]

_MAX_LABEL = 100
_MAX_PROVIDER = 64


@dataclass(frozen=True, slots=True)
class VaultItem:
    """A vault entry as its owner sees it."""

    entry_id: str
    label: str
    provider: str | None
    blob: str = field(repr=False)
    created_at: int = 0

    def to_json(self, *, with_blob: bool = True) -> dict[str, Any]:
        body: dict[str, Any] = {
            "entryId": self.entry_id,
            "label": self.label,
            "provider": self.provider,
            "createdAt": iso(self.created_at),
        }
        if with_blob:
            body["blob"] = self.blob
        return body


def _item(entry: repo.VaultEntry) -> VaultItem:
    return VaultItem(entry.entry_id, entry.label, entry.provider, entry.blob, entry.created_at)


def _check_text(value: str, field_name: str, longest: int) -> None:
    if not 1 <= len(value) <= longest:
        raise BadRequest(f"{field_name} must be 1 to {longest} characters", f"invalid_{field_name}")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise BadRequest(
            f"{field_name} must not contain control characters", f"invalid_{field_name}"
        )


class Vault:
    def __init__(self, limits: Limits, db: Database) -> None:
        self._limits = limits
        self._db = db

    async def list_entries(self, actor: Actor) -> list[VaultItem]:
        """The caller's own entries, oldest first.

        Raises:
            Forbidden: may not keep a vault (``vault.use``).
        """
        authorize(actor, "vault.use")
        rows = await self._db.read(lambda conn: repo.list_entries(conn, actor.participant_id))
        return [_item(row) for row in rows]

    async def add_entry(
        self, actor: Actor, *, label: str, blob: str, provider: str | None = None
    ) -> VaultItem:
        """Store a client-encrypted *blob* under *label*.

        Raises:
            Forbidden: may not keep a vault.
            BadRequest: bad label, provider or blob (``invalid_*``).
            PayloadTooLarge: the blob is over ``max_vault_blob_bytes`` (``blob_too_large``).
            Conflict: the caller already keeps ``max_vault_entries`` (``vault_full``).
        """
        authorize(actor, "vault.use")
        _check_text(label, "label", _MAX_LABEL)
        if provider is not None:
            _check_text(provider, "provider", _MAX_PROVIDER)
        if not blob:
            raise BadRequest("blob must not be empty", "invalid_blob")
        if "\x00" in blob:
            raise BadRequest("blob must not contain NUL", "invalid_blob")
        size = len(blob.encode("utf-8"))
        limits = self._limits
        if size > limits.max_vault_blob_bytes:
            raise PayloadTooLarge(
                f"blob is {size} bytes; the limit is {limits.max_vault_blob_bytes}",
                "blob_too_large",
            )
        entry = repo.VaultEntry(new_id(), actor.participant_id, label, provider, blob, now_ms())

        def write(conn: Connection) -> None:
            # counted in the same transaction as the insert: writes are serialized
            if repo.count_entries(conn, actor.participant_id) >= limits.max_vault_entries:
                raise Conflict(
                    f"your vault is full ({limits.max_vault_entries} entries): delete one first",
                    "vault_full",
                )
            repo.insert_entry(conn, entry)

        await self._db.write(write)
        return _item(entry)

    async def delete_entry(self, actor: Actor, entry_id: str) -> None:
        """Delete one of the caller's entries.

        Raises:
            Forbidden: may not keep a vault.
            NotFound: no such entry of the caller's (``entry_not_found``), also
                when it is someone else's.
        """
        authorize(actor, "vault.use")
        deleted = is_ulid(entry_id) and await self._db.write(
            lambda conn: repo.delete_entry(conn, actor.participant_id, entry_id)
        )
        if not deleted:
            raise NotFound("no such vault entry", "entry_not_found")
