"""The zero-knowledge vault (spec §4.9): a participant's client-encrypted blobs."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from ._common import caller, node, reply
from .contract import Body, Shape, accepts, answers
from .objects import Id, Ok, Timestamp

bp = Blueprint("vault", __name__)


class NewEntry(Body):
    label: str
    #: the entry, encrypted by the client (the node cannot read it)
    blob: str
    #: what the entry is for (a model provider's name, say)
    provider: str | None = None


class AddedEntry(Shape):
    """A vault entry, without its blob."""

    entry_id: Id
    label: str
    provider: str | None
    created_at: Timestamp


class Entry(AddedEntry):
    """A vault entry and its encrypted blob."""

    blob: str


class DeletedEntry(Ok):
    entry_id: str


@bp.get("/api/vault/entries")
@answers(list[Entry])
async def list_entries() -> tuple[Any, int]:
    """The caller's vault entries, oldest first."""
    actor = await caller()
    return reply([entry.to_json() for entry in await node().vault.list_entries(actor)])


@bp.post("/api/vault/entries")
@accepts(NewEntry)
@answers(AddedEntry, 201)
async def add_entry(data: NewEntry) -> tuple[Any, int]:
    """Store an encrypted entry in the caller's vault."""
    actor = await caller()
    entry = await node().vault.add_entry(
        actor, label=data.label, blob=data.blob, provider=data.provider
    )
    return reply(entry.to_json(with_blob=False), 201)


@bp.delete("/api/vault/entries/<entry_id>")
@answers(DeletedEntry)
async def delete_entry(entry_id: str) -> tuple[Any, int]:
    """Delete one of the caller's vault entries."""
    actor = await caller()
    await node().vault.delete_entry(actor, entry_id)
    return reply({"ok": True, "entryId": entry_id})
