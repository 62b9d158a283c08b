"""Roles, custom roles, templates, role assignment and rooms' permission rules,
over real sockets: REST, WebSocket and polling go through the same checks."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx

from quart_mesh.services.authz import PERMISSIONS
from tests.helpers import Mesh, User, assert_error, connect


async def create_role(mesh: Mesh, by: User, **body: Any) -> httpx.Response:
    return await mesh.http.post("/api/roles", json=body, headers=by.headers)


async def assign(mesh: Mesh, by: User, who: User, role: str) -> httpx.Response:
    return await mesh.http.put(
        f"/api/participants/{who.participant_id}/role", json={"role": role}, headers=by.headers
    )


async def send(mesh: Mesh, user: User, room_id: str, content: str) -> httpx.Response:
    return await mesh.http.post(
        f"/api/rooms/{room_id}/messages", json={"content": content}, headers=user.headers
    )


async def ws_send_result(base_url: str, user: User, room_id: str, content: str) -> str:
    """Send over the WebSocket: "ok" (the message came back) or the error code."""
    async with connect(base_url, user) as ws:
        await ws.send(type="send_message", roomId=room_id, content=content)
        while True:
            frame = await ws.recv()
            if frame["type"] == "error":
                return str(frame["code"])
            if frame["type"] == "message" and frame["content"] == content:
                return "ok"


async def bot(mesh: Mesh, name: str) -> User:
    r = await mesh.http.post("/api/agents/bootstrap", json={"name": name, "type": "nanoclaw"})
    return User(r.json()["agentId"], name, r.json()["token"])


def test_every_checked_permission_is_in_the_catalog() -> None:
    source = "\n".join(p.read_text() for p in Path("quart_mesh").rglob("*.py"))
    checked = set(re.findall(r'authorize\(\s*\w+,\s*"([a-z_.]+)"', source))
    assert checked
    assert checked <= set(PERMISSIONS)


async def test_catalog_roles_and_no_escalation(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    carol = await mesh.register("carol")
    dave = await mesh.register("dave")
    catalog = (await mesh.http.get("/api/permissions", headers=carol.headers)).json()
    assert {p["name"] for p in catalog} == set(PERMISSIONS)
    send_entry = next(p for p in catalog if p["name"] == "messages.send")
    assert send_entry["category"] == "messages"
    assert send_entry["defaultRole"] == "agent"
    roles = (await mesh.http.get("/api/roles", headers=carol.headers)).json()
    assert [(r["name"], r["priority"], r["tier"]) for r in roles] == [
        ("owner", 999, 1),
        ("admin", 900, 2),
        ("moderator", 700, 2),
        ("super_agent", 600, 2),
        ("member", 400, 3),
        ("agent", 300, 4),
        ("spectator", 50, 4),
    ]
    # only the owner creates roles by default; never at or above its own
    # priority, never with an unknown permission
    readable = ["participants.read", "rooms.read", "rooms.join"]
    reader = {"name": "reader", "priority": 120, "permissions": readable}
    assert (await assign(mesh, owner, dave, "admin")).status_code == 200
    assert_error(await create_role(mesh, dave, **reader), 403, "forbidden")
    assert_error(await create_role(mesh, owner, **{**reader, "priority": 999}), 400)
    assert_error(
        await create_role(mesh, owner, **{**reader, "permissions": ["rooms.fly"]}),
        400,
        "unknown_permission",
    )
    assert_error(await create_role(mesh, owner, **{**reader, "name": "Bad Name"}), 400)
    assert_error(await create_role(mesh, owner, **{**reader, "name": "admin"}), 409)
    r = await create_role(mesh, owner, **reader)
    assert r.status_code == 201, r.text
    role = r.json()
    assert (role["builtin"], role["tier"], role["permissions"]) == (
        False,
        4,
        readable,
    )
    assert_error(await create_role(mesh, owner, **reader), 409, "role_exists")
    # built-in roles are fixed
    assert_error(
        await mesh.http.put("/api/roles/admin", json={"priority": 1}, headers=owner.headers),
        403,
        "builtin_role",
    )
    assert_error(await mesh.http.delete("/api/roles/member", headers=owner.headers), 403)

    # assignment: below the caller, to roles below the caller
    assert_error(await assign(mesh, carol, dave, "member"), 403, "forbidden")
    assert_error(await assign(mesh, dave, carol, "admin"), 403, "role_too_high")
    assert_error(await assign(mesh, dave, owner, "member"), 403, "participant_too_high")
    assert_error(await assign(mesh, owner, carol, "owner"), 403, "role_too_high")
    assert_error(await assign(mesh, owner, carol, "nobody"), 404, "role_not_found")
    assert (await assign(mesh, dave, carol, "reader")).json()["role"] == "reader"

    # carol now reads but may not post, over REST and the WebSocket alike
    room_id = (await mesh.create_room(owner, "hall"))["roomId"]
    await mesh.join(carol, room_id)
    assert_error(await send(mesh, carol, room_id, "hi"), 403, "forbidden")
    assert await ws_send_result(base_url, carol, room_id, "hi") == "forbidden"
    assert (await mesh.http.get(f"/api/rooms/{room_id}/messages", headers=carol.headers)).is_success

    # a change to the role applies at once, to open sessions too
    async with connect(base_url, carol) as ws:
        r = await mesh.http.put(
            f"/api/roles/{role['roleId']}",
            json={"permissions": [*readable, "messages.send"]},
            headers=owner.headers,
        )
        assert r.status_code == 200, r.text
        await ws.send(type="send_message", roomId=room_id, content="now I can")
        await ws.expect("message", content="now I can")
    # in use: not deleted until its holders have another role
    assert_error(
        await mesh.http.delete(f"/api/roles/{role['roleId']}", headers=owner.headers),
        409,
        "role_in_use",
    )
    assert (await assign(mesh, owner, carol, "member")).status_code == 200
    r = await mesh.http.delete(f"/api/roles/{role['roleId']}", headers=owner.headers)
    assert r.status_code == 200


async def test_templates(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    templates = (await mesh.http.get("/api/roles/templates", headers=owner.headers)).json()
    ids = {t["templateId"] for t in templates}
    assert {"observer", "announcer", "support_agent", "moderator_bot"} <= ids
    r = await mesh.http.post(
        "/api/roles/from-template",
        json={"templateId": "announcer", "name": "herald", "priority": 333},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    assert (r.json()["name"], r.json()["priority"]) == ("herald", 333)
    assert "messages.send" in r.json()["permissions"]
    assert "messages.react" not in r.json()["permissions"]
    r = await mesh.http.post(
        "/api/roles/from-template", json={"templateId": "nope"}, headers=owner.headers
    )
    assert_error(r, 404, "template_not_found")
    herald_bot = await bot(mesh, "herald-bot")
    assert (await assign(mesh, owner, herald_bot, "herald")).status_code == 200
    room_id = (await mesh.create_room(owner, "news"))["roomId"]
    await mesh.join(herald_bot, room_id)
    assert (await send(mesh, herald_bot, room_id, "extra!")).status_code == 201
    message_id = (await mesh.messages(owner, room_id))[0]["messageId"]
    r = await mesh.http.post(
        f"/api/rooms/{room_id}/messages/{message_id}/reactions",
        json={"emoji": "tada"},
        headers=herald_bot.headers,
    )
    assert_error(r, 403, "forbidden")


async def test_room_presets_and_overrides_on_every_path(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    mod = await mesh.register("mod")
    carol = await mesh.register("carol")
    helper = await bot(mesh, "helper")
    assert (await assign(mesh, owner, mod, "moderator")).status_code == 200
    room_id = (await mesh.create_room(owner, "lobby"))["roomId"]
    for user in (mod, carol, helper):
        await mesh.join(user, room_id)

    async def preset(name: str, by: User = owner) -> httpx.Response:
        return await mesh.http.post(
            f"/api/rooms/{room_id}/permissions/preset", json={"preset": name}, headers=by.headers
        )

    # only the room's creator or admins set its rules
    assert_error(await preset("announcements", carol), 403, "forbidden")
    assert_error(await preset("party"), 400, "invalid_preset")

    # announcements: moderators and up post; others read and react
    assert (await preset("announcements")).json()["preset"] == "announcements"
    assert_error(await send(mesh, carol, room_id, "me too"), 403, "forbidden")
    assert await ws_send_result(base_url, carol, room_id, "me too") == "forbidden"
    assert (await send(mesh, mod, room_id, "hear ye")).status_code == 201
    message_id = (await mesh.messages(owner, room_id))[-1]["messageId"]
    r = await mesh.http.post(
        f"/api/rooms/{room_id}/messages/{message_id}/reactions",
        json={"emoji": "ok"},
        headers=carol.headers,
    )
    assert r.status_code in (200, 201), r.text
    # elsewhere carol posts as usual
    other_room = (await mesh.create_room(carol, "carols"))["roomId"]
    assert (await send(mesh, carol, other_room, "free here")).status_code == 201

    # humans_only: the bot is removed, may not rejoin, and is sent nothing
    async with connect(base_url, helper) as bot_ws:
        assert (await preset("humans_only")).json()["preset"] == "humans_only"
        left = await bot_ws.expect("participant_left")
        assert left["participant"]["participantId"] == helper.participant_id
        assert_error(
            await mesh.http.post(f"/api/rooms/{room_id}/join", headers=helper.headers), 403
        )
        await bot_ws.send(type="join_room", roomId=room_id)
        assert (await bot_ws.expect("error", frame="join_room"))["code"] == "forbidden"
        await send(mesh, carol, room_id, "humans talking")
        frames = await bot_ws.settle()
        assert not [f for f in frames if f.get("content") == "humans talking"]
    polled = await mesh.http.post("/api/poll", json={"cursor": "0"}, headers=helper.headers)
    assert "humans talking" not in [m["content"] for m in polled.json()["messages"]]

    # a participant override beats the preset: this one bot may come back
    r = await mesh.http.post(
        f"/api/rooms/{room_id}/permissions",
        json={
            "targetType": "participant",
            "target": helper.participant_id,
            "permission": "rooms.join",
            "effect": "allow",
        },
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    override_id = r.json()["overrideId"]
    assert (await mesh.http.post(f"/api/rooms/{room_id}/join", headers=helper.headers)).is_success
    rules = (await mesh.http.get(f"/api/rooms/{room_id}/permissions", headers=carol.headers)).json()
    assert rules["preset"] == "humans_only"
    assert [o["overrideId"] for o in rules["overrides"]] == [override_id]

    # read_only: nobody below admin posts
    await preset("read_only")
    assert_error(await send(mesh, mod, room_id, "no"), 403)
    assert (await send(mesh, owner, room_id, "admins still can")).status_code == 201

    # default clears the preset and every override
    cleared = (await preset("default")).json()
    assert (cleared["preset"], cleared["overrides"]) == (None, [])
    assert (await send(mesh, carol, room_id, "back to normal")).status_code == 201

    # a role override, and a participant override that beats it
    for body in (
        {"targetType": "role", "target": "member", "permission": "messages.send", "effect": "deny"},
        {
            "targetType": "participant",
            "target": carol.participant_id,
            "permission": "messages.send",
            "effect": "allow",
        },
    ):
        r = await mesh.http.post(
            f"/api/rooms/{room_id}/permissions", json=body, headers=owner.headers
        )
        assert r.status_code == 201, r.text
    dave = await mesh.register("dave")
    await mesh.join(dave, room_id)
    assert_error(await send(mesh, dave, room_id, "denied"), 403)
    assert (await send(mesh, carol, room_id, "allowed")).status_code == 201

    # no escalation through room rules: a room creator may set rules on its
    # own room, but not for those above it, nor grant what it lacks
    own_room = (await mesh.create_room(carol, "carols-den"))["roomId"]
    for body, status, code in [
        (
            {
                "targetType": "role",
                "target": "admin",
                "permission": "messages.send",
                "effect": "deny",
            },
            403,
            "target_too_high",
        ),
        (
            {
                "targetType": "role",
                "target": "agent",
                "permission": "messages.delete",
                "effect": "allow",
            },
            403,
            "permission_too_high",
        ),
        (
            {
                "targetType": "role",
                "target": "agent",
                "permission": "mesh.settings",
                "effect": "allow",
            },
            400,
            "invalid_permission",
        ),
        (
            {"targetType": "team", "target": "x", "permission": "rooms.join", "effect": "deny"},
            400,
            "invalid_target",
        ),
    ]:
        r = await mesh.http.post(
            f"/api/rooms/{own_room}/permissions", json=body, headers=carol.headers
        )
        assert_error(r, status, code)
    r = await mesh.http.post(
        f"/api/rooms/{own_room}/permissions",
        json={
            "targetType": "role",
            "target": "agent",
            "permission": "rooms.join",
            "effect": "deny",
        },
        headers=carol.headers,
    )
    assert r.status_code == 201, r.text
    r = await mesh.http.request(
        "DELETE",
        f"/api/rooms/{own_room}/permissions",
        json={"overrideId": r.json()["overrideId"]},
        headers=carol.headers,
    )
    assert r.status_code == 200, r.text


async def test_the_permission_matrix_over_rest_and_websocket(base_url: str, mesh: Mesh) -> None:
    """Built-in roles x permissions x paths: what each role may do is the same
    over REST and the WebSocket."""
    owner = await mesh.setup()
    room_id = (await mesh.create_room(owner, "matrix"))["roomId"]
    expectations = {"spectator": False, "agent": True, "member": True, "moderator": True}
    for n, (role, may_send) in enumerate(expectations.items()):
        user = await mesh.register(f"user{n}")
        assert (await assign(mesh, owner, user, role)).status_code == 200
        await mesh.join(user, room_id)
        rest = await send(mesh, user, room_id, f"rest {role}")
        ws = await ws_send_result(base_url, user, room_id, f"ws {role}")
        assert (rest.status_code == 201) is may_send, (role, rest.text)
        assert (ws == "ok") is may_send, (role, ws)
        room = await mesh.http.post("/api/rooms", json={"name": f"r{n}"}, headers=user.headers)
        assert (room.status_code == 201) is may_send, (role, room.text)
