"""Direct messages (spec §4.4)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from ._common import body, caller, node, reply

bp = Blueprint("dms", __name__)


@bp.get("/api/dms")
async def list_dms() -> tuple[Any, int]:
    actor = await caller()
    return reply([dm.to_json() for dm in await node().dms.list_dms(actor)])


@bp.post("/api/dms")
async def open_dm() -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    dm, created = await node().dms.open(actor, fields.req_str("participantId"))
    return reply(dm.to_json(), 201 if created else 200)


@bp.delete("/api/dms/<room_id>")
async def hide_dm(room_id: str) -> tuple[Any, int]:
    actor = await caller()
    await node().dms.hide(actor, room_id)
    return reply({"ok": True})
