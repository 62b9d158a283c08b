"""Rate limits over real sockets: REST answers 429 with Retry-After, the
WebSocket an ``error`` frame ``rate_limited`` (the session stays open), the
model proxy OpenAI's 429; one participant's limit leaves others alone;
limits recover; a role's multiplier raises them; the owner is not limited.

The limits here are small: bursts of a few, then one every two seconds or
so. The node is served in this process and its limiter reads Trio's clock,
so the tests that wait for a limit to recover run on a ``MockClock`` that
keeps real time (``rate=1``, so timeouts still work) and jump it by what the
node says instead of sleeping. Loopback only, port 0; clients on 127.0.0.2
stand for a second address (Linux routes all of 127.0.0.0/8 to loopback).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio.testing import MockClock

from quart_mesh import MeshApp, Settings, create_app, serve
from quart_mesh.config import ModelConfig, Rate, RateLimits
from tests.helpers import PASSWORD, Mesh, User, assert_error, connect
from tests.upstream import Upstream


@pytest.fixture
def settings(tmp_path: Path, upstream: Upstream) -> Settings:
    return Settings(
        data_dir=tmp_path / "mesh-data",
        models=(ModelConfig("echo", f"http://127.0.0.1:{upstream.port}/v1", "echo-model"),),
        rate_limits=RateLimits(
            # a burst of n, then one every two seconds: after a quick burst the
            # next is refused until then, even on a slow machine
            messages=Rate(3, 6),
            reactions=Rate(2, 4),
            models=Rate(2, 4),
            # logins hash passwords (argon2id: ~1 s each at its real cost on a loaded 2-core
            # machine): one refill a minute, so a slow burst still meets the limit
            login_name=Rate(2, 120),
            login_address=Rate(4, 240),
            registration_address=Rate(4, 8),
            role_multipliers={"admin": 3},
            exempt_addresses=(),  # loopback is limited here
        ),
    )


@pytest.fixture
def clock() -> MockClock:
    """Trio's clock for the test and the node it serves: real time, plus jumps."""
    return MockClock(rate=1)


@pytest.fixture
def served_app(settings: Settings) -> MeshApp:
    return create_app(settings)


@pytest.fixture
async def base_url(served_app: MeshApp, nursery: trio.Nursery) -> str:
    url: str = await nursery.start(
        lambda task_status: serve(served_app, port=0, task_status=task_status)
    )
    return url


async def send(mesh: Mesh, user: User, room_id: str, content: str) -> httpx.Response:
    return await mesh.http.post(
        f"/api/rooms/{room_id}/messages", json={"content": content}, headers=user.headers
    )


def retry_after(response: httpx.Response, most: int = 4) -> int:
    """A 429 ``rate_limited`` with a whole, positive ``Retry-After`` of at
    most *most* seconds (the rule's interval between two refills)."""
    assert_error(response, 429, "rate_limited")
    value = response.headers["Retry-After"]
    assert value.isdigit(), value
    assert 1 <= int(value) <= most, value
    return int(value)


async def room_with(mesh: Mesh, owner: User, *members: User) -> str:
    room_id = str((await mesh.create_room(owner, "general"))["roomId"])
    for member in members:
        await mesh.join(member, room_id)
    return room_id


async def test_messages_over_rest_and_websocket_share_one_budget(
    base_url: str, mesh: Mesh, clock: MockClock
) -> None:
    owner = await mesh.setup()
    bob, carol = await mesh.register("bob"), await mesh.register("carol")
    room_id = await room_with(mesh, owner, bob, carol)
    async with connect(base_url, bob) as ws:
        for i in range(3):
            assert (await send(mesh, bob, room_id, f"b{i}")).status_code == 201
        retry_after(await send(mesh, bob, room_id, "one too many"))
        # the same budget over the WebSocket: an error frame, the session stays
        await ws.send(type="send_message", roomId=room_id, content="over ws")
        error = await ws.expect("error")
        assert error["code"] == "rate_limited"
        assert error["frame"] == "send_message"
        assert 0 < error["retryAfter"] <= 2
        # edits count too
        r = await mesh.http.get(f"/api/rooms/{room_id}/messages", headers=bob.headers)
        first = r.json()[0]["messageId"]
        r = await mesh.http.patch(
            f"/api/rooms/{room_id}/messages/{first}", json={"content": "x"}, headers=bob.headers
        )
        retry_after(r)
        # carol is not held back by bob's limit
        sent = [(await send(mesh, carol, room_id, f"c{i}")).status_code for i in range(3)]
        assert sent == [201, 201, 201]
        await ws.expect("message", content="c2")
        # after the wait bob's frame goes through on the same session
        clock.jump(error["retryAfter"])
        await ws.send(type="send_message", roomId=room_id, content="over ws, later")
        await ws.expect("message", content="over ws, later")
    # the owner is never limited
    for i in range(10):
        assert (await send(mesh, owner, room_id, f"o{i}")).status_code == 201


async def test_reactions(base_url: str, mesh: Mesh, clock: MockClock) -> None:
    owner = await mesh.setup()
    bob, carol = await mesh.register("bob"), await mesh.register("carol")
    room_id = await room_with(mesh, owner, bob, carol)
    message_id = (await mesh.send(owner, room_id, "react to me"))["messageId"]
    path = f"/api/rooms/{room_id}/messages/{message_id}/reactions"
    for emoji in ("a", "b"):
        r = await mesh.http.post(path, json={"emoji": emoji}, headers=bob.headers)
        assert r.status_code in (200, 201), r.text
    retry_after(await mesh.http.post(path, json={"emoji": "c"}, headers=bob.headers))
    # removing counts as well
    retry_after(await mesh.http.delete(f"{path}/a", headers=bob.headers))
    async with connect(base_url, bob) as ws:
        await ws.send(type="add_reaction", messageId=message_id, emoji="d")
        error = await ws.expect("error")
        assert (error["code"], error["frame"]) == ("rate_limited", "add_reaction")
        r = await mesh.http.post(path, json={"emoji": "e"}, headers=carol.headers)
        assert r.status_code in (200, 201), r.text
        clock.jump(error["retryAfter"])
        await ws.send(type="add_reaction", messageId=message_id, emoji="d")
        await ws.expect("reaction_added", emoji="d", participantId=bob.participant_id)


async def test_typing_beyond_the_limit_is_dropped_silently(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    room_id = await room_with(mesh, owner, bob)
    async with connect(base_url, owner) as owner_ws, connect(base_url, bob) as bob_ws:
        for _ in range(3):
            await bob_ws.send(type="typing", roomId=room_id)
        typing = await owner_ws.expect("typing", participantId=bob.participant_id)
        # bob's three frames are handled before his marker, then the owner's
        assert [f for f in await bob_ws.settle() if f["type"] == "error"] == []
        await owner_ws.settle()
        assert [f for f in owner_ws.seen if f["type"] == "typing"] == [typing]


async def login(http: httpx.AsyncClient, name: str, password: str = PASSWORD) -> httpx.Response:
    return await http.post("/api/auth/login", json={"name": name, "password": password})


async def test_login_attempts_per_name_and_per_address(
    base_url: str, mesh: Mesh, clock: MockClock
) -> None:
    await mesh.setup()
    await mesh.register("bob")
    await mesh.register("carol")
    http = mesh.http
    # per name: two attempts for "bob", wrong password or not
    assert_error(await login(http, "bob", "wrong password"), 401, "invalid_credentials")
    assert_error(await login(http, "BOB", "wrong password"), 401, "invalid_credentials")
    wait = retry_after(await login(http, "bob"), most=60)
    # unknown names are counted the same way (a 429 says nothing about who exists)
    assert_error(await login(http, "nobody"), 401, "invalid_credentials")
    # per address: four attempts from 127.0.0.1, whatever the name
    wait = max(wait, retry_after(await login(http, "carol"), most=60))
    # another address is not held back (and carol's name was not charged)
    transport = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
    async with httpx.AsyncClient(base_url=base_url, transport=transport, timeout=10) as other:
        assert (await login(other, "carol")).status_code == 200
    # the limits recover (a new connection: the jump outlasts keep-alive)
    clock.jump(wait)
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as again:
        assert (await login(again, "bob")).status_code == 200


async def test_registrations_guests_and_bootstraps_per_address(
    base_url: str, mesh: Mesh, clock: MockClock
) -> None:
    owner = await mesh.setup()
    http = mesh.http
    await mesh.register("bob")
    await mesh.guest()
    r = await http.post("/api/agents/bootstrap", json={"name": "bot-1", "type": "nanoclaw"})
    assert r.status_code == 201, r.text
    r = await http.post("/api/auth/register", json={"name": "dave", "password": PASSWORD})
    assert r.status_code == 201, r.text
    # the fifth from this address in a burst is refused, whatever it is
    retry_after(await http.post("/api/agents/bootstrap", json={"name": "bot-2", "type": "simple"}))
    retry_after(await http.post("/api/auth/guest"))
    r = await http.post("/api/auth/register", json={"name": "erin", "password": PASSWORD})
    wait = retry_after(r)
    # an admin's bootstrap is not limited per address
    r = await http.post(
        "/api/agents/bootstrap",
        json={"name": "bot-3", "type": "nanoclaw"},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    transport = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
    async with httpx.AsyncClient(base_url=base_url, transport=transport, timeout=10) as other:
        r = await other.post("/api/agents/bootstrap", json={"name": "bot-4", "type": "nanoclaw"})
        assert r.status_code == 201, r.text
    clock.jump(wait)  # one registration back
    r = await http.post("/api/auth/register", json={"name": "erin", "password": PASSWORD})
    assert r.status_code == 201, r.text


async def complete(http: httpx.AsyncClient, user: User, text: str) -> httpx.Response:
    return await http.post(
        "/api/models/v1/chat/completions",
        json={"model": "echo", "messages": [{"role": "user", "content": text}]},
        headers=user.headers,
    )


async def test_model_proxy_requests_per_participant(
    base_url: str, mesh: Mesh, clock: MockClock
) -> None:
    owner = await mesh.setup()
    bob, carol = await mesh.register("bob"), await mesh.register("carol")
    for i in range(2):
        r = await complete(mesh.http, bob, f"hi {i}")
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == f"echo: hi {i}"
    r = await complete(mesh.http, bob, "again")
    # OpenAI's shape, so OpenAI clients back off as they do for OpenAI
    assert r.status_code == 429, r.text
    assert r.json()["error"]["type"] == "rate_limit_exceeded"
    assert r.json()["error"]["code"] == "rate_limit_exceeded"
    assert set(r.json()["error"]) == {"message", "type", "code"}
    wait = int(r.headers["Retry-After"])
    assert 1 <= wait <= 2
    # streaming requests count the same
    r = await mesh.http.post(
        "/api/models/v1/chat/completions",
        json={"model": "echo", "stream": True, "messages": [{"role": "user", "content": "s"}]},
        headers=bob.headers,
    )
    assert r.status_code == 429
    assert (await complete(mesh.http, carol, "me too")).status_code == 200
    for i in range(4):
        assert (await complete(mesh.http, owner, f"owner {i}")).status_code == 200
    stats = (await mesh.http.get("/api/admin/stats", headers=owner.headers)).json()
    assert stats["models"]["requests"] == 7  # refused requests never reach the upstream
    assert stats["rateLimits"]["refused"] == {"models": 2}
    clock.jump(wait)
    assert (await complete(mesh.http, bob, "later")).status_code == 200


async def test_an_admin_gets_the_admin_multiplier(
    base_url: str, mesh: Mesh, served_app: MeshApp
) -> None:
    owner = await mesh.setup()
    bob, carol = await mesh.register("bob"), await mesh.register("carol")
    await served_app.node.accounts.set_role(carol.participant_id, "admin")
    room_id = await room_with(mesh, owner, bob, carol)
    # a long window, so that nothing comes back during the test
    r = await mesh.http.put(
        "/api/admin/mesh/settings",
        json={"rateLimits": {"messages": {"count": 3, "per": 60}}},
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    # three times the members' three
    codes = [(await send(mesh, carol, room_id, f"c{i}")).status_code for i in range(10)]
    assert codes == [201] * 9 + [429]
    codes = [(await send(mesh, bob, room_id, f"b{i}")).status_code for i in range(4)]
    assert codes == [201] * 3 + [429]
    # a multiplier set at run time applies at once, to bots (role agent) too
    r = await mesh.http.put(
        "/api/admin/mesh/settings",
        json={"roleMultipliers": {"agent": 2, "admin": 3}},
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    r = await mesh.http.post("/api/agents/bootstrap", json={"name": "fast-bot", "type": "simple"})
    bot = User(r.json()["agentId"], "fast-bot", r.json()["token"])
    await mesh.join(bot, room_id)
    codes = [(await send(mesh, bot, room_id, f"x{i}")).status_code for i in range(7)]
    assert codes == [201] * 6 + [429]


async def test_rate_limits_can_be_turned_off(tmp_path: Path, nursery: trio.Nursery) -> None:
    settings = Settings.from_env(
        {"MESH_DATA_DIR": str(tmp_path), "MESH_RATE_LIMITS": "off", "MESH_RATE_EXEMPT": "none"}
    )
    app = create_app(settings)
    url: str = await nursery.start(lambda task_status: serve(app, port=0, task_status=task_status))
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        bob = await mesh.register("bob")
        room_id = await room_with(mesh, owner, bob)
        for i in range(200):
            assert (await send(mesh, bob, room_id, f"m{i}")).status_code == 201
        body: dict[str, Any] = (
            await http.get("/api/admin/mesh/settings", headers=owner.headers)
        ).json()
        assert body["rateLimitsEnabled"] is False
    assert json.dumps(body)  # rendered


def test_rate_settings_from_the_environment() -> None:
    from quart_mesh.errors import ConfigError

    limits = Settings.from_env(
        {
            "MESH_RATE_MESSAGES": "5/2s:8",
            "MESH_RATE_TYPING": "off",
            "MESH_RATE_LOGIN_ADDRESS": "100/1h",
            "MESH_RATE_ROLE_MULTIPLIERS": '{"agent": 3, "member": 0.5}',
            "MESH_RATE_EXEMPT": "10.0.0.0/8, ::1",
            "MESH_RATE_MAX_KEYS": "5000",
        }
    ).rate_limits
    assert limits.messages == Rate(5, 2, 8)
    assert limits.typing is None
    assert limits.login_address == Rate(100, 3600)
    assert dict(limits.role_multipliers) == {"agent": 3, "member": 0.5}
    assert limits.exempt_addresses == ("10.0.0.0/8", "::1")
    assert limits.max_keys == 5000
    assert Settings.from_env({}).rate_limits == RateLimits()
    for env in (
        {"MESH_RATE_MESSAGES": "lots"},
        {"MESH_RATE_MESSAGES": "0/1s"},
        {"MESH_RATE_MESSAGES": "5/0s"},
        {"MESH_RATE_LIMITS": "maybe"},
        {"MESH_RATE_ROLE_MULTIPLIERS": "[1]"},
        {"MESH_RATE_ROLE_MULTIPLIERS": '{"owner": 2}'},
        {"MESH_RATE_ROLE_MULTIPLIERS": '{"agent": -1}'},
        {"MESH_RATE_EXEMPT": "not-an-address"},
        {"MESH_RATE_MAX_KEYS": "10"},
    ):
        with pytest.raises(ConfigError):
            Settings.from_env(env)
