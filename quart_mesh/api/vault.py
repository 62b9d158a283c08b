"""The zero-knowledge vault (spec §4.9): a participant's client-encrypted blobs."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from ._common import body, caller, node, reply

bp = Blueprint("vault", __name__)


@bp.get("/api/vault/entries")
async def list_entries() -> tuple[Any, int]:
    actor = await caller()
    return reply([entry.to_json() for entry in await node().vault.list_entries(actor)])


@bp.post("/api/vault/entries")
async def add_entry() -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    entry = await node().vault.add_entry(
        actor,
        label=fields.req_str("label"),
        blob=fields.req_str("blob"),
        provider=fields.opt_str("provider"),
    )
    return reply(entry.to_json(with_blob=False), 201)


@bp.delete("/api/vault/entries/<entry_id>")
async def delete_entry(entry_id: str) -> tuple[Any, int]:
    actor = await caller()
    await node().vault.delete_entry(actor, entry_id)
    return reply({"ok": True, "entryId": entry_id})
