"""The WebSocket protocol over real sockets, with trio-websocket as the client.

Rules: loopback only, port 0, every wait bounded (``Socket.recv`` and
``expect`` fail after a few seconds), no sleeps to wait for state.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed

from quart_mesh import Settings, create_app, serve
from tests.helpers import PASSWORD, Mesh, User, assert_error, connect, open_client


@pytest.fixture
async def people(mesh: Mesh) -> tuple[User, User, User]:
    owner = await mesh.setup()
    return owner, await mesh.register("bob"), await mesh.register("carol")


async def test_authenticate_must_come_first(base_url: str, people: tuple[User, ...]) -> None:
    async with connect(base_url) as ws:
        await ws.send(type="join_room", roomId="x")
        error = await ws.recv()
        assert error["type"] == "error"
        assert error["code"] == "auth_required"
        assert error["message"]
        with pytest.raises(ConnectionClosed):
            await ws.recv()
    for token in ("nonsense", people[1].token + "x"):
        async with connect(base_url) as ws:
            await ws.send(type="authenticate", token=token)
            assert (await ws.recv())["code"] == "invalid_token"
            with pytest.raises(ConnectionClosed):
                await ws.recv()
    async with connect(base_url) as ws:
        await ws.send_raw("not json")
        assert (await ws.recv())["code"] == "invalid_json"


async def test_silence_is_refused_after_the_deadline(tmp_path: Path, nursery: trio.Nursery) -> None:
    app = create_app(Settings(data_dir=tmp_path, auth_timeout=0.3))
    url: str = await nursery.start(lambda task_status: serve(app, port=0, task_status=task_status))
    async with connect(url) as ws:
        error = await ws.recv(timeout=5)
        assert error["code"] == "auth_timeout"
        with pytest.raises(ConnectionClosed):
            await ws.recv()


async def test_auth_ok_and_snapshot(
    base_url: str, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    owner, bob, _ = people
    room = await mesh.create_room(bob, "lobby")
    async with connect(base_url, bob) as ws:
        snapshot = ws.snapshot  # type: ignore[attr-defined]
        assert [(r["roomId"], r["name"], r["joined"]) for r in snapshot["rooms"]] == [
            (room["roomId"], "lobby", True),
            (ANY, "Town Square", False),  # setup's default room
        ]
        names = {p["name"]: p for p in snapshot["participants"]}
        assert set(names) == {"owner", "bob", "carol"}
        assert set(names["bob"]) >= {"participantId", "name", "type", "role", "online", "lastSeen"}
        assert names["bob"]["position"] is None
        assert snapshot["cursor"] == "0"
        presence = await ws.expect("presence", participantId=bob.participant_id)
        assert presence["online"] is True
        # the REST view agrees while the session is open
        state = (await mesh.http.get("/api/state", headers=owner.headers)).json()
        assert {p["name"]: p["online"] for p in state["participants"]}["bob"] is True
        snap = (await mesh.http.get("/api/snapshot", headers=owner.headers)).json()
        assert snap["participants"] == state["participants"]


async def test_every_frame_and_event(
    base_url: str, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    owner, bob, carol = people
    room_id = (await mesh.create_room(bob, "main"))["roomId"]
    async with connect(base_url, bob) as b, connect(base_url, carol) as c:
        # join_room / participant_joined, to the room (the joiner included)
        await c.send(type="join_room", roomId=room_id)
        joined = await b.expect("participant_joined", roomId=room_id)
        assert joined["participant"]["participantId"] == carol.participant_id
        assert joined["participant"]["online"] is True  # the live flag, not the stored one
        await c.expect("participant_joined", roomId=room_id)
        details = (await mesh.http.get(f"/api/rooms/{room_id}", headers=bob.headers)).json()
        assert {m["name"]: m["online"] for m in details["members"]} == {"bob": True, "carol": True}

        # send_message with to: both get it, the sender too, with a cursor
        await b.send(
            type="send_message", roomId=room_id, content="hi @carol", to=carol.participant_id
        )
        got = await c.expect("message", roomId=room_id)
        mine = await b.expect("message", roomId=room_id)
        assert got == mine
        for field in ("messageId", "senderId", "senderName", "content", "timestamp", "cursor"):
            assert field in got
        assert got["senderId"] == bob.participant_id
        assert got["senderName"] == "bob"
        assert got["to"] == carol.participant_id
        message_id = got["messageId"]

        # edit_message by another member is refused; by the author it is broadcast
        await c.send(type="edit_message", messageId=message_id, content="hijack")
        refused = await c.expect("error")
        assert refused["code"] == "forbidden"
        assert refused["frame"] == "edit_message"
        await b.send(type="edit_message", messageId=message_id, content="hello @carol")
        for ws in (b, c):
            edited = await ws.expect("message_edited", messageId=message_id)
            assert edited["content"] == "hello @carol"

        # reactions: idempotent per participant and emoji
        await c.send(type="add_reaction", messageId=message_id, emoji="wave")
        await c.send(type="add_reaction", messageId=message_id, emoji="wave")
        added = await b.expect("reaction_added", messageId=message_id)
        assert added == {
            "type": "reaction_added",
            "messageId": message_id,
            "emoji": "wave",
            "participantId": carol.participant_id,
            "roomId": room_id,
        }
        await c.send(type="remove_reaction", messageId=message_id, emoji="wave")
        removed = await b.expect("reaction_removed", messageId=message_id)
        assert removed["participantId"] == carol.participant_id
        # the second add made no event, and nothing followed the removal
        await b.settle()
        assert [f for f in b.seen if f["type"].startswith("reaction")] == [added, removed]

        # typing: to the others only, rate-limited
        await c.send(type="typing", roomId=room_id)
        await c.send(type="typing", roomId=room_id)
        typing = await b.expect("typing", roomId=room_id)
        assert typing["participantId"] == carol.participant_id
        await c.settle()  # carol's second typing frame has been handled
        await b.settle()
        assert [f for f in b.seen if f["type"] == "typing"] == [typing]
        assert [f for f in c.seen if f["type"] == "typing"] == []

        # move: participant_moved to the room, stored, shown in snapshots
        await c.send(type="move", roomId=room_id, x=1.5, y=-2, z=0)
        moved = await b.expect("participant_moved", participantId=carol.participant_id)
        assert moved == {
            "type": "participant_moved",
            "roomId": room_id,
            "participantId": carol.participant_id,
            "x": 1.5,
            "y": -2,
            "z": 0,
        }
        state = (await mesh.http.get("/api/state", headers=owner.headers)).json()
        position = {p["name"]: p["position"] for p in state["participants"]}["carol"]
        assert position == {"roomId": room_id, "x": 1.5, "y": -2.0, "z": 0.0}

        # delete_message: author, broadcast
        await b.send(type="delete_message", messageId=message_id)
        for ws in (b, c):
            await ws.expect("message_deleted", messageId=message_id)

        # leave_room / participant_left, to the room (the leaver included)
        await c.send(type="leave_room", roomId=room_id)
        for ws in (b, c):
            left = await ws.expect("participant_left", roomId=room_id)
            assert left["participant"]["participantId"] == carol.participant_id
        # and then carol hears nothing more from the room
        await b.send(type="send_message", roomId=room_id, content="after")
        await b.expect("message", content="after")
        assert [f for f in await c.settle() if f.get("roomId") == room_id] == []


async def test_moderators_delete_others_messages(
    base_url: str, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    owner, bob, _ = people
    room_id = (await mesh.create_room(bob, "modded"))["roomId"]
    await mesh.join(owner, room_id)
    message = await mesh.send(bob, room_id, "rude")
    async with connect(base_url, owner) as o, connect(base_url, bob) as b:
        await o.send(type="delete_message", messageId=message["messageId"])
        await b.expect("message_deleted", messageId=message["messageId"])


async def test_rest_and_websocket_deliver_alike_and_only_to_members(
    base_url: str, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    owner, bob, carol = people
    room_id = (await mesh.create_room(bob, "members-only"))["roomId"]
    dm = (
        await mesh.http.post(
            "/api/dms", json={"participantId": carol.participant_id}, headers=bob.headers
        )
    ).json()
    async with connect(base_url, bob) as b, connect(base_url, owner) as o:
        via_rest = await mesh.send(bob, room_id, "by rest")
        await b.send(type="send_message", roomId=room_id, content="by ws")
        first = await b.expect("message", content="by rest")
        second = await b.expect("message", content="by ws")
        assert first == {"type": "message", **via_rest}
        assert set(first) == set(second)
        assert int(second["cursor"]) > int(first["cursor"])
        await mesh.send(carol, dm["roomId"], "psst")
        assert (await b.expect("message", roomId=dm["roomId"]))["content"] == "psst"
        # the owner is in neither room nor the DM: nothing reaches it
        await o.settle()
        assert [f for f in o.seen if f["type"] == "message"] == []


async def test_presence_online_and_offline(
    base_url: str, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    owner, bob, _ = people
    async with connect(base_url, owner) as o:
        async with connect(base_url, bob), connect(base_url, bob):
            online = await o.expect("presence", participantId=bob.participant_id)
            assert online["online"] is True
            people_now = (await mesh.http.get("/api/participants", headers=owner.headers)).json()
            assert {p["name"]: p["online"] for p in people_now}["bob"] is True
        offline = await o.expect("presence", participantId=bob.participant_id)
        assert offline["online"] is False
        assert offline["lastSeen"].endswith("Z")
        # only once: the second of bob's two sessions closing made him offline
        assert [
            f
            for f in o.seen
            if f["type"] == "presence" and f["participantId"] == bob.participant_id
        ] == [online, offline]
        people_now = (await mesh.http.get("/api/participants", headers=owner.headers)).json()
        bob_now = {p["name"]: p for p in people_now}["bob"]
        assert bob_now["online"] is False
        assert bob_now["lastSeen"] == offline["lastSeen"]


async def test_resume_replays_missed_messages_once(
    base_url: str, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    _, bob, carol = people
    room_id = (await mesh.create_room(bob, "resume"))["roomId"]
    await mesh.join(carol, room_id)
    async with connect(base_url, carol) as c:
        await mesh.send(bob, room_id, "one")
        last = await c.expect("message", content="one")
    for i in range(5):
        await mesh.send(bob, room_id, f"missed {i}")
    async with connect(base_url, carol, since=last["cursor"]) as c:
        await mesh.send(bob, room_id, "live")
        contents = [(await c.expect("message"))["content"] for _ in range(6)]
        assert contents == [f"missed {i}" for i in range(5)] + ["live"]
        assert [f for f in await c.settle() if f["type"] == "message"] == []


async def test_bad_frames_answer_errors_and_keep_the_session(
    base_url: str, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    _, bob, carol = people
    room_id = (await mesh.create_room(bob, "robust"))["roomId"]
    await mesh.join(carol, room_id)
    async with connect(base_url, bob) as b, connect(base_url, carol) as c:
        cases = [
            ("not json", "invalid_json"),
            ("[1, 2]", "invalid_json"),
            (json.dumps({"roomId": room_id}), "missing_type"),
            (json.dumps({"type": "fly"}), "unknown_type"),
            (json.dumps({"type": "authenticate", "token": bob.token}), "already_authenticated"),
            (json.dumps({"type": "send_message", "roomId": room_id}), "missing_field"),
            (
                json.dumps({"type": "send_message", "roomId": room_id, "content": 5}),
                "invalid_field",
            ),
            (
                json.dumps({"type": "send_message", "roomId": room_id, "content": " "}),
                "empty_content",
            ),
            (
                json.dumps({"type": "send_message", "roomId": "nope", "content": "x"}),
                "room_not_found",
            ),
            (
                json.dumps({"type": "move", "roomId": room_id, "x": 1, "y": "2", "z": 3}),
                "invalid_field",
            ),
            (
                '{"type": "move", "roomId": "' + room_id + '", "x": NaN, "y": 0, "z": 0}',
                "invalid_json",
            ),
            (
                json.dumps({"type": "move", "roomId": room_id, "x": 1e400, "y": 0, "z": 0}),
                "invalid_json",
            ),
            (json.dumps({"type": "typing", "roomId": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}), "not_member"),
            (
                json.dumps({"type": "send_message", "roomId": room_id, "content": "x" * 20000}),
                "content_too_large",
            ),
            (
                json.dumps({"type": "send_message", "roomId": room_id, "content": "y" * 70000}),
                "frame_too_large",
            ),
            (b"\x00\x01binary", "invalid_json"),
        ]
        for raw, code in cases:
            await b.send_raw(raw)
            error = await b.expect("error")
            assert error["code"] == code, (raw[:60], error)
            assert error["message"]
        # the session still works, and the other session saw nothing odd
        await b.send(type="send_message", roomId=room_id, content="still here")
        assert (await c.expect("message"))["content"] == "still here"
        assert [f for f in c.seen if f["type"] == "error"] == []


async def test_a_lagging_client_is_cut_off_and_can_resume(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    app = create_app(Settings(data_dir=tmp_path, subscriber_buffer=8, ws_send_timeout=30))
    url: str = await nursery.start(lambda task_status: serve(app, port=0, task_status=task_status))
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        room_id = (await mesh.create_room(owner, "firehose"))["roomId"]
        async with open_client(url, message_queue_size=0) as ws:
            await ws.send_message(json.dumps({"type": "authenticate", "token": owner.token}))
            assert json.loads(await ws.get_message())["type"] == "auth_ok"
            assert json.loads(await ws.get_message())["type"] == "snapshot"
            # stop reading; send far more than the buffer and the socket hold
            for i in range(300):
                await mesh.send(owner, room_id, f"m{i} " + "x" * 2000)
            stats = app.node.broker.statistics()
            assert stats.drops >= 1
            frames = []
            with trio.fail_after(10):
                try:
                    while True:
                        frames.append(json.loads(await ws.get_message()))
                except ConnectionClosed:
                    pass
        assert frames[-1]["type"] == "error"
        assert frames[-1]["code"] == "lagging"
        delivered = [f for f in frames if f["type"] == "message"]
        assert 0 < len(delivered) < 300
        # resume from the last cursor seen: the rest, in order, nothing twice
        async with connect(url, owner, since=delivered[-1]["cursor"]) as again:
            rest = [await again.expect("message", timeout=10) for _ in range(300 - len(delivered))]
        contents = [m["content"].split()[0] for m in delivered + rest]
        assert contents == [f"m{i}" for i in range(300)]


async def test_upgrades_elsewhere_are_refused(base_url: str) -> None:
    host, port = base_url.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    await stream.send_all(
        b"GET /nope HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    with trio.fail_after(5):
        answer = await stream.receive_some(4096)
    await stream.aclose()
    assert answer.startswith(b"HTTP/1.1 404")
    # plain HTTP on the same port is unaffected
    async with httpx.AsyncClient(base_url=base_url) as http:
        assert (await http.get("/api/health")).status_code == 200


async def test_status_and_poll(base_url: str, mesh: Mesh, people: tuple[User, User, User]) -> None:
    _, bob, carol = people
    room_id = (await mesh.create_room(bob, "news"))["roomId"]
    await mesh.join(carol, room_id)
    await mesh.send(bob, room_id, "hello all")
    await mesh.send(bob, room_id, "hey @carol look")
    await mesh.send(bob, room_id, "direct", to=carol.participant_id)
    status = (await mesh.http.get("/api/status", headers=carol.headers)).json()
    news = next(r for r in status["rooms"] if r["roomId"] == room_id)
    assert (news["unread"], news["mentions"]) == (3, 2)
    assert (status["unread"], status["mentions"]) == (3, 2)

    # poll without a cursor starts at the read position; reading advances it
    r = await mesh.http.post("/api/poll", json={}, headers=carol.headers)
    assert r.status_code == 200
    first = r.json()
    assert [m["content"] for m in first["messages"]] == ["hello all", "hey @carol look", "direct"]
    status = (await mesh.http.get("/api/status", headers=carol.headers)).json()
    assert status["unread"] == 0
    r = await mesh.http.post("/api/poll", json={"cursor": first["cursor"]}, headers=carol.headers)
    assert r.json() == {"messages": [], "cursor": first["cursor"], "commands": []}

    # mentionsOnly
    await mesh.send(bob, room_id, "noise")
    await mesh.send(bob, room_id, "ping @Carol")
    r = await mesh.http.post(
        "/api/poll", json={"cursor": first["cursor"], "mentionsOnly": True}, headers=carol.headers
    )
    assert [m["content"] for m in r.json()["messages"]] == ["ping @Carol"]

    # long-poll: waits for the next message, and counts as online meanwhile
    cursor = r.json()["cursor"]
    result: dict[str, object] = {}

    async def waiter() -> None:
        resp = await mesh.http.post(
            "/api/poll", json={"cursor": cursor, "timeout": 10}, headers=carol.headers
        )
        result.update(resp.json())

    async with connect(base_url, bob) as b, trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        # carol had no session: she comes online when the long-poll starts waiting
        await b.expect("presence", participantId=carol.participant_id, online=True)
        people_now = (await mesh.http.get("/api/participants", headers=bob.headers)).json()
        assert {p["name"]: p["online"] for p in people_now}["carol"] is True
        await mesh.send(bob, room_id, "wake up")
    assert [m["content"] for m in result["messages"]] == ["wake up"]  # type: ignore[union-attr]

    # a long-poll that times out returns nothing and the same cursor
    with trio.fail_after(5):
        r = await mesh.http.post(
            "/api/poll", json={"cursor": result["cursor"], "timeout": 0.2}, headers=carol.headers
        )
    assert r.json() == {"messages": [], "cursor": result["cursor"], "commands": []}

    for body, code in [
        ({"cursor": "abc"}, "invalid_cursor"),
        ({"cursor": True}, "invalid_field"),
        ({"timeout": 31}, "invalid_timeout"),
        ({"timeout": -1}, "invalid_timeout"),
        ({"timeout": "soon"}, "invalid_field"),
        ({"mentionsOnly": "yes"}, "invalid_field"),
        ({"limit": 0}, "invalid_limit"),
    ]:
        assert_error(await mesh.http.post("/api/poll", json=body, headers=carol.headers), 400, code)
    assert_error(await mesh.http.post("/api/poll", json={}), 401)


async def test_a_deleted_participant_is_cut_off(tmp_path: Path, nursery: trio.Nursery) -> None:
    app = create_app(Settings(data_dir=tmp_path))
    url: str = await nursery.start(lambda task_status: serve(app, port=0, task_status=task_status))
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        bob = await mesh.register("bob")
        async with connect(url, bob) as ws:
            admin = await app.node.accounts.authenticate(owner.token)
            await app.node.accounts.delete_participant(admin, bob.participant_id)
            error = await ws.expect("error")
            assert error["code"] == "removed"
            with pytest.raises(ConnectionClosed):
                await ws.recv()
        assert_error(await http.get("/api/auth/me", headers=bob.headers), 401, "invalid_token")


async def test_quick_reconnects_and_poll_loops_do_not_flap(
    base_url: str, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    owner, bob, _ = people
    async with connect(base_url, owner) as o:
        # a bot long-polling in a loop, and a client reconnecting at once
        for _ in range(3):
            r = await mesh.http.post("/api/poll", json={"timeout": 0.05}, headers=bob.headers)
            assert r.status_code == 200
        async with connect(base_url, bob):
            pass
        async with connect(base_url, bob):
            pass
        offline = await o.expect("presence", participantId=bob.participant_id, online=False)
        assert offline["lastSeen"].endswith("Z")
        bob_events = [
            f["online"]
            for f in o.seen
            if f["type"] == "presence" and f["participantId"] == bob.participant_id
        ]
        assert bob_events == [True, False]


async def test_an_expired_session_is_told_at_once_and_sent_nothing_more(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """The token expires while one of the session's sends is still being
    stored (it is awaited for up to SETTLE_TIMEOUT as the session ends):
    the client is told ``token_expired`` at once, and nothing posted after
    the expiry reaches it, neither directly from the broker nor later."""
    app = create_app(Settings(data_dir=tmp_path, token_ttl_seconds=3))
    url: str = await nursery.start(lambda task_status: serve(app, port=0, task_status=task_status))
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        bob = await mesh.register("bob")
        issued = trio.current_time()  # bob's token expires 3 s from about now
        room_id = (await mesh.create_room(owner, "r"))["roomId"]
        await mesh.join(bob, room_id)
        stored = app.node.messages.submit_send
        never = trio.Event()

        def first_send_hangs(*args: Any, **kwargs: Any) -> Any:
            app.node.messages.submit_send = stored  # type: ignore[method-assign]
            return never.wait()

        app.node.messages.submit_send = first_send_hangs  # type: ignore[method-assign]
        async with connect(url, bob) as ws:
            await ws.send(type="send_message", roomId=room_id, content="stuck")
            error = await ws.expect("error", timeout=6)
            told = trio.current_time()
            assert error["code"] == "token_expired"
            # the owner's token was made before bob's: a fresh one posts
            r = await http.post("/api/auth/login", json={"name": "owner", "password": PASSWORD})
            fresh = User(owner.participant_id, "owner", r.json()["token"])
            await mesh.send(fresh, room_id, "after expiry")
            frames = []
            with trio.move_on_after(7), contextlib.suppress(ConnectionClosed):
                while True:
                    frames.append(await ws.recv(10))
            assert [f for f in frames if f.get("type") == "message"] == []
        # told at the expiry, not after the stuck send's settle deadline (5 s more)
        assert told - issued < 3 + 3


async def test_a_session_ends_when_its_token_expires(tmp_path: Path, nursery: trio.Nursery) -> None:
    app = create_app(Settings(data_dir=tmp_path, token_ttl_seconds=3))
    url: str = await nursery.start(lambda task_status: serve(app, port=0, task_status=task_status))
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        await mesh.setup()
        bob = await mesh.register("bob")
        async with connect(url, bob) as ws:
            # the session works while the token is valid, and ends when it expires
            await ws.send(type="typing", roomId="01ARZ3NDEKTSV4RRFFQ69G5FAV")
            assert (await ws.expect("error"))["code"] == "not_member"
            error = await ws.expect("error", timeout=6)
            assert error["code"] == "token_expired"
            with pytest.raises(ConnectionClosed):
                await ws.recv()
        assert_error(await http.get("/api/auth/me", headers=bob.headers), 401, "token_expired")
        # a new token opens a new session
        r = await http.post("/api/auth/login", json={"name": "bob", "password": PASSWORD})
        fresh = User(bob.participant_id, "bob", r.json()["token"])
        async with connect(url, fresh) as ws:
            assert ws.snapshot["type"] == "snapshot"  # type: ignore[attr-defined]
