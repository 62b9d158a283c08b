"""Bots in the same room, and hostile content, in a real browser.

A managed echo bot (a real child process of the node) answers a person
typing in the page, with a bot badge. A bot posts content built to run
script or break the layout; the page shows it as text, runs nothing, and
keeps its shape."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser import Person, chromium, in_browser, shot
from tests.helpers import User
from tests.web.conftest import Served
from tests.web.test_chat import signed_in

pytestmark = pytest.mark.e2e

HOSTILE = [
    '<img src=x onerror="window.__pwned=1;alert(1)">',
    "<script>window.__pwned=2;alert(2)</script>",
    "[click me](javascript:window.__pwned=3) and javascript:alert(3)",
    '<svg onload="window.__pwned=4"><script>window.__pwned=5</script></svg>',
    "[data](data:text/html,<script>alert(6)</script>) [vb](vbscript:msgbox)",
    "**<b onmouseover=alert(7)>bold</b>** `<i>code</i>`",
    "[https://good.example](https://evil.example/steal) <a href=http://x onclick=alert(8)>a</a>",
    "```\n<iframe src=javascript:alert(9)></iframe>\n```",
    "A" * 5000,
    "\u202etxt.exe\u202c then the next word \u2066isolated\u2069",
    "right after the override",
]


async def test_an_echo_bot_answers_in_the_room(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    owner: User = await node.mesh.setup("alice")
    room_id = (await node.mesh.http.get("/api/setup/status")).json()["defaultRoomId"]
    r = await node.mesh.http.post(
        "/api/agents/spawn",
        json={"name": "echo", "type": "echo", "rooms": [room_id]},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, owner)
            expect(alice.heading("#Town Square")).to_be_visible()
            # the bot is in the room (it joined when spawned)
            people = alice.page.get_by_role("region", name="People")
            bot_row = people.get_by_role("listitem").filter(has_text=re.compile("^echo"))
            expect(bot_row.get_by_text("bot", exact=True)).to_be_visible()
            expect(bot_row.get_by_role("img", name="online")).to_be_visible()
            alice.send("hello bot")
            answer = alice.message("echo: hello bot")
            expect(answer).to_be_visible()
            expect(answer.get_by_text("bot", exact=True)).to_be_visible()
            expect(alice.message("hello bot").first.get_by_text("bot", exact=True)).to_have_count(0)
            shot(alice.page, "bot")
            alice.assert_clean()

    await in_browser(scenario)


async def test_hostile_content_is_shown_as_text(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    owner: User = await node.mesh.setup(
        "alice", meshName="Acme <img src=x onerror=window.__pwned=10>"
    )
    room_id = (await node.mesh.http.get("/api/setup/status")).json()["defaultRoomId"]
    r = await node.mesh.http.post(
        "/api/agents/bootstrap", json={"name": "mallory", "type": "nanoclaw"}
    )
    bot = User(r.json()["agentId"], "mallory", r.json()["token"])
    await node.mesh.join(bot, room_id)
    evil_room = await node.mesh.create_room(bot, '<img src=x onerror="window.__pwned=11">')
    await node.mesh.join(owner, evil_room["roomId"])
    svg = (
        b'<svg xmlns="http://www.w3.org/2000/svg" onload="window.__pwned=12">'
        b"<script>window.__pwned=13</script></svg>"
    )
    r = await node.mesh.http.post(
        "/api/upload", files={"file": ("evil.svg", svg, "image/svg+xml")}, headers=bot.headers
    )
    assert r.status_code == 201, r.text
    upload = r.json()

    def scenario() -> None:
        with chromium() as browser:
            alice = Person(browser, node.url, width=900)
            alice.open()
            alice.sign_in("alice")
            expect(alice.heading("#Town Square")).to_be_visible()

            async def post_all() -> None:
                for content in HOSTILE:
                    await node.mesh.send(bot, room_id, content)
                await node.mesh.send(bot, room_id, "see attached", attachments=[upload["uploadId"]])

            from tests.browser import call

            call(post_all)
            last = alice.message("see attached")
            expect(last).to_be_visible()
            page = alice.page
            # shown as the text it is
            expect(alice.message('<img src=x onerror="window.__pwned=1;alert(1)">')).to_be_visible()
            expect(alice.message("<script>window.__pwned=2;alert(2)</script>")).to_be_visible()
            strong = alice.message("bold").locator("strong")
            expect(strong).to_have_text("<b onmouseover=alert(7)>bold</b>")
            # links: only http(s), with noopener noreferrer, showing where they go
            timeline = alice.timeline
            links = timeline.get_by_role("link")
            for i in range(links.count()):
                link = links.nth(i)
                href = link.get_attribute("href") or ""
                assert re.match(r"^(https?:|mailto:|/uploads/)", href), href
                if not href.startswith("/uploads/"):
                    assert "noopener" in (link.get_attribute("rel") or "")
                    assert "noreferrer" in (link.get_attribute("rel") or "")
            expect(timeline.get_by_role("link", name="click me")).to_have_count(0)
            good = timeline.get_by_role("link", name="https://good.example")
            expect(good).to_have_attribute("href", "https://evil.example/steal")
            expect(good).to_have_attribute("title", "https://evil.example/steal")
            # the SVG is a download, never drawn in the page
            expect(last.get_by_role("link", name=re.compile("evil.svg"))).to_be_visible()
            assert timeline.locator("img, svg:not(.icon), iframe, script, object").count() == 0
            assert page.locator("script").count() == 1  # the page's own module
            # nothing ran
            assert page.evaluate("() => window.__pwned") is None
            shot(page, "hostile")
            # the layout holds: the long word wraps, nothing scrolls sideways
            box = page.evaluate(
                "() => { const t = document.getElementById('timeline');"
                " return [t.scrollWidth, t.clientWidth,"
                " document.documentElement.scrollWidth, window.innerWidth]; }"
            )
            assert box[0] <= box[1], box
            assert box[2] <= box[3], box
            # the bidi override stays inside its message
            override = alice.message("txt.exe")
            after = alice.message("right after the override")
            body = override.locator(".msg-body")
            assert body.evaluate("el => getComputedStyle(el).unicodeBidi") == "isolate"
            # the override itself is shown, not obeyed ("txt.exe" is not shown as "exe.txt")
            expect(body.locator(".bidi-mark")).to_have_text("[RLO]")
            assert "\u202e" not in (body.text_content() or "")
            assert after.evaluate("el => getComputedStyle(el).direction") == "ltr"
            assert (
                after.locator(".msg-sender").evaluate("el => el.getBoundingClientRect().left") < 300
            )
            # hostile names of rooms and of the mesh are text too
            evil_link = alice.page.get_by_role(
                "link", name=re.compile(r'^<img src=x onerror="window.__pwned=11">')
            )
            expect(evil_link).to_be_visible()
            evil_link.click()
            expect(page).to_have_title(re.compile(r"^#<img src=x"))
            expect(page.get_by_role("banner")).to_contain_text(
                "Acme <img src=x onerror=window.__pwned=10>"
            )
            assert page.evaluate("() => window.__pwned") is None
            alice.assert_clean()

    await in_browser(scenario)
