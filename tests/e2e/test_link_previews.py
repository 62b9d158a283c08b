"""Link previews (decision 0072): the node fetches a message's first link
through the outbound guard, within a size and a time bound, and proxies its
image inert, only at an address it signed.

The pages and images are served by a small real HTTP server on loopback
(:class:`Site`); the node reaches it because these tests list 127.0.0.1 in
``link_preview_allow_networks``, the operator's allow-list (and only it:
127.0.0.2, the other loopback address, stays refused). Nothing sleeps: a
page that stalls is cut by ``link_preview_timeout``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h11
import pytest
import trio

from quart_mesh import Settings
from quart_mesh.config import Rate, RateLimits
from tests.helpers import PASSWORD, Mesh, User, assert_error
from tests.receiver import read_request

pytestmark = pytest.mark.e2e

#: a 1x1 PNG
PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00"
    b"\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\xcf\xc0\xf0\x1f\x00\x05\x00\x01\xff"
    b"\x89\x99=\x1d\x00\x00\x00\x00IEND\xaeB`\x82"
)

PAGE = b"""<!doctype html><html><head>
<meta charset="utf-8">
<title>Ignored when og:title is there</title>
<meta property="og:title" content="The &amp; plan \xe2\x80\xae for 2027">
<meta property="og:description" content="What we will   build,
and why.">
<meta property="og:site_name" content="Plans">
<meta property="og:image" content="/img.png">
<script>alert(1)</script>
</head><body><p>The body is never read for the card.</p></body></html>"""

#: (status, headers, body); ``None``: never answer
Answer = tuple[int, list[tuple[str, str]], bytes] | None


@dataclass
class Site:
    """Serves *routes* (path -> answer) on 127.0.0.1 (or *host*); counts requests."""

    routes: dict[str, Callable[[], Answer]] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 0
    hits: list[str] = field(default_factory=list)
    #: path -> an event its answer waits for
    gates: dict[str, trio.Event] = field(default_factory=dict)

    async def start(self, nursery: trio.Nursery) -> Site:
        async def serve(task_status: trio.TaskStatus[int]) -> None:
            listeners = await trio.open_tcp_listeners(0, host=self.host)
            task_status.started(listeners[0].socket.getsockname()[1])
            await trio.serve_listeners(self._connection, listeners)

        self.port = await nursery.start(serve)
        return self

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    def page(self, path: str, body: bytes, kind: str = "text/html; charset=utf-8") -> None:
        self.routes[path] = lambda: (200, [("Content-Type", kind)], body)

    async def _connection(self, stream: trio.SocketStream) -> None:
        async with stream:
            conn = h11.Connection(h11.SERVER)
            request = await read_request(stream, conn)
            if request is None:
                return
            self.hits.append(request.path)
            if request.path in self.gates:
                await self.gates[request.path].wait()
            route = self.routes.get(request.path)
            answer = route() if route else (404, [], b"")
            if answer is None:
                await trio.sleep_forever()  # a page that stalls
                return
            status, headers, body = answer
            headers = [*headers, ("Content-Length", str(len(body))), ("Connection", "close")]
            await stream.send_all(conn.send(h11.Response(status_code=status, headers=headers)))
            try:
                await stream.send_all(conn.send(h11.Data(data=body)))
                await stream.send_all(conn.send(h11.EndOfMessage()))
            except trio.BrokenResourceError:
                pass  # the node stopped reading (too big)


@pytest.fixture
def settings(tmp_path: Path, request: pytest.FixtureRequest) -> Settings:
    changes = getattr(request, "param", {})
    base = Settings(
        data_dir=tmp_path / "mesh-data",
        link_preview_allow_networks=("127.0.0.1/32",),
        link_preview_timeout=1.0,
        link_preview_image_max_bytes=16 * 1024,
        link_preview_max_bytes=64 * 1024,
    )
    return dataclasses.replace(base, **changes)


async def _room(mesh: Mesh, **setup: Any) -> tuple[User, User, str]:
    await mesh.setup(**setup)
    alice = await mesh.register("alice")
    bob = await mesh.register("bob")
    room_id = (await mesh.create_room(alice, "links"))["roomId"]
    await mesh.join(bob, room_id)
    return alice, bob, room_id


async def _preview(mesh: Mesh, user: User, room_id: str, text: str) -> Any:
    sent = await mesh.send(user, room_id, text)
    r = await mesh.http.get(
        f"/api/rooms/{room_id}/messages/{sent['messageId']}/preview", headers=user.headers
    )
    assert r.status_code == 200, r.text
    assert (r.json()["roomId"], r.json()["messageId"]) == (room_id, sent["messageId"])
    return r.json()["preview"]


async def test_a_link_gets_a_card_and_its_image_is_proxied_inert(
    mesh: Mesh, nursery: trio.Nursery
) -> None:
    site = await Site().start(nursery)
    site.page("/plan", PAGE)
    site.routes["/img.png"] = lambda: (200, [("Content-Type", "image/png")], PNG)
    alice, bob, room_id = await _room(mesh)

    sent = await mesh.send(alice, room_id, f"`http://code.example/` see {site.url('/plan')}.")
    path = f"/api/rooms/{room_id}/messages/{sent['messageId']}/preview"
    r = await mesh.http.get(path, headers=bob.headers)
    assert r.status_code == 200, r.text
    preview = r.json()["preview"]
    image = preview.pop("image")
    assert preview == {
        "url": site.url("/plan"),  # the first link outside code, without the full stop
        "title": "The & plan for 2027",  # entities decoded, the override dropped
        "description": "What we will build, and why.",
        "siteName": "Plans",
    }
    assert image.startswith("/api/link-preview/image?url=")
    # asked again (by anyone who may read it): from memory, not fetched again
    r = await mesh.http.get(path, headers=alice.headers)
    assert r.json()["preview"]["title"] == "The & plan for 2027"
    assert site.hits == ["/plan"]

    # the image: no token needed (an <img>), served inert, then from memory
    for _ in range(2):
        r = await mesh.http.get(image)
        assert r.status_code == 200, r.text
        assert r.content == PNG
        assert r.headers["content-type"] == "image/png"
        assert "sandbox" in r.headers["content-security-policy"]
        assert r.headers["x-content-type-options"] == "nosniff"
    assert site.hits == ["/plan", "/img.png"]

    # only at an address the node signed: not an open proxy
    forged = image.replace("img.png", "other.png")
    assert_error(await mesh.http.get(forged), 404, "image_not_found")
    url = site.url("/plan")
    for sig in ("0" * 32, "\u00e9t\u00e9", "x" * 5000):
        r = await mesh.http.get("/api/link-preview/image", params={"url": url, "sig": sig})
        assert_error(r, 404, "image_not_found")
    assert_error(await mesh.http.get("/api/link-preview/image"), 400, "invalid_query")
    assert site.hits == ["/plan", "/img.png"]

    # a message without a link has no preview, and nothing is fetched
    assert await _preview(mesh, alice, room_id, "no link here") is None


async def test_only_those_who_may_read_the_message_get_its_preview(
    mesh: Mesh, nursery: trio.Nursery
) -> None:
    site = await Site().start(nursery)
    site.page("/p", PAGE)
    alice, bob, room_id = await _room(mesh, visibility="public")
    carol = await mesh.register("carol")  # not a member
    sent = await mesh.send(alice, room_id, site.url("/p"))
    path = f"/api/rooms/{room_id}/messages/{sent['messageId']}/preview"

    assert_error(await mesh.http.get(path, headers=carol.headers), 403, "not_member")
    assert_error(await mesh.http.get(path), 401)
    # a message of another room, or none
    other = (await mesh.create_room(carol, "elsewhere"))["roomId"]
    r = await mesh.http.get(
        f"/api/rooms/{other}/messages/{sent['messageId']}/preview", headers=carol.headers
    )
    assert_error(r, 404, "message_not_found")
    r = await mesh.http.get(f"/api/rooms/{room_id}/messages/nope/preview", headers=bob.headers)
    assert_error(r, 404, "message_not_found")
    # a signed-out token is refused
    r = await mesh.http.post("/api/auth/logout", headers=bob.headers)
    assert r.status_code == 200, r.text
    assert_error(await mesh.http.get(path, headers=bob.headers), 401)
    # a bot may read it too; deleted, its token is refused at once
    r = await mesh.http.post("/api/auth/login", json={"name": "owner", "password": PASSWORD})
    owner = {"Authorization": f"Bearer {r.json()['token']}"}
    r = await mesh.http.post(
        "/api/agents/bootstrap", json={"name": "dave", "type": "simple"}, headers=owner
    )
    assert r.status_code == 201, r.text
    dave = User(r.json()["agentId"], "dave", r.json()["token"])
    await mesh.join(dave, room_id)
    assert (await mesh.http.get(path, headers=dave.headers)).status_code == 200
    hits = list(site.hits)
    r = await mesh.http.delete(f"/api/agents/{dave.participant_id}", headers=owner)
    assert r.is_success, r.text
    assert_error(await mesh.http.get(path, headers=dave.headers), 401)
    assert site.hits == hits  # nobody who was refused made the node fetch anything
    # a guest of the public mesh: as the one visibility decision says for the
    # message itself
    guest = await mesh.guest()
    r = await mesh.http.get(path, headers=guest.headers)
    one = await mesh.http.get(
        f"/api/rooms/{room_id}/messages/{sent['messageId']}", headers=guest.headers
    )
    assert (r.status_code, r.json().get("code")) == (one.status_code, one.json().get("code"))


@pytest.mark.parametrize("settings", [{"link_preview_allow_networks": ()}], indirect=True)
async def test_loopback_is_refused_without_the_allow_list(
    mesh: Mesh, nursery: trio.Nursery
) -> None:
    site = await Site().start(nursery)
    site.page("/p", PAGE)
    alice, _, room_id = await _room(mesh)
    assert await _preview(mesh, alice, room_id, site.url("/p")) is None
    assert await _preview(mesh, alice, room_id, "http://localhost/p") is None
    assert site.hits == []


async def test_a_redirect_is_checked_again(mesh: Mesh, nursery: trio.Nursery) -> None:
    site = await Site().start(nursery)
    private = await Site(host="127.0.0.2").start(nursery)  # not in the allow-list
    private.page("/secret", PAGE)
    site.page("/p", PAGE)
    site.routes["/moved"] = lambda: (302, [("Location", "/p")], b"")
    site.routes["/inside"] = lambda: (302, [("Location", private.url("/secret"))], b"")
    site.routes["/ftp"] = lambda: (302, [("Location", "ftp://127.0.0.1/x")], b"")
    site.routes["/loop"] = lambda: (302, [("Location", "/loop")], b"")
    alice, _, room_id = await _room(mesh)

    moved = await _preview(mesh, alice, room_id, site.url("/moved"))
    assert moved["title"] == "The & plan for 2027"
    assert moved["url"] == site.url("/moved")  # the link as written
    for path in ("/inside", "/ftp", "/loop"):
        assert await _preview(mesh, alice, room_id, site.url(path)) is None
    assert private.hits == []
    assert site.hits.count("/loop") == 6  # the first and five redirects, then it gives up


async def test_too_big_too_slow_and_wrong_types_show_nothing(
    mesh: Mesh, nursery: trio.Nursery
) -> None:
    site = await Site().start(nursery)
    # a page whose head comes first: read up to the bound, the card is made
    site.page("/long", PAGE.replace(b"</html>", b"x" * 500_000 + b"</html>"))
    site.routes["/stall"] = lambda: None
    site.page("/json", b'{"title": "no"}', "application/json")
    big = PAGE.replace(b"/img.png", b"/big.png")
    site.page("/big", big)
    site.routes["/big.png"] = lambda: (200, [("Content-Type", "image/png")], PNG + b"\0" * 20_000)
    site.page("/svg", PAGE.replace(b"/img.png", b"/img.svg"))
    site.routes["/img.svg"] = lambda: (200, [("Content-Type", "image/svg+xml")], b"<svg/>")
    site.page("/liar", PAGE.replace(b"/img.png", b"/liar.png"))
    site.routes["/liar.png"] = lambda: (200, [("Content-Type", "image/png")], b"<html>")
    alice, _, room_id = await _room(mesh)

    long = await _preview(mesh, alice, room_id, site.url("/long"))
    assert long["title"] == "The & plan for 2027"
    with trio.fail_after(5):  # the bound is 1 s: the page never answers
        assert await _preview(mesh, alice, room_id, site.url("/stall")) is None
    assert await _preview(mesh, alice, room_id, site.url("/json")) is None
    for path in ("/big", "/svg", "/liar"):
        preview = await _preview(mesh, alice, room_id, site.url(path))
        assert preview["image"] is not None  # the page says so; the image is refused
        assert_error(await mesh.http.get(preview["image"]), 404, "image_not_found")
    # a failure is remembered too: the stalled page is not asked again at once
    assert await _preview(mesh, alice, room_id, site.url("/stall")) is None
    assert site.hits.count("/stall") == 1


async def test_the_owner_turns_link_previews_off(mesh: Mesh, nursery: trio.Nursery) -> None:
    site = await Site().start(nursery)
    site.page("/p", PAGE)
    site.routes["/img.png"] = lambda: (200, [("Content-Type", "image/png")], PNG)
    owner = await mesh.setup()
    alice = await mesh.register("alice")
    room_id = (await mesh.create_room(alice, "links"))["roomId"]
    image = (await _preview(mesh, alice, room_id, site.url("/p")))["image"]

    r = await mesh.http.get("/api/admin/mesh/settings", headers=owner.headers)
    assert (r.json()["linkPreviews"], r.json()["linkPreviewsSource"]) == (True, "settings")
    r = await mesh.http.put(
        "/api/admin/mesh/settings", json={"linkPreviews": False}, headers=owner.headers
    )
    assert (r.json()["linkPreviews"], r.json()["linkPreviewsSource"]) == (False, "admin")
    r = await mesh.http.put(
        "/api/admin/mesh/settings", json={"linkPreviews": "no"}, headers=owner.headers
    )
    assert_error(r, 400)
    r = await mesh.http.put(
        "/api/admin/mesh/settings", json={"linkPreviews": True}, headers=alice.headers
    )
    assert_error(r, 403)

    sent = await mesh.send(alice, room_id, site.url("/p") + "?again")
    r = await mesh.http.get(
        f"/api/rooms/{room_id}/messages/{sent['messageId']}/preview", headers=alice.headers
    )
    assert_error(r, 404, "link_previews_off")
    assert_error(await mesh.http.get(image), 404, "link_previews_off")
    assert "/p?again" not in site.hits

    # a rate-limits change keeps the switch (both are stored together)
    r = await mesh.http.put(
        "/api/admin/mesh/settings",
        json={"rateLimits": {"search": "10/10s"}},
        headers=owner.headers,
    )
    assert r.json()["linkPreviews"] is False
    r = await mesh.http.put(
        "/api/admin/mesh/settings", json={"linkPreviews": True}, headers=owner.headers
    )
    assert r.json()["linkPreviews"] is True
    assert (await mesh.http.get(image)).status_code == 200


@pytest.mark.parametrize(
    "settings", [{"rate_limits": RateLimits(link_previews=Rate(2, 60))}], indirect=True
)
async def test_fetches_are_rate_limited_but_cached_previews_are_not(
    mesh: Mesh, nursery: trio.Nursery
) -> None:
    site = await Site().start(nursery)
    for n in range(3):
        site.page(f"/{n}", PAGE)
    alice, bob, room_id = await _room(mesh)
    messages = [await mesh.send(alice, room_id, site.url(f"/{n}")) for n in range(3)]

    def path(n: int) -> str:
        return f"/api/rooms/{room_id}/messages/{messages[n]['messageId']}/preview"

    for n in (0, 1):
        assert (await mesh.http.get(path(n), headers=alice.headers)).status_code == 200
    assert_error(await mesh.http.get(path(2), headers=alice.headers), 429, "rate_limited")
    for _ in range(3):  # what the node has is never counted
        assert (await mesh.http.get(path(0), headers=alice.headers)).status_code == 200
    # the rule is per participant
    assert (await mesh.http.get(path(2), headers=bob.headers)).status_code == 200
    assert site.hits == ["/0", "/1", "/2"]


async def test_readers_asking_at_once_share_one_fetch(mesh: Mesh, nursery: trio.Nursery) -> None:
    site = await Site().start(nursery)
    site.page("/p", PAGE)
    site.gates["/p"] = gate = trio.Event()
    alice, bob, room_id = await _room(mesh)
    sent = await mesh.send(alice, room_id, site.url("/p"))
    path = f"/api/rooms/{room_id}/messages/{sent['messageId']}/preview"
    answers: list[Any] = []

    async def ask(user: User) -> None:
        r = await mesh.http.get(path, headers=user.headers)
        answers.append(r.json()["preview"])

    async with trio.open_nursery() as asking:
        for user in (alice, bob, alice):
            asking.start_soon(ask, user)
        with trio.fail_after(5):
            while not site.hits:
                await trio.sleep(0.01)
        await trio.sleep(0.2)  # the others are waiting on the first by now
        gate.set()
    assert [a["title"] for a in answers] == ["The & plan for 2027"] * 3
    assert site.hits == ["/p"]
