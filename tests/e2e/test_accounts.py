"""Setup, registration, login, guests and tokens over a real loopback socket."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers import PASSWORD, Mesh, assert_error


async def test_setup_status_before_and_after_init(http: httpx.AsyncClient, mesh: Mesh) -> None:
    r = await http.get("/api/setup/status")
    assert r.status_code == 200
    assert r.json()["initialized"] is False

    owner = await mesh.setup(
        "root", description="a test mesh", visibility="private", registrationMode="closed"
    )
    status = (await http.get("/api/setup/status")).json()
    default_room = status.pop("defaultRoomId")
    assert status == {
        "initialized": True,
        "codeRequired": False,
        "registrationMode": "closed",
        "visibility": "private",
        "meshName": "Test Mesh",
    }
    # setup made the default room, with the owner in it
    room = (await http.get(f"/api/rooms/{default_room}", headers=owner.headers)).json()
    assert (room["name"], room["joined"], room["memberCount"]) == ("Town Square", True, 1)
    me = (await http.get("/api/auth/me", headers=owner.headers)).json()
    assert me["participantId"] == owner.participant_id
    assert me["role"] == "owner"
    assert me["tier"] == 1
    assert (await http.get("/api/mesh/settings")).json() == {
        "name": "Test Mesh",
        "description": "a test mesh",
        "visibility": "private",
    }


async def test_setup_is_allowed_once(http: httpx.AsyncClient, mesh: Mesh) -> None:
    await mesh.setup()
    r = await http.post(
        "/api/setup/init", json={"name": "other", "password": PASSWORD, "meshName": "X"}
    )
    assert_error(r, 409, "already_initialized")


async def test_setup_rejects_bad_values(http: httpx.AsyncClient) -> None:
    base = {"name": "root", "password": PASSWORD, "meshName": "M"}
    for change, code in [
        ({"visibility": "secret"}, "invalid_visibility"),
        ({"registrationMode": "maybe"}, "invalid_registration_mode"),
        ({"meshName": "   "}, "invalid_mesh_name"),
        ({"password": "short"}, "weak_password"),
        ({"name": "has space"}, "invalid_name"),
        ({"name": 12}, "invalid_field"),
        ({"visibility": ""}, "invalid_visibility"),
    ]:
        assert_error(await http.post("/api/setup/init", json={**base, **change}), 400, code)
    assert (await http.get("/api/setup/status")).json()["initialized"] is False


# argon2 at its real cost: the five setups are all in flight while each hashes
@pytest.mark.full_cost_passwords
async def test_concurrent_setup_creates_one_owner(http: httpx.AsyncClient) -> None:
    import trio

    statuses: list[int] = []

    async def attempt(i: int) -> None:
        r = await http.post(
            "/api/setup/init",
            json={"name": f"owner{i}", "password": PASSWORD, "meshName": "M"},
        )
        statuses.append(r.status_code)

    async with trio.open_nursery() as nursery:
        for i in range(5):
            nursery.start_soon(attempt, i)
    assert sorted(statuses) == [201, 409, 409, 409, 409]


async def test_register_before_setup_is_refused(http: httpx.AsyncClient) -> None:
    r = await http.post("/api/auth/register", json={"name": "bob", "password": PASSWORD})
    assert_error(r, 403, "not_initialized")


async def test_register_login_me(http: httpx.AsyncClient, mesh: Mesh) -> None:
    await mesh.setup()
    bob = await mesh.register("bob")
    assert bob.name == "bob"
    me = (await http.get("/api/auth/me", headers=bob.headers)).json()
    assert me["role"] == "member"
    assert me["type"] == "human"

    r = await http.post("/api/auth/login", json={"name": "bob", "password": PASSWORD})
    assert r.status_code == 200
    body = r.json()
    assert body["participantId"] == bob.participant_id
    assert body["name"] == "bob"
    login_headers = {"Authorization": f"Bearer {body['token']}"}
    assert (await http.get("/api/auth/me", headers=login_headers)).status_code == 200
    # names are case-insensitive for login
    r = await http.post("/api/auth/login", json={"name": "BOB", "password": PASSWORD})
    assert r.status_code == 200


async def test_register_validation(http: httpx.AsyncClient, mesh: Mesh) -> None:
    await mesh.setup()
    await mesh.register("carol")
    cases = [
        ({"name": "carol", "password": PASSWORD}, 409, "name_taken"),
        ({"name": "CAROL", "password": PASSWORD}, 409, "name_taken"),
        ({"password": PASSWORD}, 400, "missing_field"),
        ({"name": "", "password": PASSWORD}, 400, "invalid_name"),
        ({"name": "   ", "password": PASSWORD}, 400, "invalid_name"),
        ({"name": "x" * 65, "password": PASSWORD}, 400, "invalid_name"),
        ({"name": "a@b", "password": PASSWORD}, 400, "invalid_name"),
        ({"name": "carol\n", "password": PASSWORD}, 400, "invalid_name"),  # regression
        ({"name": "dave\n", "password": PASSWORD}, 400, "invalid_name"),
        ({"name": "-dave", "password": PASSWORD}, 400, "invalid_name"),
        ({"name": "dave"}, 400, "missing_field"),
        ({"name": "dave", "password": "1234567"}, 400, "weak_password"),
        ({"name": "dave", "password": "password"}, 400, "weak_password"),
        ({"name": "dave", "password": "aaaaaaaaaa"}, 400, "weak_password"),
        ({"name": "davedave", "password": "davedave"}, 400, "weak_password"),
        ({"name": "dave", "password": "x" * 300}, 400, "invalid_password"),
        ({"name": ["dave"], "password": PASSWORD}, 400, "invalid_field"),
        ({"name": "dave", "password": 12345678}, 400, "invalid_field"),
    ]
    for body, status, code in cases:
        assert_error(await http.post("/api/auth/register", json=body), status, code)


async def test_login_failures_look_the_same(http: httpx.AsyncClient, mesh: Mesh) -> None:
    await mesh.setup()
    await mesh.register("erin")
    wrong = await http.post("/api/auth/login", json={"name": "erin", "password": "nope-nope"})
    unknown = await http.post("/api/auth/login", json={"name": "nobody", "password": PASSWORD})
    assert_error(wrong, 401, "invalid_credentials")
    assert_error(unknown, 401, "invalid_credentials")
    assert wrong.json() == unknown.json()
    huge = await http.post("/api/auth/login", json={"name": "erin", "password": "p" * 60_000})
    assert_error(huge, 401, "invalid_credentials")


async def test_closed_registration(http: httpx.AsyncClient, mesh: Mesh) -> None:
    await mesh.setup(registrationMode="closed")
    r = await http.post("/api/auth/register", json={"name": "frank", "password": PASSWORD})
    assert_error(r, 403, "registration_closed")


async def test_guest_on_public_mesh(http: httpx.AsyncClient, mesh: Mesh) -> None:
    owner = await mesh.setup(visibility="public")
    guest = await mesh.guest()
    me = (await http.get("/api/auth/me", headers=guest.headers)).json()
    assert me["role"] == "spectator"
    assert me["type"] == "guest"
    room = await mesh.create_room(owner, "lobby")
    await mesh.send(owner, room["roomId"], "welcome")
    # a guest can join and read ...
    await mesh.join(guest, room["roomId"])
    assert [m["content"] for m in await mesh.messages(guest, room["roomId"])] == ["welcome"]
    # ... but not send, create rooms or open DMs
    r = await http.post(
        f"/api/rooms/{room['roomId']}/messages", json={"content": "hi"}, headers=guest.headers
    )
    assert_error(r, 403, "forbidden")
    assert_error(await http.post("/api/rooms", json={"name": "mine"}, headers=guest.headers), 403)
    assert_error(
        await http.post(
            "/api/dms", json={"participantId": owner.participant_id}, headers=guest.headers
        ),
        403,
    )


async def test_guest_on_private_mesh_is_refused(http: httpx.AsyncClient, mesh: Mesh) -> None:
    assert_error(await http.post("/api/auth/guest"), 403, "guests_not_allowed")
    await mesh.setup(visibility="private")
    assert_error(await http.post("/api/auth/guest"), 403, "guests_not_allowed")


async def test_tokens_are_checked(http: httpx.AsyncClient, mesh: Mesh) -> None:
    owner = await mesh.setup()
    assert_error(await http.get("/api/auth/me"), 401, "unauthorized")
    for header in [
        "Bearer",
        "Bearer not-a-jwt",
        "Basic dXNlcjpwYXNz",
        f"Bearer {owner.token}x",
        f"Bearer {owner.token[:-4]}AAAA",
    ]:
        r = await http.get("/api/rooms", headers={"Authorization": header})
        assert_error(r, 401)
    # a token signed with another secret
    import jwt

    forged = jwt.encode(
        {"sub": owner.participant_id, "kind": "human", "iat": 0, "exp": 2**40, "jti": "x"},
        b"0" * 32,
        algorithm="HS256",
    )
    r = await http.get("/api/rooms", headers={"Authorization": f"Bearer {forged}"})
    assert_error(r, 401, "invalid_token")
