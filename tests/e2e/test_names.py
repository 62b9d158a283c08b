"""Names people can trust, on a served node: every way a participant or a
room gets a name stores it in NFKC and refuses one that looks like an
existing name (its TR39 skeleton is taken), with 409 ``name_confusable``
(docs/decisions/0056-trusted-names-and-inert-uploads.md).

The lookalikes are written as escapes so that this file shows which
character each one is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
import trio
from nacl.signing import SigningKey

from tests.e2e.test_identity import verify
from tests.helpers import PASSWORD, Mesh, User, assert_error

pytestmark = pytest.mark.e2e

CYRILLIC_O = "\u043e"
GREEK_OMICRON = "\u03bf"
FULLWIDTH_O = "\uff4f"

#: (name asked for, code) for a mesh whose owner is "owner"
LOOKALIKES_OF_OWNER = [
    (CYRILLIC_O + "wner", "name_confusable"),  # the Cyrillic o
    (GREEK_OMICRON + "wner", "name_confusable"),
    ("0wner", "name_confusable"),  # a zero
    ("OWNER", "name_taken"),  # the same name in capitals
    (FULLWIDTH_O + "wner", "name_taken"),  # the fullwidth o: NFKC makes it "owner"
    ("\uff2f\uff37\uff2e\uff25\uff32", "name_taken"),  # all fullwidth capitals
    ("ow" + "\u0578" + "er", "name_confusable"),  # Armenian vo for n
]

Way = Callable[[Mesh, str], Awaitable[httpx.Response]]


async def _register(mesh: Mesh, name: str) -> httpx.Response:
    return await mesh.http.post("/api/auth/register", json={"name": name, "password": PASSWORD})


async def _guest(mesh: Mesh, name: str) -> httpx.Response:
    return await mesh.http.post("/api/auth/guest", json={"name": name})


async def _bootstrap(mesh: Mesh, name: str) -> httpx.Response:
    return await mesh.http.post("/api/agents/bootstrap", json={"name": name, "type": "nanoclaw"})


async def _did(mesh: Mesh, name: str) -> httpx.Response:
    return await verify(mesh.http, SigningKey.generate(), name=name)


#: every way a participant is made from outside, and the status of a success
WAYS: list[tuple[str, Way, int]] = [
    ("register", _register, 201),
    ("guest", _guest, 201),
    ("bootstrap", _bootstrap, 201),
    ("did", _did, 201),
]


def _name_of(r: httpx.Response) -> str:
    body = r.json()
    return str(body.get("name") or body.get("participant", {}).get("name"))


@pytest.mark.parametrize(("way_name", "way", "ok"), WAYS, ids=[w[0] for w in WAYS])
async def test_every_way_in_refuses_a_lookalike_name(
    mesh: Mesh, way_name: str, way: Way, ok: int
) -> None:
    owner = await mesh.setup("owner")
    for name, code in LOOKALIKES_OF_OWNER:
        r = await way(mesh, name)
        assert_error(r, 409, code)
        if code == "name_confusable":
            assert "'owner'" in r.json()["error"], r.text
    # an unlike name is fine, and is stored in NFKC
    r = await way(mesh, FULLWIDTH_O + "wner-" + way_name)
    assert r.status_code == ok, r.text
    participants = (await mesh.http.get("/api/participants", headers=owner.headers)).json()
    names = sorted(p["name"] for p in participants)
    assert "owner-" + way_name in names, names
    # nothing that looks like the owner got in
    assert [n for n in names if n.casefold().startswith(("ow", "0w"))] == [
        "owner",
        "owner-" + way_name,
    ]


async def test_lookalikes_are_refused_across_kinds_and_in_both_directions(mesh: Mesh) -> None:
    """Whichever came first, and whatever kind each is; as written and in
    lower case (ALICE is alice, so a Cyrillic-a alice may not stand beside it)."""
    owner = await mesh.setup("owner")
    # a guest takes a name first: a person may not take one like it, and the
    # other way round; a bot may not look like either
    assert (await _guest(mesh, "visitor")).status_code == 201
    assert_error(await _register(mesh, "vis" + "\u0456" + "tor"), 409, "name_confusable")
    await mesh.register("paypaI")  # a capital I for the l
    assert_error(await _guest(mesh, "paypal"), 409, "name_confusable")
    assert_error(await _bootstrap(mesh, "PAYPAL"), 409, "name_confusable")
    assert_error(await _register(mesh, "paypa1"), 409, "name_confusable")  # a one
    await mesh.register("ALICE")
    assert_error(await _register(mesh, "\u0430lice"), 409, "name_confusable")
    await mesh.register("lris")  # an l: "Iris" would read the same
    assert_error(await _register(mesh, "Iris"), 409, "name_confusable")
    await mesh.register("iris")  # a lower-case i reads differently from an l
    # a bot spawned by the owner is held to it too
    r = await mesh.http.post(
        "/api/agents/spawn",
        json={"name": "v" + "\u0456" + "sitor", "type": "echo"},
        headers=owner.headers,
    )
    assert_error(r, 409, "name_confusable")


async def test_a_name_is_stored_in_nfkc_and_found_by_either_spelling(mesh: Mesh) -> None:
    await mesh.setup("owner")
    r = await _register(mesh, FULLWIDTH_O + "wner2")
    assert r.status_code == 201, r.text
    assert r.json()["name"] == "owner2"
    for spelling in ("owner2", FULLWIDTH_O + "wner2", "OWNER2"):
        r = await mesh.http.post("/api/auth/login", json={"name": spelling, "password": PASSWORD})
        assert r.status_code == 200, (spelling, r.text)
        assert r.json()["name"] == "owner2"
    # a ligature is its letters
    r = await _register(mesh, "\ufb01nch")
    assert r.status_code == 201, r.text
    assert r.json()["name"] == "finch"


async def test_a_name_nfkc_makes_invalid_is_refused(mesh: Mesh) -> None:
    await mesh.setup("owner")
    # a fullwidth commercial at is "@" once normalised: not allowed in a name
    assert_error(await _register(mesh, "bob\uff20peer"), 400, "invalid_name")
    # NFKC may lengthen a name past the limit
    assert_error(await _register(mesh, "\ufdfa" * 4), 400, "invalid_name")


async def test_rooms_refuse_lookalike_names(mesh: Mesh) -> None:
    owner = await mesh.setup("owner")  # the default room is "Town Square"
    alice = await mesh.register("alice")
    cases = [
        ("T" + CYRILLIC_O + "wn Square", "name_confusable"),
        ("Town  Square", "name_confusable"),  # two spaces
        ("T0WN SQUARE", "name_confusable"),
        ("\uff34own Square", "room_name_taken"),  # a fullwidth T: NFKC makes it "Town Square"
        ("town square", "room_name_taken"),
    ]
    for name, code in cases:
        r = await mesh.http.post("/api/rooms", json={"name": name}, headers=alice.headers)
        assert_error(r, 409, code)
        if code == "name_confusable":
            assert "'Town Square'" in r.json()["error"], r.text
    created = await mesh.create_room(alice, "\uff47eneral")  # fullwidth g
    assert created["name"] == "general"
    r = await mesh.http.post(
        "/api/rooms", json={"name": "gener" + "\u0430" + "l"}, headers=owner.headers
    )
    assert_error(r, 409, "name_confusable")
    # bidirectional overrides would make a name read as another
    r = await mesh.http.post("/api/rooms", json={"name": "\u202emoor"}, headers=alice.headers)
    assert_error(r, 400, "invalid_name")
    rooms = (await mesh.http.get("/api/rooms", headers=owner.headers)).json()
    assert sorted(room["name"] for room in rooms) == ["Town Square", "general"]


async def test_racing_lookalikes_let_exactly_one_in(mesh: Mesh) -> None:
    """Ten lookalike registrations at once (on PostgreSQL, in parallel
    transactions): the store's unique skeleton lets exactly one in."""
    await mesh.setup("owner")
    names = [
        "alice",
        "\u0430lice",  # Cyrillic a
        "ALICE",  # its lower case is alice
        "\uff41lice",  # fullwidth a
        "alic" + "\u0435",  # Cyrillic ie
        "al" + "\u0456" + "ce",  # Ukrainian i
        "a1ice",  # a one
        "Alice",
        "ali" + "\u0441" + "e",  # Cyrillic es
        "\u0430l\u0456\u0441\u0435",  # all but the l Cyrillic
    ]
    answers: list[httpx.Response] = []

    async def attempt(name: str) -> None:
        answers.append(await _register(mesh, name))

    async with trio.open_nursery() as nursery:
        for name in names:
            nursery.start_soon(attempt, name)
    assert sorted(r.status_code for r in answers) == [201] + [409] * 9, [r.text for r in answers]
    for r in answers:
        if r.status_code == 409:
            assert r.json()["code"] in ("name_taken", "name_confusable"), r.text


async def test_setup_names_are_normalised(http: httpx.AsyncClient) -> None:
    body: dict[str, Any] = {
        "name": FULLWIDTH_O + "wner",
        "password": PASSWORD,
        "meshName": "M",
        "defaultRoomName": "\uff2cobby",
    }
    r = await http.post("/api/setup/init", json=body)
    assert r.status_code == 201, r.text
    owner = User(r.json()["participantId"], r.json()["name"], r.json()["token"])
    assert owner.name == "owner"
    room_id = (await http.get("/api/setup/status")).json()["defaultRoomId"]
    room = (await http.get(f"/api/rooms/{room_id}", headers=owner.headers)).json()
    assert room["name"] == "Lobby"
