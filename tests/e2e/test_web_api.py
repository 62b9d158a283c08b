"""What the web client needed from the API (docs/decisions/0030-web-client.md),
over real sockets: the page and its assets, the default room, permissions,
idempotent sends (``clientId``), thread pages, marking read, signing out."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import trio

from quart_mesh import Settings, create_app, serve
from quart_mesh.web import CONTENT_SECURITY_POLICY, STATIC_DIR, load_assets
from tests.helpers import Mesh, User, assert_error, connect, wait_for

pytestmark = pytest.mark.e2e


async def default_room(mesh: Mesh) -> str:
    room_id = (await mesh.http.get("/api/setup/status")).json()["defaultRoomId"]
    assert isinstance(room_id, str), room_id
    return room_id


# the page ----------------------------------------------------------------------


async def test_the_page_and_its_assets_are_served_strictly(mesh: Mesh) -> None:
    r = await mesh.http.get("/")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    csp = r.headers["content-security-policy"]
    assert csp == CONTENT_SECURITY_POLICY
    directives = dict(d.split(" ", 1) for d in csp.split("; "))
    assert directives["script-src"] == "'self'"  # no inline script, no eval
    assert directives["connect-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert directives["require-trusted-types-for"] == "'script'"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["referrer-policy"] == "no-referrer"
    page = r.text
    # every script and stylesheet the page names is one of the node's own files
    urls = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert urls, page
    for url in urls:
        assert url.startswith("/web/"), url
        asset = await mesh.http.get(url)
        assert asset.status_code == 200, url
        assert asset.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert asset.headers["x-content-type-options"] == "nosniff"
    assert "<script>" not in page  # only <script type="module" src=…>
    assert re.search(r"<[^>]*\son\w+\s*=", page) is None  # no inline event handlers
    assert "style=" not in page

    js = await mesh.http.get("/web/js/main.js")
    assert js.headers["content-type"] == "text/javascript; charset=utf-8"
    # conditional requests: the browser revalidates cheaply
    etag = js.headers["etag"]
    assert js.headers["cache-control"] == "no-cache"
    again = await mesh.http.get("/web/js/main.js", headers={"If-None-Match": etag})
    assert (again.status_code, again.content) == (304, b"")
    # HEAD works, unknown files are JSON 404s, the page is not served twice
    assert (await mesh.http.head("/")).status_code == 200
    assert_error(await mesh.http.get("/web/js/nope.js"), 404, "not_found")
    assert_error(await mesh.http.get("/web/index.html"), 404, "not_found")
    assert_error(await mesh.http.get("/web/../pyproject.toml"), 404)
    assert_error(await mesh.http.get("/web/"), 404)
    # the API's JSON 404 is unchanged
    assert_error(await mesh.http.get("/api/nothing-here"), 404, "not_found")


def test_the_client_never_builds_html_from_strings() -> None:
    """No string-to-HTML sink or dynamic code anywhere in the client (the CSP's
    Trusted Types would make them throw; this keeps them out of the source)."""
    forbidden = re.compile(
        r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\s*\(|new Function"
        r"|setAttribute\(\s*['\"]on|\.on(?:click|load|error|message|open|close|input|change|submit|key\w+|mouse\w+|focus|blur|scroll|progress|abort)\s*=[^=]|javascript:|createContextualFragment"
    )
    sources = list(STATIC_DIR.rglob("*.js"))
    assert len(sources) >= 5
    for path in sources:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            assert not forbidden.search(line), f"{path.name}:{number}: {line.strip()}"


def test_the_package_ships_every_asset_and_they_are_small() -> None:
    assets = load_assets()
    assert {"index.html", "app.css", "js/main.js"} <= set(assets)
    # every module the page imports, and every view's module and styles
    # (fetched when the view is opened, js/panels.js), is shipped
    for name, asset in assets.items():
        if name.endswith(".js"):
            code = asset.body.decode()
            for imported in re.findall(r'(?:from|module:) "\./([\w.-]+)"', code):
                assert f"js/{imported}" in assets, (name, imported)
            for styles in re.findall(r"css: \[([^\]]*)\]", code):
                for style in re.findall(r'"([\w.-]+)"', styles):
                    assert f"css/{style}" in assets, (name, style)
    views = re.findall(r'module: "\./([\w.-]+)"', assets["js/panels.js"].body.decode())
    assert len(views) == 6, views
    # the whole client, every view included (what the chat's first load
    # fetches has its own budget: tests/web/test_accounts.py); issue 32 moved
    # code off the first load into modules of its own (thread.js, welcome.js,
    # actions.js…) and added the switcher and the threads list: 540 kB
    total = sum(len(a.body) for a in assets.values())
    # (issue 32 added lazily loaded views: settings, pins, the emoji picker,
    # group DMs, read receipts, threads, the room switcher)
    assert total < 600_000, total
    config = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    for folder in ("", "js/", "css/"):
        assert f'"web/static/{folder}*"' in config, folder


# the default room ------------------------------------------------------------------


async def test_setup_makes_a_default_room_everyone_is_offered(mesh: Mesh) -> None:
    r = await mesh.http.post(
        "/api/setup/init",
        json={
            "name": "owner",
            "password": "correct horse battery",
            "meshName": "M",
            "defaultRoomName": "  Lobby  ",
        },
    )
    assert r.status_code == 201, r.text
    owner = User(r.json()["participantId"], "owner", r.json()["token"])
    room_id = await default_room(mesh)
    room = (await mesh.http.get(f"/api/rooms/{room_id}", headers=owner.headers)).json()
    assert (room["name"], room["kind"], room["joined"], room["createdBy"]) == (
        "Lobby",
        "room",
        True,
        owner.participant_id,
    )
    # a newcomer is not put in it, but finds it in the list and may join
    bob = await mesh.register("bob")
    listed = (await mesh.http.get("/api/rooms", headers=bob.headers)).json()
    assert [(r["roomId"], r["joined"]) for r in listed] == [(room_id, False)]
    await mesh.join(bob, room_id)

    # the default room cannot be deleted while it is the default
    r = await mesh.http.delete(f"/api/rooms/{room_id}", headers=owner.headers)
    assert_error(r, 409, "default_room")
    # an admin picks another default (or none), then it can go
    other = await mesh.create_room(owner, "general")
    r = await mesh.http.put(
        "/api/admin/mesh/settings", json={"defaultRoomId": other["roomId"]}, headers=owner.headers
    )
    assert r.status_code == 200, r.text
    assert r.json()["defaultRoomId"] == other["roomId"]
    assert await default_room(mesh) == other["roomId"]
    assert (
        await mesh.http.delete(f"/api/rooms/{room_id}", headers=owner.headers)
    ).status_code == 200
    r = await mesh.http.put(
        "/api/admin/mesh/settings", json={"defaultRoomId": ""}, headers=owner.headers
    )
    assert r.json()["defaultRoomId"] is None
    assert (await mesh.http.get("/api/setup/status")).json()["defaultRoomId"] is None
    # only ordinary rooms of this node can be the default
    dm = (
        await mesh.http.post(
            "/api/dms", json={"participantId": bob.participant_id}, headers=owner.headers
        )
    ).json()
    for bad in (dm["roomId"], "01ARZ3NDEKTSV4RRFFQ69G5FAV", "not-an-id", room_id):
        r = await mesh.http.put(
            "/api/admin/mesh/settings", json={"defaultRoomId": bad}, headers=owner.headers
        )
        assert_error(r, 400, "invalid_default_room")
    r = await mesh.http.put(
        "/api/admin/mesh/settings", json={"defaultRoomId": 5}, headers=owner.headers
    )
    assert_error(r, 400, "invalid_field")
    # members may not change it
    r = await mesh.http.put(
        "/api/admin/mesh/settings", json={"defaultRoomId": other["roomId"]}, headers=bob.headers
    )
    assert_error(r, 403, "forbidden")


async def test_a_bad_default_room_name_is_refused_and_nothing_is_made(mesh: Mesh) -> None:
    for bad in ("x" * 101, "tab\there", 7):
        r = await mesh.http.post(
            "/api/setup/init",
            json={
                "name": "owner",
                "password": "correct horse battery",
                "meshName": "M",
                "defaultRoomName": bad,
            },
        )
        assert_error(r, 400, "invalid_field" if bad == 7 else "invalid_default_room")
    assert (await mesh.http.get("/api/setup/status")).json()["initialized"] is False
    owner = await mesh.setup()
    assert (
        await mesh.http.get(f"/api/rooms/{await default_room(mesh)}", headers=owner.headers)
    ).json()["name"] == "Town Square"


# permissions ----------------------------------------------------------------------


async def test_participants_learn_what_they_may_do(mesh: Mesh) -> None:
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    guest = await mesh.guest()
    me = (await mesh.http.get("/api/auth/me", headers=bob.headers)).json()
    assert "messages.send" in me["permissions"]
    assert "rooms.create" in me["permissions"]
    assert "messages.delete" not in me["permissions"]  # others' messages: moderators
    assert "mesh.settings" not in me["permissions"]
    guest_me = (await mesh.http.get("/api/auth/me", headers=guest.headers)).json()
    assert "rooms.join" in guest_me["permissions"]
    for denied in ("messages.send", "messages.react", "rooms.create", "dms.create", "files.upload"):
        assert denied not in guest_me["permissions"], denied
    owner_me = (await mesh.http.get("/api/auth/me", headers=owner.headers)).json()
    assert "mesh.settings" in owner_me["permissions"]
    assert "roles.manage" in owner_me["permissions"]

    # in a room, its rules count
    room = await mesh.create_room(owner, "news")
    await mesh.join(bob, room["roomId"])
    r = await mesh.http.post(
        f"/api/rooms/{room['roomId']}/permissions/preset",
        json={"preset": "announcements"},
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    details = (await mesh.http.get(f"/api/rooms/{room['roomId']}", headers=bob.headers)).json()
    assert "messages.send" not in details["permissions"]
    assert "messages.react" in details["permissions"]
    details = (await mesh.http.get(f"/api/rooms/{room['roomId']}", headers=owner.headers)).json()
    assert "messages.send" in details["permissions"]


# idempotent sends ---------------------------------------------------------------------


async def test_a_send_retried_with_its_client_id_is_stored_once(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    room_id = await default_room(mesh)
    await mesh.join(bob, room_id)
    async with connect(base_url, bob) as ws:
        first = await mesh.send(owner, room_id, "only once", clientId="web-abc:1")
        assert first["clientId"] == "web-abc:1"
        event = await ws.expect("message", messageId=first["messageId"])
        assert event["clientId"] == "web-abc:1"
        # the answer was lost; the client sends again with the same id
        again = await mesh.send(owner, room_id, "only once", clientId="web-abc:1")
        assert again == first
        later = await mesh.send(owner, room_id, "next")
        assert "clientId" not in later  # only when the sender gave one
        frames = await ws.settle()
        posted = [f["messageId"] for f in frames if f["type"] == "message"]
        assert posted == [later["messageId"]]
    contents = [m["content"] for m in await mesh.messages(owner, room_id)]
    assert contents == ["only once", "next"]
    # the same id is the sender's own: another participant may use it too
    await mesh.send(bob, room_id, "bob's", clientId="web-abc:1")
    # but the sender may not reuse it in another room
    other = await mesh.create_room(owner, "other")
    r = await mesh.http.post(
        f"/api/rooms/{other['roomId']}/messages",
        json={"content": "x", "clientId": "web-abc:1"},
        headers=owner.headers,
    )
    assert_error(r, 409, "client_id_taken")
    for bad in ("", "x" * 65, "spaces here", "é"):
        r = await mesh.http.post(
            f"/api/rooms/{room_id}/messages",
            json={"content": "x", "clientId": bad},
            headers=owner.headers,
        )
        assert_error(r, 400, "invalid_client_id")
    r = await mesh.http.post(
        f"/api/rooms/{room_id}/messages",
        json={"content": "x", "clientId": 5},
        headers=owner.headers,
    )
    assert_error(r, 400, "invalid_field")


async def test_websocket_sends_carry_their_client_id_back(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    room_id = await default_room(mesh)
    async with connect(base_url, owner) as ws:
        await ws.send(type="send_message", roomId=room_id, content="hi", clientId="c-1")
        event = await ws.expect("message", content="hi")
        assert event["clientId"] == "c-1"
        await ws.send(type="send_message", roomId=room_id, content="hi again", clientId="c-1")
        # refused sends say which one failed
        await ws.send(type="send_message", roomId=room_id, content=" ", clientId="c-2")
        error = await ws.expect("error")
        assert (error["code"], error["frame"], error["clientId"]) == (
            "empty_content",
            "send_message",
            "c-2",
        )
        await ws.send(
            type="send_message", roomId="01ARZ3NDEKTSV4RRFFQ69G5FAV", content="x", clientId="c-3"
        )
        error = await ws.expect("error")
        assert (error["code"], error["clientId"]) == ("room_not_found", "c-3")
        await ws.send(type="send_message", roomId=room_id, content="x", clientId="bad id")
        error = await ws.expect("error")
        assert error["code"] == "invalid_client_id"
        assert "clientId" not in error  # not echoed: it is not a client id
        # sends are stored in the order sent: a second "hi again" would come first
        await ws.send(type="send_message", roomId=room_id, content="next", clientId="c-4")
        await ws.expect("message", content="next")
        said = [f["content"] for f in ws.seen if f["type"] == "message"]
        assert said == ["hi", "next"], said
    assert [m["content"] for m in await mesh.messages(owner, room_id)] == ["hi", "next"]


# threads --------------------------------------------------------------------------------


async def test_a_thread_is_paged_by_itself(mesh: Mesh) -> None:
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    room_id = await default_room(mesh)
    await mesh.join(bob, room_id)
    root = await mesh.send(owner, room_id, "root")
    other_root = await mesh.send(owner, room_id, "other root")
    replies = [
        await mesh.send(bob, room_id, f"reply {i}", threadId=root["messageId"]) for i in range(5)
    ]
    await mesh.send(bob, room_id, "elsewhere", threadId=other_root["messageId"])
    await mesh.send(owner, room_id, "top level")
    before = (await mesh.http.get("/api/status", headers=owner.headers)).json()
    page = await mesh.messages(owner, room_id, threadId=root["messageId"])
    assert [m["content"] for m in page] == [f"reply {i}" for i in range(5)]
    page = await mesh.messages(owner, room_id, threadId=root["messageId"], limit=2)
    assert [m["content"] for m in page] == ["reply 3", "reply 4"]
    page = await mesh.messages(
        owner, room_id, threadId=root["messageId"], limit=2, before=page[0]["cursor"]
    )
    assert [m["content"] for m in page] == ["reply 1", "reply 2"]
    page = await mesh.messages(
        owner, room_id, threadId=root["messageId"], since=replies[3]["cursor"]
    )
    assert [m["content"] for m in page] == ["reply 4"]
    # reading a thread does not mark the room's main timeline read
    after = (await mesh.http.get("/api/status", headers=owner.headers)).json()
    assert after["unread"] == before["unread"] == 6
    assert await mesh.messages(owner, room_id, threadId="01ARZ3NDEKTSV4RRFFQ69G5FAV") == []
    r = await mesh.http.get(
        f"/api/rooms/{room_id}/messages", params={"threadId": "nope"}, headers=owner.headers
    )
    assert_error(r, 400, "invalid_query")


# read positions ------------------------------------------------------------------------


async def test_a_client_marks_what_its_person_has_read(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    room_id = await default_room(mesh)
    await mesh.join(bob, room_id)
    quiet = await mesh.create_room(owner, "quiet")
    await mesh.join(bob, quiet["roomId"])
    carol = await mesh.register("carol")
    carols = (await mesh.create_room(owner, "carol's"))["roomId"]
    await mesh.join(carol, carols)

    async def unread(user: User) -> dict[str, tuple[int, int]]:
        status = (await mesh.http.get("/api/status", headers=user.headers)).json()
        return {r["roomId"]: (r["unread"], r["mentions"]) for r in status["rooms"]}

    # sessions with autoRead false: delivered messages stay unread
    async with connect(base_url) as ws, connect(base_url) as other_tab:
        for tab in (ws, other_tab):
            await tab.send(type="authenticate", token=bob.token, autoRead=False)
            await tab.expect("snapshot")
        sent = [await mesh.send(owner, room_id, f"m{i}") for i in range(3)]
        await mesh.send(owner, room_id, "hey @bob")
        for frame in sent:
            await ws.expect("message", messageId=frame["messageId"])
        await ws.expect("message", content="hey @bob")
        # nothing was noted to flush: once a read noted after these deliveries
        # is written (carol's, in her own room), bob's would have been too
        async with connect(base_url, carol) as carol_ws:
            note = await mesh.send(owner, carols, "for carol")
            await carol_ws.expect("message", messageId=note["messageId"])

        async def carol_read() -> bool:
            return (await unread(carol))[carols] == (0, 0)

        await wait_for(carol_read, 10)
        assert (await unread(bob))[room_id] == (4, 1)

        # the person saw the first two
        await ws.send(type="mark_read", roomId=room_id, cursor=sent[1]["cursor"])
        read = await ws.expect("room_read")
        assert read == {
            "type": "room_read",
            "roomId": room_id,
            "cursor": sent[1]["cursor"],
            "unread": 2,
            "mentions": 1,
        }
        # the person's other sessions hear it too (their badges follow)
        assert (await other_tab.expect("room_read", roomId=room_id))["unread"] == 2
        assert (await unread(bob))[room_id] == (2, 1)
        # never backwards; never past the room's newest message
        await ws.send(type="mark_read", roomId=room_id, cursor="1")
        assert (await ws.expect("room_read"))["cursor"] == sent[1]["cursor"]
        r = await mesh.http.post(
            f"/api/rooms/{room_id}/read", json={"cursor": "999999999"}, headers=bob.headers
        )
        assert r.status_code == 200, r.text
        newest = (await mesh.messages(owner, room_id))[-1]["cursor"]
        assert r.json() == {"roomId": room_id, "cursor": newest, "unread": 0, "mentions": 0}
        assert (await ws.expect("room_read"))["cursor"] == newest
        assert (await unread(bob))[room_id] == (0, 0)
        # the owner's sessions hear nothing of bob's reads
        # errors
        await ws.send(type="mark_read", roomId=room_id, cursor="abc")
        assert (await ws.expect("error"))["code"] == "invalid_cursor"
        await ws.send(type="mark_read", roomId=room_id)
        assert (await ws.expect("error"))["code"] == "missing_field"
        r = await mesh.http.post(
            f"/api/rooms/{room_id}/read", json={"cursor": True}, headers=bob.headers
        )
        assert_error(r, 400, "invalid_cursor")
        r = await mesh.http.post(f"/api/rooms/{room_id}/read", json={}, headers=bob.headers)
        assert_error(r, 400, "missing_field")
        other = await mesh.create_room(owner, "owners only")
        r = await mesh.http.post(
            f"/api/rooms/{other['roomId']}/read", json={"cursor": "1"}, headers=bob.headers
        )
        assert_error(r, 403, "not_member")
        r = await mesh.http.post(
            "/api/rooms/01ARZ3NDEKTSV4RRFFQ69G5FAV/read", json={"cursor": "1"}, headers=bob.headers
        )
        assert_error(r, 404, "room_not_found")
        # an empty room: nothing to mark, nothing breaks
        r = await mesh.http.post(
            f"/api/rooms/{quiet['roomId']}/read", json={"cursor": 5}, headers=bob.headers
        )
        assert r.json() == {"roomId": quiet["roomId"], "cursor": "0", "unread": 0, "mentions": 0}

    # without autoRead false (the default) delivery still counts as reading
    async with connect(base_url, bob) as ws:
        late = await mesh.send(owner, room_id, "late")
        await ws.expect("message", messageId=late["messageId"])

    async def bob_read() -> bool:
        return (await unread(bob))[room_id] == (0, 0)

    await wait_for(bob_read, 10)
    async with connect(base_url) as ws:
        await ws.send(type="authenticate", token=bob.token, autoRead="no")
        assert (await ws.recv())["code"] == "invalid_field"


# signing out ------------------------------------------------------------------------------


async def test_signing_out_revokes_that_token_only(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")

    async def serving(run: object) -> None:
        async with trio.open_nursery() as nursery:
            app = create_app(settings)
            url = await nursery.start(
                lambda task_status: serve(app, port=0, task_status=task_status)
            )
            async with httpx.AsyncClient(base_url=url, timeout=10) as http:
                await run(url, Mesh(http))  # type: ignore[operator]
            nursery.cancel_scope.cancel()

    tokens: dict[str, str] = {}

    async def first(url: str, mesh: Mesh) -> None:
        await mesh.setup()
        bob = await mesh.register("bob")
        r = await mesh.http.post(
            "/api/auth/login", json={"name": "bob", "password": "correct horse battery"}
        )
        second = User(bob.participant_id, "bob", r.json()["token"])
        async with connect(url, bob) as ws, connect(url, second) as ws2:
            r = await mesh.http.post("/api/auth/logout", headers=bob.headers)
            assert r.json() == {"ok": True}
            error = await ws.expect("error")
            assert error["code"] == "token_revoked"
            # the session of the other token goes on
            room_id = await default_room(mesh)
            await ws2.send(type="join_room", roomId=room_id)
            await ws2.expect("participant_joined", roomId=room_id)
        assert_error(await mesh.http.get("/api/auth/me", headers=bob.headers), 401, "token_revoked")
        assert_error(
            await mesh.http.post("/api/auth/logout", headers=bob.headers), 401, "token_revoked"
        )
        assert (await mesh.http.get("/api/auth/me", headers=second.headers)).status_code == 200
        async with connect(url) as ws:
            await ws.send(type="authenticate", token=bob.token)
            assert (await ws.recv())["code"] == "token_revoked"
        assert_error(await mesh.http.post("/api/auth/logout"), 401, "unauthorized")
        tokens["old"], tokens["second"] = bob.token, second.token

    async def after_restart(url: str, mesh: Mesh) -> None:
        old = {"Authorization": f"Bearer {tokens['old']}"}
        second = {"Authorization": f"Bearer {tokens['second']}"}
        assert_error(await mesh.http.get("/api/auth/me", headers=old), 401, "token_revoked")
        assert (await mesh.http.get("/api/auth/me", headers=second)).status_code == 200

    with trio.fail_after(60):
        await serving(first)
        await serving(after_restart)
