"""Admin endpoints and mesh settings over real sockets (spec §4.14): statistics,
the setup checklist, reading and changing the settings, and what a change
does at once (guests cut off when the mesh goes private).

Loopback only, port 0, a time cap on every test (pytest-timeout).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed

from quart_mesh import MeshApp, Settings, create_app, serve
from quart_mesh.config import Rate, RateLimits
from tests.helpers import Mesh, User, assert_error, connect, wait_for


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "mesh-data")


@pytest.fixture
def served_app(settings: Settings) -> MeshApp:
    return create_app(settings)


@pytest.fixture
async def base_url(served_app: MeshApp, nursery: trio.Nursery) -> str:
    """The node served on loopback; the test may also reach it (``served_app.node``)."""
    url: str = await nursery.start(
        lambda task_status: serve(served_app, port=0, task_status=task_status)
    )
    return url


async def get(mesh: Mesh, path: str, user: User | None = None) -> httpx.Response:
    return await mesh.http.get(path, headers=user.headers if user else None)


async def put_settings(mesh: Mesh, user: User, **body: Any) -> httpx.Response:
    return await mesh.http.put("/api/admin/mesh/settings", json=body, headers=user.headers)


async def bootstrap(mesh: Mesh, name: str) -> User:
    r = await mesh.http.post("/api/agents/bootstrap", json={"name": name, "type": "nanoclaw"})
    assert r.status_code == 201, r.text
    return User(r.json()["agentId"], name, r.json()["token"])


async def test_only_admins_see_the_admin_endpoints(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    for path in ("/api/admin/stats", "/api/admin/setup-status", "/api/admin/mesh/settings"):
        assert_error(await get(mesh, path), 401, "unauthorized")
        assert_error(await get(mesh, path, bob), 403, "forbidden")
        assert (await get(mesh, path, owner)).status_code == 200
    assert_error(await put_settings(mesh, bob, name="Mine now"), 403, "forbidden")
    r = await mesh.http.put("/api/admin/mesh/settings", json={"name": "x"})
    assert_error(r, 401, "unauthorized")


async def test_an_admin_who_is_not_the_owner(
    base_url: str, mesh: Mesh, served_app: MeshApp
) -> None:
    await mesh.setup()
    carol = await mesh.register("carol")
    await served_app.node.accounts.set_role(carol.participant_id, "admin")
    assert (await get(mesh, "/api/admin/stats", carol)).status_code == 200
    r = await put_settings(mesh, carol, description="run by carol")
    assert r.status_code == 200, r.text
    assert r.json()["description"] == "run by carol"


async def test_stats_count_what_is_there(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    await mesh.guest()
    bot = await bootstrap(mesh, "counter-bot")
    room_id = (await mesh.create_room(owner, "general"))["roomId"]
    await mesh.join(bob, room_id)
    r = await mesh.http.post(
        "/api/dms", json={"participantId": bob.participant_id}, headers=owner.headers
    )
    assert r.status_code in (200, 201), r.text
    for i in range(3):
        await mesh.send(bob, room_id, f"hello {i}")
    async with connect(base_url, bot), connect(base_url, bob):
        # presence is announced when a session opens; wait until both are counted
        stats: dict[str, Any] = {}

        async def both_online() -> bool:
            stats.update((await get(mesh, "/api/admin/stats", owner)).json())
            return bool(stats["participants"]["online"] == 2)

        await wait_for(both_online, 5, interval=0.02)
        assert stats["participants"] == {
            "total": 4,
            "humans": 2,
            "bots": 1,
            "guests": 1,
            "online": 2,
        }
        # "general" and setup's default room
        assert (stats["rooms"], stats["dms"], stats["messages"]) == (2, 1, 3)
        assert stats["websocketSessions"] == 2
        assert stats["broker"]["subscribers"] == 2
        assert set(stats["broker"]) == {
            "subscribers",
            "queuedEvents",
            "drops",
            "published",
            "rooms",
        }
        assert stats["models"] == {
            "requests": 0,
            "errors": 0,
            "promptTokens": 0,
            "completionTokens": 0,
        }
        assert stats["rateLimits"]["enabled"] is True
        health = (await get(mesh, "/api/health")).json()
        assert stats["version"] == health["version"]
        assert 0 <= stats["uptime"] <= health["uptime"] + 1

    async def closed() -> bool:  # the node notices the closes
        return not (await get(mesh, "/api/admin/stats", owner)).json()["websocketSessions"]

    await wait_for(closed, 5, interval=0.02)


async def test_the_setup_checklist(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()

    async def steps() -> tuple[dict[str, bool], bool]:
        r = await get(mesh, "/api/admin/setup-status", owner)
        assert r.status_code == 200, r.text
        body = r.json()
        for step in body["steps"]:
            assert set(step) == {"id", "label", "done"}
            assert isinstance(step["label"], str)
            assert step["label"]
        return {s["id"]: s["done"] for s in body["steps"]}, body["complete"]

    done, complete = await steps()
    assert done == {
        "owner_created": True,
        "mesh_named": True,
        "visibility_chosen": True,
        "first_room": True,  # setup made the default room
        "model_configured": False,
        "bot_connected": False,
    }
    assert complete is False
    await mesh.create_room(owner, "general")
    r = await mesh.http.post(
        "/api/models",
        json={"name": "some-model", "baseUrl": "http://127.0.0.1:9/v1"},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    bot = await bootstrap(mesh, "first-bot")
    done, complete = await steps()
    assert (done["first_room"], done["model_configured"], done["bot_connected"]) == (
        True,
        True,
        False,  # registered, but it has not connected yet
    )
    assert (await get(mesh, "/api/auth/me", bot)).status_code == 200
    done, complete = await steps()
    assert all(done.values())
    assert complete is True


async def test_settings_round_trip_and_the_public_view(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup(description="first words")
    r = await get(mesh, "/api/admin/mesh/settings", owner)
    assert r.status_code == 200, r.text
    body = r.json()
    assert {k: body[k] for k in ("name", "description", "visibility")} == {
        "name": "Test Mesh",
        "description": "first words",
        "visibility": "public",
    }
    assert (body["registrationMode"], body["guestsCanSend"]) == ("open", False)
    assert body["rateLimits"]["messages"] == {
        "count": 20,
        "per": 10,
        "burst": 150,
        "off": False,
        "scope": "participant",
        "source": "settings",
    }
    assert set(body["rateLimits"]) == {
        "messages",
        "reactions",
        "typing",
        "models",
        "search",
        "linkPreviews",
        "profile",
        "loginName",
        "loginSlowdown",
        "loginAddress",
        "registrationAddress",
        "challengeAddress",
        "federationRelay",
        "federationStrangerAddress",
        "registryDid",
        "registryAddress",
    }
    assert body["roleMultipliers"]["admin"] == 10
    assert body["rateLimitsEnabled"] is True

    r = await put_settings(
        mesh,
        owner,
        name="  Renamed Mesh ",
        description="",
        registrationMode="closed",
        guestsCanSend=True,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["name"], body["description"], body["registrationMode"]) == (
        "Renamed Mesh",
        "",
        "closed",
    )
    assert body["guestsCanSend"] is True
    assert body["visibility"] == "public"  # not given: unchanged
    assert (await get(mesh, "/api/mesh/settings")).json() == {
        "name": "Renamed Mesh",
        "description": "",
        "visibility": "public",
    }
    status = (await get(mesh, "/api/setup/status")).json()
    assert (status["registrationMode"], status["meshName"]) == ("closed", "Renamed Mesh")
    # closed at once
    r = await mesh.http.post("/api/auth/register", json={"name": "late", "password": "x" * 12})
    assert_error(r, 403, "registration_closed")
    r = await mesh.http.post("/api/agents/bootstrap", json={"name": "b", "type": "nanoclaw"})
    assert_error(r, 403, "registration_closed")
    # guests may post at once (guestsCanSend)
    room_id = (await mesh.create_room(owner, "lobby"))["roomId"]
    guest = await mesh.guest()
    await mesh.join(guest, room_id)
    await mesh.send(guest, room_id, "a guest speaks")
    async with connect(base_url, guest) as ws:
        r = await put_settings(mesh, owner, guestsCanSend=False)
        assert r.json()["guestsCanSend"] is False
        r = await mesh.http.post(
            f"/api/rooms/{room_id}/messages", json={"content": "again"}, headers=guest.headers
        )
        assert_error(r, 403, "forbidden")
        # an open session too, from its next frame
        await ws.send(type="send_message", roomId=room_id, content="and again")
        error = await ws.expect("error")
        assert (error["code"], error["frame"]) == ("forbidden", "send_message")


async def test_bad_settings_are_refused_whole(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    before = (await get(mesh, "/api/admin/mesh/settings", owner)).json()
    for body, code in [
        ({"name": "   "}, "invalid_mesh_name"),
        ({"name": "x" * 201}, "invalid_mesh_name"),
        ({"name": "tab\there"}, "invalid_mesh_name"),
        ({"description": "x" * 2001}, "invalid_description"),
        ({"visibility": "secret"}, "invalid_visibility"),
        ({"visibility": ""}, "invalid_visibility"),
        ({"registrationMode": "invite"}, "invalid_registration_mode"),
        ({"name": 5}, "invalid_field"),
        ({"guestsCanSend": "yes"}, "invalid_field"),
        ({"rateLimits": []}, "invalid_field"),
        ({"roleMultipliers": 3}, "invalid_field"),
        ({"rateLimits": {"sends": {"count": 1, "per": 1}}}, "invalid_rate_limits"),
        ({"rateLimits": {"messages": {"count": 0, "per": 1}}}, "invalid_rate_limits"),
        ({"rateLimits": {"messages": {"count": 1.5, "per": 1}}}, "invalid_rate_limits"),
        ({"rateLimits": {"messages": {"count": True, "per": 1}}}, "invalid_rate_limits"),
        ({"rateLimits": {"messages": {"count": 1, "per": 0}}}, "invalid_rate_limits"),
        ({"rateLimits": {"messages": {"count": 1}}}, "invalid_rate_limits"),
        ({"rateLimits": {"messages": {"count": 1, "per": 1, "burst": -2}}}, "invalid_rate_limits"),
        ({"rateLimits": {"messages": "lots"}}, "invalid_rate_limits"),
        ({"rateLimits": {"messages": 5}}, "invalid_rate_limits"),
        ({"roleMultipliers": {"owner": 2}}, "invalid_role_multipliers"),
        ({"roleMultipliers": {"admin": 0}}, "invalid_role_multipliers"),
        ({"roleMultipliers": {"admin": "10"}}, "invalid_role_multipliers"),
        ({"roleMultipliers": {"nobody": 2}}, "invalid_role_multipliers"),
        ({"roleMultipliers": "none"}, "invalid_role_multipliers"),
        # a good change next to a bad one is not applied either
        ({"name": "Half Done", "visibility": "secret"}, "invalid_visibility"),
        ({"name": "Half Done", "rateLimits": {"typing": {"per": 1}}}, "invalid_rate_limits"),
    ]:
        assert_error(await put_settings(mesh, owner, **body), 400, code)
    assert (await get(mesh, "/api/admin/mesh/settings", owner)).json() == before
    r = await mesh.http.put("/api/admin/mesh/settings", content=b"[1]", headers=owner.headers)
    assert_error(r, 400, "invalid_json")
    # an empty body changes nothing
    r = await mesh.http.put("/api/admin/mesh/settings", headers=owner.headers)
    assert r.status_code == 200
    assert r.json() == before


async def test_rate_limits_change_at_once_and_go_back_to_default(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    room_id = (await mesh.create_room(owner, "general"))["roomId"]
    await mesh.join(bob, room_id)
    r = await put_settings(
        mesh,
        owner,
        rateLimits={"messages": {"count": 1, "per": 60}, "typing": "off", "loginName": "5/1m:2"},
        roleMultipliers={"member": 2},
    )
    assert r.status_code == 200, r.text
    limits = r.json()["rateLimits"]
    assert limits["messages"] == {
        "count": 1,
        "per": 60,
        "burst": 1,
        "off": False,
        "scope": "participant",
        "source": "admin",
    }
    assert limits["typing"]["off"] is True
    assert limits["typing"]["count"] is None
    assert (limits["loginName"]["count"], limits["loginName"]["burst"]) == (5, 2)
    assert r.json()["roleMultipliers"] == {"member": 2}
    assert r.json()["roleMultipliersSource"] == "admin"
    # bob (a member) gets twice the one message a minute
    await mesh.send(bob, room_id, "one")
    await mesh.send(bob, room_id, "two")
    r = await mesh.http.post(
        f"/api/rooms/{room_id}/messages", json={"content": "three"}, headers=bob.headers
    )
    assert_error(r, 429, "rate_limited")
    # back to the settings' rules: bob may send again
    r = await put_settings(mesh, owner, rateLimits={"messages": "default"})
    assert r.json()["rateLimits"]["messages"]["source"] == "settings"
    await mesh.send(bob, room_id, "three")
    r = await put_settings(mesh, owner, roleMultipliers="default")
    assert r.json()["roleMultipliers"]["admin"] == 10
    assert r.json()["rateLimits"]["typing"]["off"] is True  # still the admin's


async def test_settings_survive_a_restart(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path / "mesh-data",
        rate_limits=RateLimits(messages=Rate(5, 1)),
    )
    app = create_app(settings)
    async with app.test_app():
        client = app.test_client()
        r = await client.post(
            "/api/setup/init",
            json={"name": "owner", "password": "correct horse battery", "meshName": "One"},
        )
        token = (await r.get_json())["token"]
        headers = {"Authorization": f"Bearer {token}"}
        r = await client.put(
            "/api/admin/mesh/settings",
            json={
                "name": "Two",
                "visibility": "private",
                "rateLimits": {"reactions": {"count": 2, "per": 5}, "models": "off"},
                "roleMultipliers": {"agent": 4},
                "linkPreviews": False,
            },
            headers=headers,
        )
        assert r.status_code == 200, await r.get_data()
        saved = await r.get_json()
        assert (saved["linkPreviews"], saved["linkPreviewsSource"]) == (False, "admin")
    app = create_app(settings)
    async with app.test_app():
        client = app.test_client()
        r = await client.get("/api/admin/mesh/settings", headers=headers)
        assert await r.get_json() == saved
        assert saved["rateLimits"]["messages"]["count"] == 5  # the settings' value
        assert saved["rateLimits"]["reactions"]["source"] == "admin"
        limiter = app.node.rate_limits.config
        assert limiter.reactions == Rate(2, 5)
        assert limiter.models is None
        assert dict(limiter.role_multipliers) == {"agent": 4}
        assert (await (await client.get("/api/mesh/settings")).get_json())["name"] == "Two"
        assert app.node.admin.link_previews is False


async def test_going_private_ends_guest_access(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    room_id = (await mesh.create_room(owner, "lobby"))["roomId"]
    await mesh.join(bob, room_id)
    guest = await mesh.guest()
    await mesh.join(guest, room_id)
    assert (await get(mesh, "/api/auth/me", guest)).status_code == 200
    async with connect(base_url, guest) as guest_ws, connect(base_url, bob) as bob_ws:
        r = await put_settings(mesh, owner, visibility="private")
        assert r.status_code == 200, r.text
        # the guest's session is told and closed; bob's stays
        error = await guest_ws.expect("error")
        assert error["code"] == "token_revoked"
        with pytest.raises(ConnectionClosed) as closed:
            await guest_ws.recv()
        assert closed.value.reason.code == 1008
        assert closed.value.reason.reason == "token_revoked"
        sent = await mesh.send(owner, room_id, "members only now")
        await bob_ws.expect("message", messageId=sent["messageId"])
    # the guest's token is refused everywhere, new guests too
    assert_error(await get(mesh, "/api/auth/me", guest), 401, "token_revoked")
    assert_error(await get(mesh, f"/api/rooms/{room_id}/messages", guest), 401, "token_revoked")
    assert_error(await mesh.http.post("/api/auth/guest"), 403, "guests_not_allowed")
    async with connect(base_url) as ws:
        await ws.send(type="authenticate", token=guest.token)
        assert (await ws.recv())["code"] == "token_revoked"
        with pytest.raises(ConnectionClosed):
            await ws.recv()
    # members are not affected
    assert (await get(mesh, "/api/auth/me", bob)).status_code == 200
    # public again: guests are welcome again, as anyone could get a guest token then
    r = await put_settings(mesh, owner, visibility="public")
    assert r.status_code == 200
    assert (await get(mesh, "/api/auth/me", guest)).status_code == 200


async def test_a_waiting_guest_poll_ends_when_the_mesh_goes_private(
    base_url: str, mesh: Mesh
) -> None:
    owner = await mesh.setup()
    guest = await mesh.guest()
    answers: list[httpx.Response] = []

    async def poll() -> None:
        answers.append(
            await mesh.http.post("/api/poll", json={"timeout": 20}, headers=guest.headers)
        )

    async with connect(base_url, owner) as watch, trio.open_nursery() as nursery:
        nursery.start_soon(poll)
        # the poll is waiting once the guest comes online
        await watch.expect("presence", participantId=guest.participant_id, online=True)
        with trio.fail_after(5):
            await put_settings(mesh, owner, visibility="private")
    # answered at once, and with nothing: a guest's access has ended
    assert_error(answers[0], 401, "token_revoked")
    assert_error(
        await mesh.http.post("/api/poll", json={}, headers=guest.headers), 401, "token_revoked"
    )
