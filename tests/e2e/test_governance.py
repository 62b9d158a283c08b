"""Governance on every path (issue 27): no grant above one's own, and
edits and deletes obey what governs posting; over a served node."""

from __future__ import annotations

from typing import Any

import httpx

from tests.helpers import Mesh, User, assert_error, connect

BUILTIN = {"deputy": 950, "usher": 800, "admin": 900, "moderator": 700, "member": 400, "agent": 300}


async def assign(mesh: Mesh, by: User, who: User, role: str) -> httpx.Response:
    return await mesh.http.put(
        f"/api/participants/{who.participant_id}/role", json={"role": role}, headers=by.headers
    )


async def rule(mesh: Mesh, by: User, room_id: str, **body: Any) -> httpx.Response:
    return await mesh.http.post(f"/api/rooms/{room_id}/permissions", json=body, headers=by.headers)


async def edit(mesh: Mesh, who: User, room_id: str, message_id: str, text: str) -> httpx.Response:
    return await mesh.http.patch(
        f"/api/rooms/{room_id}/messages/{message_id}", json={"content": text}, headers=who.headers
    )


async def delete(mesh: Mesh, who: User, room_id: str, message_id: str) -> httpx.Response:
    return await mesh.http.delete(
        f"/api/rooms/{room_id}/messages/{message_id}", headers=who.headers
    )


async def test_a_role_hands_out_only_what_its_holder_holds(mesh: Mesh) -> None:
    """The finding: a custom role with only ``participants.role`` at 950 made
    an admin (who then changed the mesh's settings); at 800, a moderator."""
    owner = await mesh.setup()
    alice = await mesh.register("alice")
    mallory = await mesh.register("mallory")
    for name, priority in (("deputy", 950), ("usher", 800)):
        r = await mesh.http.post(
            "/api/roles",
            json={
                "name": name,
                "priority": priority,
                "permissions": ["participants.read", "participants.role"],
            },
            headers=owner.headers,
        )
        assert r.status_code == 201, r.text
    r = await mesh.http.post(
        "/api/roles",
        json={"name": "reader", "priority": 100, "permissions": ["participants.read"]},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    for role in ("deputy", "usher"):
        assert (await assign(mesh, owner, alice, role)).status_code == 200
        assert_error(
            await mesh.http.put(
                "/api/admin/mesh/settings", json={"name": "pwned"}, headers=alice.headers
            ),
            403,
        )
        for above in ("admin", "moderator", "member", "agent"):
            r = await assign(mesh, alice, mallory, above)
            assert_error(r, 403)
            # below her priority but holding what she lacks: refused for that
            if BUILTIN[above] < BUILTIN[role]:
                assert r.json()["code"] == "permission_too_high", r.text
                assert "rooms.read" in r.json()["error"], r.text
        # a role holding nothing alice lacks: allowed
        assert (await assign(mesh, alice, mallory, "reader")).status_code == 200
        me = await mesh.http.get("/api/auth/me", headers=mallory.headers)
        assert me.json()["role"] == "reader"
        assert (await assign(mesh, owner, mallory, "member")).status_code == 200
    # mallory is still a member: nothing was escalated
    r = await mesh.http.put(
        "/api/admin/mesh/settings", json={"name": "pwned"}, headers=mallory.headers
    )
    assert_error(r, 403)


async def test_room_rules_allow_only_what_one_holds(mesh: Mesh) -> None:
    owner = await mesh.setup()
    carol = await mesh.register("carol")
    bot = await mesh.http.post(
        "/api/agents/bootstrap", json={"name": "helper", "type": "nanoclaw"}, headers=owner.headers
    )
    helper = User(bot.json()["agentId"], "helper", bot.json()["token"])
    room_id = (await mesh.create_room(carol, "carols"))["roomId"]
    await mesh.join(helper, room_id)
    # carol (member) created the room: she may not allow what she lacks
    r = await rule(
        mesh,
        carol,
        room_id,
        targetType="participant",
        target=helper.participant_id,
        permission="messages.delete",
        effect="allow",
    )
    assert_error(r, 403, "permission_too_high")
    # but she may allow what she holds, to those below her
    r = await rule(
        mesh,
        carol,
        room_id,
        targetType="participant",
        target=helper.participant_id,
        permission="messages.react",
        effect="allow",
    )
    assert r.status_code == 201, r.text


async def test_a_creator_denies_edits_to_its_members(mesh: Mesh) -> None:
    """The finding: a room's creator could not deny ``messages.edit`` to members."""
    owner = await mesh.setup()
    carol = await mesh.register("carol")
    dave = await mesh.register("dave")
    room_id = (await mesh.create_room(carol, "carols"))["roomId"]
    await mesh.join(dave, room_id)
    said = await mesh.send(dave, room_id, "first draft")
    r = await rule(
        mesh,
        carol,
        room_id,
        targetType="participant",
        target=dave.participant_id,
        permission="messages.edit",
        effect="deny",
    )
    assert r.status_code == 201, r.text
    assert_error(await edit(mesh, dave, room_id, said["messageId"], "rewritten"), 403)
    # not over the WebSocket either
    async with connect(mesh.http.base_url.__str__().rstrip("/"), dave) as ws:
        await ws.send(type="edit_message", messageId=said["messageId"], content="again")
        assert (await ws.expect("error", frame="edit_message"))["code"] == "forbidden"
    # nor may a creator restrict the owner, or itself
    r = await rule(
        mesh,
        carol,
        room_id,
        targetType="participant",
        target=owner.participant_id,
        permission="messages.edit",
        effect="deny",
    )
    assert_error(r, 403, "target_too_high")
    r = await rule(
        mesh,
        dave,
        room_id,
        targetType="participant",
        target=carol.participant_id,
        permission="messages.edit",
        effect="deny",
    )
    assert_error(r, 403)


async def test_presets_and_send_denials_stop_edits_and_deletes(mesh: Mesh) -> None:
    """The finding: after ``read_only`` (or ``announcements``) a member's new
    post was refused but an edit of an earlier one to new text was not."""
    owner = await mesh.setup()
    carol = await mesh.register("carol")
    mod = await mesh.register("mod")
    assert (await assign(mesh, owner, mod, "moderator")).status_code == 200
    room_id = (await mesh.create_room(owner, "news"))["roomId"]
    for user in (carol, mod):
        await mesh.join(user, room_id)
    mine = [(await mesh.send(carol, room_id, f"old {n}"))["messageId"] for n in range(3)]
    mods = (await mesh.send(mod, room_id, "mod's"))["messageId"]

    async def preset(name: str) -> None:
        r = await mesh.http.post(
            f"/api/rooms/{room_id}/permissions/preset", json={"preset": name}, headers=owner.headers
        )
        assert r.status_code == 200, r.text

    for name in ("read_only", "announcements"):
        await preset(name)
        assert_error(await edit(mesh, carol, room_id, mine[0], f"sneaky {name}"), 403, "forbidden")
        assert_error(await delete(mesh, carol, room_id, mine[1]), 403, "forbidden")
    # announcements: moderators still post and edit; others still react
    assert (await edit(mesh, mod, room_id, mods, "mod's, edited")).status_code == 200
    r = await mesh.http.post(
        f"/api/rooms/{room_id}/messages/{mods}/reactions",
        json={"emoji": "ok"},
        headers=carol.headers,
    )
    assert r.status_code in (200, 201), r.text
    await preset("default")
    assert (await edit(mesh, carol, room_id, mine[0], "fine now")).status_code == 200

    # a send denial (a muted member) stops its edits and deletes too
    r = await rule(
        mesh,
        owner,
        room_id,
        targetType="participant",
        target=carol.participant_id,
        permission="messages.send",
        effect="deny",
    )
    assert r.status_code == 201, r.text
    assert_error(await edit(mesh, carol, room_id, mine[2], "muted?"), 403, "forbidden")
    assert_error(await delete(mesh, carol, room_id, mine[2]), 403, "forbidden")
    contents = [m["content"] for m in await mesh.messages(owner, room_id)]
    assert contents == ["fine now", "old 1", "old 2", "mod's, edited"]


async def test_a_creator_cannot_undo_rules_set_above_it(mesh: Mesh) -> None:
    """A room's creator cannot lift a mute or a read denial the owner put on
    it, replace the owner's rules, or clear them with a preset; its own
    rules it changes as before."""
    owner = await mesh.setup()
    alice = await mesh.register("alice")
    room_id = (await mesh.create_room(alice, "alices"))["roomId"]
    muted = {}
    for permission in ("messages.send", "rooms.read"):
        r = await rule(
            mesh,
            owner,
            room_id,
            targetType="participant",
            target=alice.participant_id,
            permission=permission,
            effect="deny",
        )
        assert r.status_code == 201, r.text
        muted[permission] = r.json()["overrideId"]
    r = await rule(
        mesh,
        owner,
        room_id,
        targetType="role",
        target="agent",
        permission="rooms.read",
        effect="deny",
    )
    assert r.status_code == 201, r.text
    assert_error(await mesh.http.get(f"/api/rooms/{room_id}/messages", headers=alice.headers), 403)
    for override_id in muted.values():
        r = await mesh.http.request(
            "DELETE",
            f"/api/rooms/{room_id}/permissions",
            json={"overrideId": override_id},
            headers=alice.headers,
        )
        assert_error(r, 403, "rule_set_above")
    # clearing them is undoing them; a preset of her own beside them is not
    r = await mesh.http.post(
        f"/api/rooms/{room_id}/permissions/preset",
        json={"preset": "default"},
        headers=alice.headers,
    )
    assert_error(r, 403, "rule_set_above")
    r = await mesh.http.post(
        f"/api/rooms/{room_id}/permissions/preset",
        json={"preset": "humans_only"},
        headers=alice.headers,
    )
    assert r.status_code == 200, r.text
    # but a preset the owner set she may not replace
    r = await mesh.http.post(
        f"/api/rooms/{room_id}/permissions/preset",
        json={"preset": "read_only"},
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    r = await mesh.http.post(
        f"/api/rooms/{room_id}/permissions/preset",
        json={"preset": "announcements"},
        headers=alice.headers,
    )
    assert_error(r, 403, "rule_set_above")
    # nor may she replace the owner's rule for those below her
    r = await rule(
        mesh,
        alice,
        room_id,
        targetType="role",
        target="agent",
        permission="rooms.read",
        effect="allow",
    )
    assert_error(r, 403, "rule_set_above")
    assert_error(await mesh.http.get(f"/api/rooms/{room_id}/messages", headers=alice.headers), 403)
    assert_error(
        await mesh.http.post(
            f"/api/rooms/{room_id}/messages", json={"content": "free?"}, headers=alice.headers
        ),
        403,
    )
    # her own rules she changes and removes
    r = await rule(
        mesh,
        alice,
        room_id,
        targetType="role",
        target="spectator",
        permission="messages.react",
        effect="deny",
    )
    assert r.status_code == 201, r.text
    r = await mesh.http.request(
        "DELETE",
        f"/api/rooms/{room_id}/permissions",
        json={"overrideId": r.json()["overrideId"]},
        headers=alice.headers,
    )
    assert r.is_success, r.text
    # the owner lifts them
    r = await mesh.http.post(
        f"/api/rooms/{room_id}/permissions/preset",
        json={"preset": "default"},
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    assert (await mesh.http.get(f"/api/rooms/{room_id}/messages", headers=alice.headers)).is_success
