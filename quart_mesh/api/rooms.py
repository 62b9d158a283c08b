"""Rooms, messages and reactions (spec §4.3; edit/delete/reactions over REST are extensions)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, request

from ..errors import BadRequest
from ._common import body, caller, node, query_int, reply

bp = Blueprint("rooms", __name__)


@bp.get("/api/rooms")
async def list_rooms() -> tuple[Any, int]:
    actor = await caller()
    rooms = await node().rooms.list_rooms(actor)
    return reply([{**room.to_json(), "joined": joined} for room, joined in rooms])


@bp.post("/api/rooms")
async def create_room() -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    room = await node().rooms.create(
        actor,
        fields.req_str("name"),
        fields.opt_str("description") or "",  # null == absent
    )
    return reply({**room.to_json(), "joined": True}, 201)


@bp.get("/api/rooms/<room_id>")
async def get_room(room_id: str) -> tuple[Any, int]:
    actor = await caller()
    details = await node().rooms.get(actor, room_id)
    return reply(
        {
            **details.room.to_json(),
            "joined": details.joined,
            "members": [m.to_json() for m in details.members],
            "permissions": details.permissions,
        }
    )


@bp.delete("/api/rooms/<room_id>")
async def delete_room(room_id: str) -> tuple[Any, int]:
    actor = await caller()
    await node().rooms.delete(actor, room_id)
    return reply({"ok": True})


@bp.post("/api/rooms/<room_id>/join")
async def join_room(room_id: str) -> tuple[Any, int]:
    actor = await caller()
    room = await node().rooms.join(actor, room_id)
    return reply({**room.to_json(), "joined": True})


@bp.post("/api/rooms/<room_id>/leave")
async def leave_room(room_id: str) -> tuple[Any, int]:
    actor = await caller()
    room = await node().rooms.leave(actor, room_id)
    return reply({**room.to_json(), "joined": False})


@bp.get("/api/rooms/<room_id>/messages")
async def list_messages(room_id: str) -> tuple[Any, int]:
    actor = await caller()
    messages = await node().messages.list_messages(
        actor,
        room_id,
        before=request.args.get("before") or None,
        since=request.args.get("since") or None,
        limit=query_int("limit"),
        thread_id=request.args.get("threadId") or None,
    )
    return reply([m.to_json() for m in messages])


@bp.post("/api/rooms/<room_id>/messages")
async def send_message(room_id: str) -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    message = await node().messages.send(
        actor,
        room_id,
        fields.req_str("content"),
        to=fields.opt_str("to"),
        thread_id=fields.opt_str("threadId"),
        attachments=fields.data.get("attachments"),
        client_id=fields.opt_str("clientId"),
    )
    return reply(message.to_json(), 201)


@bp.post("/api/rooms/<room_id>/read")
async def mark_read(room_id: str) -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    cursor = fields.data.get("cursor")
    if cursor is None:
        raise BadRequest("cursor is required", "missing_field")
    read = await node().world.mark_room_read(actor, room_id, cursor)
    return reply(read.payload())


@bp.get("/api/rooms/<room_id>/messages/<message_id>")
async def get_message(room_id: str, message_id: str) -> tuple[Any, int]:
    actor = await caller()
    message = await node().messages.get(actor, message_id, room_id=room_id)
    return reply(message.to_json())


@bp.patch("/api/rooms/<room_id>/messages/<message_id>")
async def edit_message(room_id: str, message_id: str) -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    message = await node().messages.edit(
        actor, message_id, fields.req_str("content"), room_id=room_id
    )
    return reply(message.to_json())


@bp.delete("/api/rooms/<room_id>/messages/<message_id>")
async def delete_message(room_id: str, message_id: str) -> tuple[Any, int]:
    actor = await caller()
    await node().messages.delete(actor, message_id, room_id=room_id)
    return reply({"ok": True, "messageId": message_id})


@bp.post("/api/rooms/<room_id>/messages/<message_id>/reactions")
async def add_reaction(room_id: str, message_id: str) -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    message = await node().messages.add_reaction(
        actor, message_id, fields.req_str("emoji"), room_id=room_id
    )
    return reply(message.to_json())


@bp.delete("/api/rooms/<room_id>/messages/<message_id>/reactions/<path:emoji>")
async def remove_reaction(room_id: str, message_id: str, emoji: str) -> tuple[Any, int]:
    actor = await caller()
    message = await node().messages.remove_reaction(actor, message_id, emoji, room_id=room_id)
    return reply(message.to_json())
