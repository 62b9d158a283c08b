"""The WebSocket frames' JSON Schema (``quart_mesh/realtime/frames.py``):
checked in as ``docs/websocket-frames.schema.json``, in step with the
session's frame types, the events and the documentation, and fitting every
frame a served node sends and takes."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import jsonschema_rs
import msgspec
import pytest

from quart_mesh.events import Event
from quart_mesh.realtime import frames
from quart_mesh.realtime.frames import (
    CLIENT_FRAME_TYPES,
    CLIENT_FRAMES,
    SERVER_FRAME_TYPES,
    SERVER_FRAMES,
    frames_schema,
)
from quart_mesh.realtime.session import FRAME_TYPES
from tests.helpers import Mesh, Socket, User, connect

# the same whatever the store: run once, on SQLite
pytestmark = pytest.mark.store_free

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "docs" / "websocket-frames.schema.json"
WEBSOCKET_MD = ROOT / "docs" / "websocket.md"
SKILL_MD = ROOT / "quart_mesh" / "skills" / "skill.md"
REGENERATE = "python -m quart_mesh.realtime.frames > docs/websocket-frames.schema.json"


def _subclasses(cls: type[Event]) -> list[type[Event]]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return [c for c in found if c.type]


def _tag(cls: type[msgspec.Struct]) -> str:
    tag = cls.__struct_config__.tag
    assert isinstance(tag, str)
    return tag


def _fields(cls: type[msgspec.Struct]) -> set[str]:
    """The wire names of a frame's fields (``type`` aside)."""
    return set(cls.__struct_encode_fields__)


#: fields every client frame after ``authenticate`` may carry
COMMON = _fields(frames._Frame)


@functools.cache
def validator(side: str) -> Any:
    """``clientFrames`` or ``serverFrames`` of the document, as a validator."""
    document = frames_schema()
    return jsonschema_rs.Draft202012Validator({**document[side], "$defs": document["$defs"]})


def check(side: str, frame: dict[str, Any]) -> None:
    errors = [f"{e.instance_path}: {e.message}" for e in validator(side).iter_errors(frame)]
    assert not errors, (side, frame, errors[:5])


def section(text: str, heading: str, level: str = "##") -> str:
    """The text under the heading *heading* (to the next heading of its level or above)."""
    match = re.search(rf"^{level} {re.escape(heading)}(?=[ \n]|$).*$", text, re.MULTILINE)
    assert match is not None, heading
    ends = "|".join(re.escape("#" * n + " ") for n in range(1, len(level) + 1))
    end = re.compile(rf"^({ends})", re.MULTILINE).search(text, match.end())
    return text[match.start() : None if end is None else end.start()]


def rows(text: str, frame_type: str) -> str:
    """The table rows of *text* about *frame_type* (``| `type` |`` ...)."""
    found = re.findall(rf"^\| `{frame_type}`.*$", text, re.MULTILINE)
    return "\n".join(found)


def mentioned(text: str) -> set[str]:
    return set(re.findall(r"`(\w+)`", text))


# the document ----------------------------------------------------------------


def test_the_checked_in_document_is_current() -> None:
    document = frames_schema()
    assert SCHEMA_FILE.exists(), f"write it: {REGENERATE}"
    assert json.loads(SCHEMA_FILE.read_text()) == document, f"out of date: {REGENERATE}"
    assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema_rs.Draft202012Validator(document)  # a schema itself


def test_every_frame_type_is_declared() -> None:
    assert FRAME_TYPES | {"authenticate"} == CLIENT_FRAME_TYPES
    events = {cls.type for cls in _subclasses(Event)}
    # answers to a frame, not events
    answers = {"auth_ok", "snapshot", "error", "search_results"}
    assert events | answers == SERVER_FRAME_TYPES
    # one declaration each, and the document's unions list them all
    assert len(CLIENT_FRAMES) == len(CLIENT_FRAME_TYPES)
    assert len(SERVER_FRAMES) == len(SERVER_FRAME_TYPES)
    document = frames_schema()
    for side, types in (("clientFrames", CLIENT_FRAMES), ("serverFrames", SERVER_FRAMES)):
        refs = {ref["$ref"] for ref in document[side]["anyOf"]}
        assert refs == {f"#/$defs/{cls.__name__}" for cls in types}


@pytest.mark.parametrize(
    ("side", "frame"),
    [
        ("clientFrames", {"type": "authenticate", "token": "t", "since": "42", "autoRead": False}),
        ("clientFrames", {"type": "mark_read", "roomId": "r", "cursor": 7, "extra": 1}),
        ("clientFrames", {"type": "send_message", "roomId": "r", "content": "hi", "to": None}),
        ("serverFrames", {"type": "error", "message": "m", "code": "c", "retryAfter": 1.5}),
        (
            "serverFrames",
            {"type": "room_read", "roomId": "r", "cursor": "3", "unread": 0, "mentions": 0},
        ),
        ("serverFrames", {"type": "room_muted", "roomId": "r", "muted": False}),
    ],
)
def test_frames_that_fit(side: str, frame: dict[str, Any]) -> None:
    check(side, frame)


@pytest.mark.parametrize(
    ("side", "frame"),
    [
        ("clientFrames", {"type": "authenticate"}),
        ("clientFrames", {"type": "authenticate", "token": "t", "since": "-1"}),
        ("clientFrames", {"type": "join_room", "roomId": 3}),
        ("clientFrames", {"type": "move", "roomId": "r", "x": 1, "y": "2", "z": 3}),
        ("clientFrames", {"type": "no_such_frame"}),
        ("serverFrames", {"type": "auth_ok", "participantId": "p", "extra": 1}),
        ("serverFrames", {"type": "error", "message": "m", "code": "c", "frame": None}),
        ("serverFrames", {"type": "message_deleted", "messageId": "m"}),
        ("serverFrames", {"type": "room_muted", "roomId": "r", "muted": "yes"}),
    ],
)
def test_frames_that_do_not(side: str, frame: dict[str, Any]) -> None:
    assert not validator(side).is_valid(frame), frame


# the documentation -----------------------------------------------------------


def test_websocket_md_documents_every_frame_and_field() -> None:
    text = WEBSOCKET_MD.read_text()
    assert "websocket-frames.schema.json" in text
    client = section(text, "Client frames")
    server = section(text, "Server events")
    intro = client[: client.index("\n### ")]
    # fields every frame may carry: told once, before the frames
    assert mentioned(intro) >= COMMON, COMMON - mentioned(intro)
    for cls in CLIENT_FRAMES:
        frame_type = _tag(cls)
        if frame_type == "authenticate":
            about = section(text, "Authenticating")
        else:  # its row in the table, and its own section if it has one
            about = rows(client, frame_type)
            if f"\n### `{frame_type}`" in client:
                about += section(client, f"`{frame_type}`", "###")
        assert about, frame_type
        missing = _fields(cls) - COMMON - mentioned(about)
        assert not missing, (frame_type, missing)
    for cls in SERVER_FRAMES:
        frame_type = _tag(cls)
        about = rows(server, frame_type)
        assert about, frame_type
        missing = _fields(cls) - mentioned(about)
        assert not missing, (frame_type, missing)


def test_skill_md_lists_every_frame_and_field() -> None:
    protocol = section(SKILL_MD.read_text(), "WebSocket protocol")
    client, server = protocol.split("\nServer events:\n")
    for classes, table, common in ((CLIENT_FRAMES, client, COMMON), (SERVER_FRAMES, server, set())):
        for cls in classes:
            frame_type = _tag(cls)
            about = rows(table, frame_type)
            assert about, frame_type
            missing = _fields(cls) - common - mentioned(about)
            assert not missing, (frame_type, missing)


# a served node ---------------------------------------------------------------


async def send(ws: Socket, **frame: Any) -> None:
    """Send a client frame, checked against ``clientFrames`` first."""
    check("clientFrames", frame)
    await ws.send(**frame)


def received(*sockets: Socket) -> list[dict[str, Any]]:
    return [frame for ws in sockets for frame in ws.seen]


async def test_every_frame_a_node_sends_and_takes_fits_the_schema(
    base_url: str, mesh: Mesh
) -> None:
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    for user in (owner, bob):
        check("clientFrames", {"type": "authenticate", "token": user.token})
    room_id = (await mesh.create_room(owner, "general"))["roomId"]
    seen: list[dict[str, Any]] = []
    async with connect(base_url, owner) as a:
        async with connect(base_url, bob) as b:
            await a.expect("presence", participantId=bob.participant_id, online=True)
            await send(b, type="join_room", roomId=room_id)
            await a.expect("participant_joined", roomId=room_id)
            await b.expect("participant_joined", roomId=room_id)
            await send(
                a,
                type="send_message",
                roomId=room_id,
                content="hi @bob",
                to=bob.participant_id,
                clientId="first-1",
            )
            first = await b.expect("message", clientId="first-1")
            await send(
                b, type="send_message", roomId=room_id, content="hello", threadId=first["messageId"]
            )
            reply = await a.expect("message", content="hello")
            await send(b, type="edit_message", messageId=reply["messageId"], content="hello!")
            await a.expect("message_edited", messageId=reply["messageId"])
            await send(a, type="add_reaction", messageId=reply["messageId"], emoji="wave")
            await b.expect("reaction_added", emoji="wave")
            await send(a, type="remove_reaction", messageId=reply["messageId"], emoji="wave")
            await b.expect("reaction_removed", emoji="wave")
            await send(a, type="typing", roomId=room_id)
            await b.expect("typing", participantId=owner.participant_id)
            await send(b, type="mark_read", roomId=room_id, cursor=first["cursor"])
            await b.expect("room_read", roomId=room_id)
            r = await mesh.http.put(
                f"/api/rooms/{room_id}/mute", json={"muted": True}, headers=bob.headers
            )
            assert r.status_code == 200, r.text
            await b.expect("room_muted", roomId=room_id, muted=True)
            await send(a, type="move", roomId=room_id, x=3, y=0, z=-1.5)
            await b.expect("participant_moved", participantId=owner.participant_id)
            await send(b, type="search", q="hello", sort="relevance", clientId="s-1")
            found = await b.expect("search_results", clientId="s-1")
            assert [r["message"]["messageId"] for r in found["results"]] == [reply["messageId"]]
            pin = f"/api/rooms/{room_id}/pins/{reply['messageId']}"
            r = await mesh.http.put(pin, headers=owner.headers)
            assert r.status_code == 200, r.text
            await b.expect("message_pinned", messageId=reply["messageId"])
            r = await mesh.http.delete(pin, headers=owner.headers)
            assert r.status_code == 200, r.text
            await b.expect("message_unpinned", messageId=reply["messageId"])
            await send(b, type="delete_message", messageId=reply["messageId"])
            await a.expect("message_deleted", messageId=reply["messageId"])
            # errors: with the frame's type, its clientId, a retry time
            await send(a, type="edit_message", messageId="nope", content="x", clientId="e-1")
            error = await a.expect("error", frame="edit_message")
            assert error["clientId"] == "e-1"
            await a.send(type="join_room")  # no roomId: not a frame the schema allows
            await a.expect("error", code="missing_field")
            # a DM: both members learn of it; its snapshot entry has ``with``
            r = await mesh.http.post(
                "/api/dms", json={"participantId": bob.participant_id}, headers=owner.headers
            )
            assert r.status_code == 201, r.text
            dm_id = r.json()["roomId"]
            await b.expect("participant_joined", roomId=dm_id)
            await send(a, type="send_message", roomId=dm_id, content="psst")
            psst = await b.expect("message", roomId=dm_id)
            # bob reads it: a read receipt for the owner
            await send(b, type="mark_read", roomId=dm_id, cursor=psst["cursor"])
            await a.expect("dm_read", roomId=dm_id, participantId=bob.participant_id)
            # bob's new display name reaches those who share a room with him
            r = await mesh.http.patch(
                "/api/auth/me", json={"displayName": "Bob B"}, headers=bob.headers
            )
            assert r.status_code == 200, r.text
            await a.expect("participant_updated")
            await send(b, type="leave_room", roomId=room_id)
            await a.expect("participant_left", roomId=room_id)
            async with connect(base_url, bob, since="0") as again:  # a resume
                await again.expect("message", roomId=dm_id)
                assert any("with" in room for room in again.snapshot["rooms"])  # type: ignore[attr-defined]
                assert any(p["position"] for p in again.snapshot["participants"])  # type: ignore[attr-defined]
                await again.settle()
                seen += again.seen
            await b.settle()
            seen += b.seen
        await a.expect("presence", participantId=bob.participant_id, online=False)
        # a command for an agent, and its answer
        r = await mesh.http.post(
            "/api/agents/bootstrap",
            json={"name": "helper", "type": "nanoclaw"},
            headers=owner.headers,
        )
        assert r.status_code == 201, r.text
        agent = User(r.json()["agentId"], "helper", r.json()["token"])
        async with connect(base_url, agent) as c:
            r = await mesh.http.post(
                f"/api/agents/{agent.participant_id}/command",
                json={"command": "summarize", "args": {"roomId": room_id, "n": 3}},
                headers=owner.headers,
            )
            assert r.status_code == 202, r.text
            command = await c.expect("command")
            await send(
                c, type="command_result", commandId=command["commandId"], ok=True, result=[1]
            )
            await c.settle()
            seen += c.seen
        # a room rule keeps the agent from reading the room, then lets it again
        r = await mesh.http.post(f"/api/rooms/{room_id}/join", headers=agent.headers)
        assert r.status_code == 200, r.text
        async with connect(base_url, agent) as c:
            # a task for the agent, moved by it
            await send(
                a,
                type="task_create",
                roomId=room_id,
                agentId=agent.participant_id,
                content="sum it up",
                title="summary",
            )
            task = (await c.expect("task_created"))["task"]
            await send(c, type="task_update", taskId=task["taskId"], state="working")
            working = (await c.expect("task_updated"))["task"]
            assert working["state"] == "working"
            await a.expect("task_updated", task=working)
            await send(a, type="task_reply", taskId=task["taskId"], content="thanks")
            await send(a, type="task_cancel", taskId=task["taskId"])
            await c.expect("task_updated")
            await c.expect("task_updated")
            r = await mesh.http.post(
                f"/api/rooms/{room_id}/permissions",
                json={
                    "targetType": "participant",
                    "target": agent.participant_id,
                    "permission": "rooms.read",
                    "effect": "deny",
                },
                headers=owner.headers,
            )
            assert r.status_code == 201, r.text
            await c.expect("room_access", roomId=room_id, readable=False)
            await c.settle()
            seen += c.seen
        r = await mesh.http.patch(
            f"/api/rooms/{room_id}", json={"description": "soon gone"}, headers=owner.headers
        )
        assert r.status_code == 200, r.text
        await a.expect("room_updated", roomId=room_id, description="soon gone")
        r = await mesh.http.delete(f"/api/rooms/{room_id}", headers=owner.headers)
        assert r.status_code == 200, r.text
        await a.expect("room_deleted", roomId=room_id)
        await a.settle()
        seen += a.seen
    for frame in seen:
        check("serverFrames", frame)
    # every kind of frame the node sends was seen (and checked)
    assert {frame["type"] for frame in seen} == SERVER_FRAME_TYPES
