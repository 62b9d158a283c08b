"""Search (``GET /api/search``) and opening a message in context
(``?around=``) over a served node (decision 0059)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers import Mesh, User, assert_error, connect


@pytest.fixture
async def people(mesh: Mesh) -> tuple[User, User, User]:
    owner = await mesh.setup()
    return owner, await mesh.register("bob"), await mesh.register("carol")


async def _search(http: httpx.AsyncClient, user: User, **params: Any) -> dict[str, Any]:
    r = await http.get("/api/search", params=params, headers=user.headers)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def _texts(http: httpx.AsyncClient, user: User, **params: Any) -> list[str]:
    return [r["message"]["content"] for r in (await _search(http, user, **params))["results"]]


async def test_the_query_language(
    http: httpx.AsyncClient, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    _, bob, _ = people
    room = (await mesh.create_room(bob, "Planning"))["roomId"]
    texts = [
        "The note about the database migration from last week",
        "Migrating the DATABASE tomorrow",
        "Lunch at the Café on Monday?",
        "東京タワーに行きました",
        "a draft of the database plan",
        "snake_case_name and x² and Straße",
    ]
    for text in texts:
        await mesh.send(bob, room, text)

    async def found(q: str) -> set[str]:
        return set(await _texts(http, bob, q=q))

    assert await found("database migration") == {texts[0]}  # all words must match
    assert await found("migration database") == {texts[0]}
    assert await found('"database migration"') == {texts[0]}
    assert await found('"migration database"') == set()  # a phrase keeps its order
    assert await found("migrat*") == {texts[0], texts[1]}  # a prefix
    assert await found("database -draft") == {texts[0], texts[1]}
    assert await found('database -"last week"') == {texts[1], texts[4]}
    assert await found("cafe") == {texts[2]}  # accents and case fold
    assert await found("CAFÉ monday") == {texts[2]}
    assert await found("東京") == {texts[3]}  # a phrase of its characters
    assert await found("タワー") == {texts[3]}
    assert await found("京都") == set()
    assert await found("case") == {texts[5]}
    assert await found("x2 strasse") == {texts[5]}
    assert await found("or") == set()  # a word, not an operator
    await mesh.send(bob, room, "war or peace, x or y")
    await mesh.send(bob, room, "only peace here")
    assert await found('"war or peace"') == {"war or peace, x or y"}
    assert await found('peace -"x or y"') == {"only peace here"}
    assert await found("-\u037a peace") == {"war or peace, x or y", "only peace here"}
    await mesh.send(bob, room, "की बात")
    await mesh.send(bob, room, "हिन्दी भाषा")
    assert await found("का") == set()  # vowel signs are part of words
    assert await found("हिन्दी") == {"हिन्दी भाषा"}
    assert await found("nothing-like-this") == set()

    # a result: the message as history gives it, the room's name, a snippet
    [result] = (await _search(http, bob, q="cafe"))["results"]
    [same] = [m for m in await mesh.messages(bob, room) if m["content"] == texts[2]]
    assert result["message"] == same
    assert result["roomName"] == "Planning"
    snippet = result["snippet"]
    assert snippet["text"] == texts[2]
    assert [snippet["text"][h["start"] : h["end"]] for h in snippet["highlights"]] == ["Café"]

    # a long message: an excerpt around the match, offsets into it
    long = "filler " * 80 + "the needle is here " + "more " * 80
    await mesh.send(bob, room, long)
    [result] = (await _search(http, bob, q="needle"))["results"]
    text = result["snippet"]["text"]
    assert len(text) <= 202
    assert text.startswith("…")
    assert text.endswith("…")
    [h] = result["snippet"]["highlights"]
    assert text[h["start"] : h["end"]] == "needle"


async def test_only_what_the_caller_may_read_is_searched(
    http: httpx.AsyncClient, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    owner, bob, carol = people
    room = (await mesh.create_room(bob, "team"))["roomId"]
    await mesh.join(carol, room)
    await mesh.send(bob, room, "the launch code is tangerine")
    r = await http.post(
        "/api/dms", json={"participantId": carol.participant_id}, headers=bob.headers
    )
    assert r.status_code in (200, 201), r.text
    dm = r.json()["roomId"]
    await mesh.send(bob, dm, "tangerine between us")
    dave = await mesh.register("dave")
    guest = await mesh.guest()

    assert sorted(await _texts(http, carol, q="tangerine")) == [
        "tangerine between us",
        "the launch code is tangerine",
    ]
    labels = {r["roomName"] for r in (await _search(http, carol, q="tangerine"))["results"]}
    assert labels == {"team", "bob"}  # a DM by its other party's name
    # outsiders, guests and the owner (not a member) find nothing there
    for user in (dave, guest, owner):
        assert await _texts(http, user, q="tangerine") == []
    # the room filter does not open a room one is not in
    assert await _texts(http, dave, q="tangerine", room=room) == []

    # a rule keeps carol from reading the room: its messages are not found
    r = await http.post(
        f"/api/rooms/{room}/permissions",
        json={
            "targetType": "participant",
            "target": carol.participant_id,
            "permission": "rooms.read",
            "effect": "deny",
        },
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    assert await _texts(http, carol, q="tangerine") == ["tangerine between us"]

    # leaving the room ends it too
    r = await http.post(f"/api/rooms/{room}/leave", headers=bob.headers)
    assert r.status_code == 200
    assert await _texts(http, bob, q="launch") == []

    # no token, a bad one, a deleted bot's
    assert_error(await http.get("/api/search", params={"q": "x"}), 401)
    r = await http.get("/api/search", params={"q": "x"}, headers={"Authorization": "Bearer nope"})
    assert_error(r, 401)
    r = await http.post("/api/agents/bootstrap", json={"name": "scout", "type": "simple"})
    assert r.status_code == 201, r.text
    scout = User(r.json()["agentId"], "scout", r.json()["token"])
    r = await http.post(
        "/api/dms", json={"participantId": bob.participant_id}, headers=scout.headers
    )
    assert r.status_code in (200, 201), r.text
    await mesh.send(scout, r.json()["roomId"], "tangerine from a bot")
    assert await _texts(http, scout, q="tangerine") == ["tangerine from a bot"]
    r = await http.delete(f"/api/agents/{scout.participant_id}", headers=owner.headers)
    assert r.status_code == 200, r.text
    r = await http.get("/api/search", params={"q": "tangerine"}, headers=scout.headers)
    assert_error(r, 401)


async def test_edits_and_deletes_show_at_once(
    http: httpx.AsyncClient, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    owner, bob, _ = people
    room = (await mesh.create_room(bob, "edits"))["roomId"]
    message = await mesh.send(bob, room, "an apricot on the table")
    assert await _texts(http, bob, q="apricot") == ["an apricot on the table"]
    r = await http.patch(
        f"/api/rooms/{room}/messages/{message['messageId']}",
        json={"content": "a plum on the table"},
        headers=bob.headers,
    )
    assert r.status_code == 200, r.text
    assert await _texts(http, bob, q="apricot") == []
    assert await _texts(http, bob, q="plum") == ["a plum on the table"]
    r = await http.delete(f"/api/rooms/{room}/messages/{message['messageId']}", headers=bob.headers)
    assert r.status_code == 200, r.text
    assert await _texts(http, bob, q="plum") == []
    assert await _texts(http, bob, q="table") == []

    # a deleted room's messages are gone from the index with it
    other = (await mesh.create_room(bob, "doomed"))["roomId"]
    await mesh.send(bob, other, "quince jam")
    assert await _texts(http, bob, q="quince") == ["quince jam"]
    assert (await http.delete(f"/api/rooms/{other}", headers=bob.headers)).status_code == 200
    assert await _texts(http, bob, q="quince") == []
    assert await _texts(http, owner, q="quince") == []


async def test_filters(
    http: httpx.AsyncClient, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    _, bob, carol = people
    red = (await mesh.create_room(bob, "Red Room"))["roomId"]
    blue = (await mesh.create_room(bob, "blue"))["roomId"]
    await mesh.join(carol, red)
    await mesh.join(carol, blue)
    first = await mesh.send(bob, red, "status report one")
    await mesh.send(carol, red, "status report two @bob")
    reply = await mesh.send(carol, red, "status reply in thread", threadId=first["messageId"])
    await mesh.send(bob, blue, "status report blue", to=carol.participant_id)
    upload = await http.post(
        "/api/upload",
        files={"file": ("notes.txt", b"hello", "text/plain")},
        headers=bob.headers,
    )
    assert upload.status_code == 201, upload.text
    await mesh.send(bob, blue, "status with a file", attachments=[upload.json()["uploadId"]])

    async def found(**params: Any) -> set[str]:
        return set(await _texts(http, bob, **params))

    assert len(await found(q="status")) == 5
    assert await found(q="status", room=red) == {
        "status report one",
        "status report two @bob",
        "status reply in thread",
    }
    assert await found(q="status room:blue") == {"status report blue", "status with a file"}
    assert await found(q='status room:"red room"') == await found(q="status", room=red)
    assert await found(q="status room:nowhere") == set()  # as a room one may not read
    assert await found(q="status", **{"from": "@carol"}) == {
        "status report two @bob",
        "status reply in thread",
    }
    assert await found(q=f"status from:{carol.participant_id}") == await found(
        q="status from:carol"
    )
    assert await found(q="status in:thread") == {"status report one", "status reply in thread"}
    assert await found(q="status", **{"in": "thread"}) == await found(q="status in:thread")
    assert await found(q="status has:file") == {"status with a file"}
    assert await found(q="mentions:me") == {"status report two @bob"}  # filters alone
    assert set(await _texts(http, carol, q="mentions:me")) == {"status report blue"}
    # before / after: cursors, dates, times
    assert await found(q=f"status before:{reply['cursor']}") == {
        "status report one",
        "status report two @bob",
    }
    assert await found(q=f"status after:{reply['cursor']}") == {
        "status report blue",
        "status with a file",
    }
    assert await found(q="status before:2000-01-01") == set()
    assert len(await found(q="status after:2000-01-01")) == 5
    assert len(await found(q="status before:2999-01-01T00:00:00Z")) == 5
    assert await found(q="status after:2999-01-01") == set()

    bad: list[tuple[dict[str, Any], str | None]] = [
        ({"q": ""}, "invalid_query"),
        ({}, "invalid_query"),
        ({"q": "-status"}, "invalid_query"),
        ({"q": "x" * 501}, "invalid_query"),
        ({"q": " ".join(f"w{i}" for i in range(17))}, "invalid_query"),
        ({"q": "status room:a\x00b"}, "invalid_query"),
        ({"q": "status", "from": "@a\x00b"}, "invalid_query"),
        ({"q": "status", "from": "@nobody"}, "invalid_query"),
        ({"q": "status before:yesterday"}, "invalid_query"),
        ({"q": "status", "in": "space"}, "invalid_query"),
        ({"q": "status", "has": "cat"}, "invalid_query"),
        ({"q": "status", "mentions": "you"}, "invalid_query"),
        ({"q": "status", "sort": "oldest"}, "invalid_query"),
        ({"q": "status", "limit": 0}, "invalid_limit"),
        ({"q": "status", "limit": 10_000}, "invalid_limit"),
        ({"q": "status", "limit": "many"}, None),
        ({"q": "status", "cursor": "not-a-cursor"}, "invalid_cursor"),
    ]
    for params, code in bad:
        r = await http.get("/api/search", params=params, headers=bob.headers)
        assert_error(r, 400, code)
    # negative words narrow filters
    assert await found(q="-report room:blue") == {"status with a file"}


async def test_pages_and_relevance(
    http: httpx.AsyncClient, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    _, bob, _ = people
    room = (await mesh.create_room(bob, "pages"))["roomId"]
    for i in range(7):
        await mesh.send(bob, room, f"kiwi number {i}")
    await mesh.send(bob, room, "kiwi kiwi kiwi kiwi")
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"q": "kiwi", "limit": 3}
        if cursor:
            params["cursor"] = cursor
        page = await _search(http, bob, **params)
        seen += [r["message"]["content"] for r in page["results"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == ["kiwi kiwi kiwi kiwi"] + [f"kiwi number {i}" for i in reversed(range(7))]

    by_rank = await _search(http, bob, q="kiwi", sort="relevance", limit=4)
    assert by_rank["results"][0]["message"]["content"] == "kiwi kiwi kiwi kiwi"
    rest = await _search(http, bob, q="kiwi", sort="relevance", cursor=by_rank["nextCursor"])
    ranked = [r["message"]["content"] for r in by_rank["results"] + rest["results"]]
    assert sorted(ranked) == sorted(seen)
    assert rest["nextCursor"] is None
    # a newest-first cursor is not a relevance one
    r = await http.get(
        "/api/search", params={"q": "kiwi", "cursor": by_rank["nextCursor"]}, headers=bob.headers
    )
    assert_error(r, 400, "invalid_cursor")


async def test_a_message_opens_in_context(
    http: httpx.AsyncClient, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    _, bob, carol = people
    room = (await mesh.create_room(bob, "context"))["roomId"]
    sent = [await mesh.send(bob, room, f"line {i}") for i in range(30)]
    target = sent[15]

    page = await mesh.messages(bob, room, around=target["messageId"], limit=9)
    assert [m["content"] for m in page] == [f"line {i}" for i in range(11, 20)]
    page = await mesh.messages(bob, room, around=target["cursor"], limit=10)
    assert [m["content"] for m in page] == [f"line {i}" for i in range(11, 21)]
    # near an end: the rest from the other side
    page = await mesh.messages(bob, room, around=sent[1]["messageId"], limit=6)
    assert [m["content"] for m in page] == [f"line {i}" for i in range(6)]
    page = await mesh.messages(bob, room, around=sent[29]["messageId"], limit=5)
    assert [m["content"] for m in page] == [f"line {i}" for i in range(25, 30)]
    # then older and newer pages as always
    older = await mesh.messages(bob, room, before=page[0]["cursor"], limit=2)
    assert [m["content"] for m in older] == ["line 23", "line 24"]

    base = f"/api/rooms/{room}/messages"
    for params, status, code in [
        ({"around": target["messageId"], "before": target["cursor"]}, 400, "invalid_query"),
        ({"around": "nothing"}, 400, "invalid_cursor"),
        ({"around": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}, 400, "invalid_cursor"),
    ]:
        assert_error(await http.get(base, params=params, headers=bob.headers), status, code)
    # not a member: as history
    assert_error(
        await http.get(base, params={"around": target["messageId"]}, headers=carol.headers),
        403,
        "not_member",
    )


async def test_bots_search_over_the_websocket(
    base_url: str, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    _, bob, carol = people
    room = (await mesh.create_room(bob, "ws"))["roomId"]
    await mesh.send(bob, room, "the blueprint is ready")
    async with connect(base_url, bob) as ws, connect(base_url, carol) as other:
        await ws.send(type="search", q="blueprint", clientId="s-1")
        answer = await ws.expect("search_results")
        assert answer["clientId"] == "s-1"
        assert [r["message"]["content"] for r in answer["results"]] == ["the blueprint is ready"]
        assert answer["results"][0]["roomName"] == "ws"
        assert answer["nextCursor"] is None
        # the same rules as REST: carol is not in the room
        await other.send(type="search", q="blueprint")
        assert (await other.expect("search_results"))["results"] == []
        # a bad search is an error frame; the session goes on
        await ws.send(type="search", q="", clientId="s-2")
        error = await ws.expect("error")
        assert (error["code"], error["frame"], error["clientId"]) == (
            "invalid_query",
            "search",
            "s-2",
        )
        await ws.send(type="search", q="blueprint", limit=2.5)
        assert (await ws.expect("error"))["code"] == "invalid_limit"
        await ws.send(type="search", q="ready", room=room, sort="relevance")
        assert len((await ws.expect("search_results"))["results"]) == 1


async def test_a_jump_does_not_read_what_came_after(
    http: httpx.AsyncClient, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    _, bob, carol = people
    room = (await mesh.create_room(bob, "later"))["roomId"]
    await mesh.join(carol, room)
    sent = [await mesh.send(bob, room, f"news {i}") for i in range(10)]

    async def unread() -> int:
        r = await http.get("/api/status", headers=carol.headers)
        assert r.status_code == 200, r.text
        [entry] = [e for e in r.json()["rooms"] if e["roomId"] == room]
        return int(entry["unread"])

    assert await unread() == 10
    await mesh.messages(carol, room, around=sent[2]["messageId"], limit=3)
    assert await unread() == 10  # opening an old message reads nothing
    await mesh.messages(carol, room, since=sent[3]["cursor"], limit=2)
    assert await unread() == 4  # the pages after it do, as any page
