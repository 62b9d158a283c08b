"""Quotas and bounded documents over a served node (issue 27, item 4;
``docs/decisions/0054-quotas-and-bounded-documents.md``): rooms per role,
uploads per participant, the snapshot and ``GET /api/state`` bounded to the
rooms one is in, ``GET /api/rooms`` paged by a cursor, WebSocket sessions
and long polls per participant and per address.

Rules: loopback only, port 0, every wait bounded, no sleeps to wait for state.
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed

from quart_mesh import Settings
from quart_mesh.config import DEFAULT_ROOM_QUOTAS, Limits, RateLimits
from tests.e2e.test_stock_hypercorn import served
from tests.helpers import Mesh, User, assert_error, connect, open_client, wait_for


async def bootstrap(mesh: Mesh, name: str) -> User:
    """A bot bootstrapped anonymously (open registration): role ``agent``."""
    r = await mesh.http.post("/api/agents/bootstrap", json={"name": name, "type": "nanoclaw"})
    assert r.status_code == 201, r.text
    return User(r.json()["agentId"], name, r.json()["token"])


async def create(mesh: Mesh, user: User, name: str, **extra: Any) -> httpx.Response:
    return await mesh.http.post("/api/rooms", json={"name": name, **extra}, headers=user.headers)


async def refused_session(base_url: str, user: User) -> tuple[dict[str, Any], int, str]:
    """Open ``/ws`` and authenticate as *user*, expecting a refusal: the
    error frame, then the close code and reason."""
    async with open_client(base_url) as raw:
        await raw.send_message(json.dumps({"type": "authenticate", "token": user.token}))
        error = json.loads(await raw.get_message())
        with pytest.raises(ConnectionClosed) as closed:
            await raw.get_message()
        return error, closed.value.reason.code, closed.value.reason.reason


async def accepted(base_url: str, user: User) -> bool:
    """Whether a new session of *user* is accepted now (then closed)."""
    async with open_client(base_url) as raw:
        await raw.send_message(json.dumps({"type": "authenticate", "token": user.token}))
        frame = json.loads(await raw.get_message())
        return bool(frame["type"] == "auth_ok")


class TestRoomQuotas:
    @pytest.fixture
    def settings(self, tmp_path: Path) -> Settings:
        quotas = {**DEFAULT_ROOM_QUOTAS, "member": 3, "agent": 2}
        return Settings(data_dir=tmp_path / "mesh-data", room_quotas=quotas)

    async def test_each_role_up_to_its_quota(self, mesh: Mesh) -> None:
        owner = await mesh.setup()
        bob = await mesh.register("bob")
        rooms = [(await mesh.create_room(bob, f"bob-{i}"))["roomId"] for i in range(3)]
        r = await create(mesh, bob, "bob-3")
        assert_error(r, 409, "too_many_rooms")
        assert "3" in r.json()["error"]
        # deleting one frees a slot; joining others' rooms takes none
        r = await mesh.http.delete(f"/api/rooms/{rooms[0]}", headers=bob.headers)
        assert r.status_code == 200, r.text
        await mesh.create_room(bob, "bob-3")
        assert_error(await create(mesh, bob, "bob-4"), 409, "too_many_rooms")
        # a bot (agent) has a lower quota
        bot = await bootstrap(mesh, "spammer")
        for i in range(2):
            await mesh.create_room(bot, f"bot-{i}")
        assert_error(await create(mesh, bot, "bot-2"), 409, "too_many_rooms")
        # a guest (spectator) creates none
        guest = await mesh.guest()
        assert_error(await create(mesh, guest, "guest-room"), 403)
        # the owner (and admins) have no quota
        for i in range(5):
            await mesh.create_room(owner, f"owner-{i}")
        # promoted to admin, bob has none either
        r = await mesh.http.put(
            f"/api/participants/{bob.participant_id}/role",
            json={"role": "admin"},
            headers=owner.headers,
        )
        assert r.status_code == 200, r.text
        await mesh.create_room(bob, "bob-admin")

    async def test_a_description_is_bounded(self, mesh: Mesh) -> None:
        owner = await mesh.setup()
        assert_error(await create(mesh, owner, "long", description="x" * 2001), 400)
        await mesh.create_room(owner, "fits", description="x" * 2000)


class TestUploadCount:
    @pytest.fixture
    def settings(self, tmp_path: Path) -> Settings:
        return Settings(
            data_dir=tmp_path / "mesh-data", limits=Limits(max_uploads_per_participant=2)
        )

    async def test_uploads_per_participant(self, mesh: Mesh) -> None:
        owner = await mesh.setup()
        bob = await mesh.register("bob")

        async def upload(user: User) -> httpx.Response:
            return await mesh.http.post(
                "/api/upload",
                files={"file": ("a.txt", b"hello", "text/plain")},
                headers=user.headers,
            )

        for _ in range(2):
            r = await upload(bob)
            assert r.status_code == 201, r.text
        assert_error(await upload(bob), 409, "too_many_uploads")
        # files.unlimited (admins, the owner) is not counted
        for _ in range(3):
            r = await upload(owner)
            assert r.status_code == 201, r.text


class TestRoomPages:
    @pytest.fixture
    def settings(self, tmp_path: Path) -> Settings:
        limits = Limits(default_room_page_size=4, max_room_page_size=10)
        return Settings(data_dir=tmp_path / "mesh-data", limits=limits)

    async def test_pages_through_every_room_once(self, mesh: Mesh) -> None:
        owner = await mesh.setup()
        bob = await mesh.register("bob")
        names = {f"room-{i:02d}" for i in range(23)}
        for name in sorted(names):
            await mesh.create_room(owner, name)
        # a DM is never listed
        r = await mesh.http.post(
            "/api/dms", json={"participantId": bob.participant_id}, headers=owner.headers
        )
        assert r.status_code in (200, 201), r.text
        everything = names | {"Town Square"}
        seen: list[str] = []
        cursor: str | None = None
        pages = 0
        while True:
            params: dict[str, Any] = {"limit": 7}
            if cursor is not None:
                params["cursor"] = cursor
            r = await mesh.http.get("/api/rooms", params=params, headers=bob.headers)
            assert r.status_code == 200, r.text
            page = r.json()
            assert set(page) == {"rooms", "nextCursor"}
            assert len(page["rooms"]) <= 7
            seen += [room["name"] for room in page["rooms"]]
            pages += 1
            if pages == 2:
                # made meanwhile: one before the cursor (not on a later page),
                # one after it (on a later page); nothing repeats or is skipped
                await mesh.create_room(owner, "aaa-early")
                await mesh.create_room(owner, "zzz-late")
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert len(seen) == len(set(seen)), seen
        assert set(seen) == everything | {"zzz-late"}
        assert seen == sorted(seen, key=str.casefold)
        assert pages == 4
        # without a limit: the default page
        r = await mesh.http.get("/api/rooms", params={"cursor": ""}, headers=bob.headers)
        assert r.status_code == 200, r.text

    async def test_the_plain_list_stays_a_bounded_list(self, mesh: Mesh) -> None:
        owner = await mesh.setup()
        for i in range(12):
            await mesh.create_room(owner, f"r{i:02d}")
        r = await mesh.http.get("/api/rooms", headers=owner.headers)
        assert r.status_code == 200, r.text
        listed = r.json()
        assert isinstance(listed, list)
        assert len(listed) == 10  # max_room_page_size
        following = r.headers["Mesh-Next-Cursor"]
        r = await mesh.http.get(
            "/api/rooms", params={"cursor": following, "limit": 10}, headers=owner.headers
        )
        rest = r.json()
        assert rest["nextCursor"] is None
        names = [room["name"] for room in listed + rest["rooms"]]
        assert len(names) == len(set(names)) == 13

    async def test_bad_pages_are_400(self, mesh: Mesh) -> None:
        owner = await mesh.setup()
        for params, code in (
            ({"limit": 0}, "invalid_limit"),
            ({"limit": 11}, "invalid_limit"),
            ({"limit": "many"}, "invalid_query"),
            ({"cursor": "%%%"}, "invalid_cursor"),
            ({"cursor": "x" * 500}, "invalid_cursor"),
            ({"cursor": "AA"}, "invalid_cursor"),  # a NUL: PostgreSQL takes none
            ({"cursor": "Cg"}, "invalid_cursor"),  # a newline: in no name key
        ):
            r = await mesh.http.get("/api/rooms", params=params, headers=owner.headers)
            assert_error(r, 400, code)
        assert_error(await mesh.http.get("/api/rooms", params={"limit": 2}), 401)


class TestBoundedSnapshot:
    @pytest.fixture
    def settings(self, tmp_path: Path) -> Settings:
        quotas = {**DEFAULT_ROOM_QUOTAS, "agent": 30}
        limits = Limits(max_snapshot_rooms=5)
        return Settings(data_dir=tmp_path / "mesh-data", room_quotas=quotas, limits=limits)

    async def test_a_bots_rooms_do_not_grow_others_snapshots(
        self, base_url: str, mesh: Mesh
    ) -> None:
        owner = await mesh.setup()
        bob = await mesh.register("bob")
        bot = await bootstrap(mesh, "spammer")

        async def state(user: User) -> httpx.Response:
            r = await mesh.http.get("/api/state", headers=user.headers)
            assert r.status_code == 200, r.text
            return r

        before = len((await state(bob)).content)
        for i in range(30):
            await mesh.create_room(bot, f"spam-{i:02d}", description="x" * 2000)
        assert_error(await create(mesh, bot, "spam-30"), 409, "too_many_rooms")
        for user in (bob, owner):
            r = await state(user)
            # the rooms one is in (the default room): none of the bot's
            assert [room["name"] for room in r.json()["rooms"]] == ["Town Square"]
            assert len(r.content) < before + 1000  # the bot itself is a participant more
            async with connect(base_url, user) as ws:
                snapshot = ws.snapshot  # type: ignore[attr-defined]
                assert [room["name"] for room in snapshot["rooms"]] == ["Town Square"]
        # the bot's own: at most max_snapshot_rooms, all its own
        rooms = (await state(bot)).json()["rooms"]
        assert len(rooms) == 5
        assert all(room["joined"] for room in rooms)
        async with connect(base_url, bot) as ws:
            assert len(ws.snapshot["rooms"]) == 5  # type: ignore[attr-defined]
        # joining a room puts it in one's snapshot
        spam = (await mesh.http.get("/api/rooms", headers=bob.headers)).json()
        await mesh.join(bob, spam[0]["roomId"])
        names = [room["name"] for room in (await state(bob)).json()["rooms"]]
        assert names == ["spam-00", "Town Square"]


async def test_the_33rd_session_of_one_token_is_refused(base_url: str, mesh: Mesh) -> None:
    await mesh.setup()
    guest = await mesh.guest()
    bob = await mesh.register("bob")
    with trio.fail_after(60):
        async with AsyncExitStack() as stack:
            sockets = [await stack.enter_async_context(connect(base_url, guest)) for _ in range(32)]
            error, code, reason = await refused_session(base_url, guest)
            assert (error["type"], error["code"]) == ("error", "too_many_sessions")
            assert "32" in error["message"]
            assert (code, reason) == (1008, "too_many_sessions")
            # another participant is not held back
            async with connect(base_url, bob):
                pass
            # one closed frees a slot (once the node has seen it go)
            await sockets[0].ws.aclose()

            async def slot_free() -> bool:
                return await accepted(base_url, guest)

            await wait_for(slot_free)
            # the open ones still work
            await sockets[1].send(type="typing", roomId="01ARZ3NDEKTSV4RRFFQ69G5FAV")


class TestPerAddress:
    @pytest.fixture
    def settings(self, tmp_path: Path) -> Settings:
        limits = Limits(
            max_sessions_per_participant=2,
            max_sessions_per_address=3,
            max_polls_per_participant=2,
            max_polls_per_address=3,
        )
        # loopback is exempt by default: counted here, as a real client's address
        rates = RateLimits(exempt_addresses=())
        return Settings(data_dir=tmp_path / "mesh-data", limits=limits, rate_limits=rates)

    async def test_sessions_per_participant_and_address(self, base_url: str, mesh: Mesh) -> None:
        await mesh.setup()
        alice = await mesh.register("alice")
        bob = await mesh.register("bob")
        async with connect(base_url, alice), connect(base_url, alice):
            error, code, reason = await refused_session(base_url, alice)
            assert (error["code"], code, reason) == ("too_many_sessions", 1008, "too_many_sessions")
            async with connect(base_url, bob):
                # three from this address: bob's second is refused by address
                error, code, _ = await refused_session(base_url, bob)
                assert (error["code"], code) == ("too_many_sessions", 1008)
                assert "address" in error["message"]

    async def test_long_polls_per_participant_and_address(self, mesh: Mesh) -> None:
        owner = await mesh.setup()
        alice = await mesh.register("alice")
        bob = await mesh.register("bob")
        room_id = (await mesh.create_room(owner, "news"))["roomId"]
        await mesh.join(alice, room_id)
        await mesh.join(bob, room_id)
        head = (await mesh.http.post("/api/poll", json={}, headers=alice.headers)).json()["cursor"]
        answers: list[httpx.Response] = []

        async def long_poll(user: User) -> None:
            # refused while a probe below holds a seat for a moment: again
            body = {"cursor": head, "timeout": 20}
            while True:
                r = await mesh.http.post("/api/poll", json=body, headers=user.headers)
                if r.status_code != 429:
                    answers.append(r)
                    return
                await trio.sleep(0.05)

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(long_poll, alice)
                nursery.start_soon(long_poll, alice)
                third: list[httpx.Response] = []

                async def refused() -> bool:
                    body = {"cursor": head, "timeout": 0.5}
                    r = await mesh.http.post("/api/poll", json=body, headers=alice.headers)
                    third.append(r)
                    return r.status_code == 429

                await wait_for(refused)  # once both wait
                assert_error(third[-1], 429, "too_many_polls")
                assert third[-1].headers["Retry-After"]
                # a short poll takes no seat
                r = await mesh.http.post("/api/poll", json={"cursor": head}, headers=alice.headers)
                assert r.status_code == 200, r.text
                # bob's first long poll is the address's third; his second is refused
                nursery.start_soon(long_poll, bob)

                async def bob_refused() -> bool:
                    body = {"cursor": head, "timeout": 0.5}
                    r = await mesh.http.post("/api/poll", json=body, headers=bob.headers)
                    third.append(r)
                    return r.status_code == 429

                await wait_for(bob_refused)
                assert "address" in third[-1].json()["error"]
                # a message ends the three
                await mesh.send(owner, room_id, "hello")
        assert [r.status_code for r in answers] == [200, 200, 200]
        assert all(r.json()["messages"][0]["content"] == "hello" for r in answers)
        # the seats are free again
        r = await mesh.http.post(
            "/api/poll", json={"cursor": head, "timeout": 0.1}, headers=alice.headers
        )
        assert r.status_code == 200, r.text


async def test_sessions_are_capped_under_stock_hypercorn(tmp_path: Path) -> None:
    """Through Quart's ``/ws`` route (``create_asgi_app``) the same seats are
    held, the address taken from the ASGI scope."""
    limits = Limits(max_sessions_per_participant=2, max_sessions_per_address=3)
    rates = RateLimits(exempt_addresses=())
    with trio.fail_after(60):
        async with (
            served(tmp_path, limits=limits, rate_limits=rates) as url,
            httpx.AsyncClient(base_url=url, timeout=10) as http,
        ):
            mesh = Mesh(http)
            await mesh.setup()
            alice = await mesh.register("alice")
            bob = await mesh.register("bob")
            async with connect(url, alice) as first, connect(url, alice):
                error, code, reason = await refused_session(url, alice)
                assert (error["code"], code, reason) == (
                    "too_many_sessions",
                    1008,
                    "too_many_sessions",
                )
                async with connect(url, bob):
                    error, _, _ = await refused_session(url, bob)
                    assert "address" in error["message"]
                await first.ws.aclose()

                async def slot_free() -> bool:
                    return await accepted(url, alice)

                await wait_for(slot_free)

            # every session over and its participant offline (written) before
            # the server is stopped: no unit of work is cut off by the stop
            async def all_offline() -> bool:
                r = await http.get("/api/participants", headers=alice.headers)
                return not any(p["online"] for p in r.json() if p["name"] in ("alice", "bob"))

            await wait_for(all_offline)
