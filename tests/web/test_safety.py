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

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]

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
    "_leaning_ and *also leaning*, write to mailto:alice@example.com.",
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
            # the rest of the Markdown subset: italic, inline code, code blocks
            expect(alice.message("leaning").locator("em")).to_have_text(["leaning", "also leaning"])
            expect(alice.message("bold").locator("code")).to_have_text("<i>code</i>")
            expect(alice.message("<iframe").locator("pre > code")).to_have_text(
                "<iframe src=javascript:alert(9)></iframe>\n"
            )
            mail = alice.message("leaning").get_by_role("link", name="mailto:alice@example.com")
            expect(mail).to_have_attribute("href", "mailto:alice@example.com")
            expect(mail).to_have_attribute("rel", re.compile(r"\bnoopener\b.*\bnoreferrer\b"))
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
            # each message body takes its direction from its own text, isolated
            for shown in (body, after.locator(".msg-body")):
                expect(shown).to_have_attribute("dir", "auto")
                assert shown.evaluate("el => getComputedStyle(el).unicodeBidi") == "isolate"
            # the override itself is shown, not obeyed ("txt.exe" is not shown as "exe.txt")
            expect(body.locator(".bidi-mark")).to_have_text("[RLO]")
            assert "\u202e" not in (body.text_content() or "")
            # as laid out: "txt" is left of "exe" (an obeyed override swaps them)
            lefts = body.evaluate(
                """el => {
                    const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
                    while (walk.nextNode()) {
                        const node = walk.currentNode;
                        const at = node.data.indexOf("txt.exe");
                        if (at === -1) continue;
                        const left = (i) => {
                            const r = document.createRange();
                            r.setStart(node, i);
                            r.setEnd(node, i + 3);
                            return r.getBoundingClientRect().left;
                        };
                        return [left(at), left(at + 4)];
                    }
                    return null;
                }"""
            )
            assert lefts is not None
            assert lefts[0] < lefts[1], lefts
            # (the name of the next message is at its start, beside the avatar)
            assert (
                after.locator(".msg-sender").evaluate(
                    "el => el.getBoundingClientRect().left"
                    " - el.closest('article').getBoundingClientRect().left"
                )
                < 70
            )
            assert (
                after.locator(".msg-sender").evaluate("el => el.getBoundingClientRect().left") < 350
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


async def test_the_content_security_policy_blocks_injected_script(
    browser_ready: None, serve_node: Any
) -> None:
    """Suppose script got into the page anyway: in the HTML as served, or put
    into the DOM by the page's own code. The policy refuses to run it, and
    says so with a ``securitypolicyviolation`` event.

    The other tests fail on any CSP violation (``Person.assert_clean``); this
    one provokes them, so it expects exactly these instead."""
    node: Served = await serve_node()
    await node.mesh.setup("alice")

    def scenario() -> None:
        from playwright.sync_api import Route

        with chromium() as browser:
            person = Person(browser, node.url)
            page = person.page

            def inject(route: Route) -> None:
                """The page as the node serves it (its headers, its policy),
                with an inline script and an inline handler added."""
                response = route.fetch()
                body = response.text().replace(
                    "<body>",
                    "<body><script>window.__pwned = 'inline script'</script>"
                    "<img src=/no-such-image onerror=\"window.__pwned = 'handler'\">",
                )
                route.fulfill(response=response, body=body)

            # (a document answered by a route loses its local address, so
            # Chromium would refuse its WebSocket: this test stays signed out)
            page.route(node.url + "/", inject)
            person.open()
            expect(person.heading("Sign in")).to_be_visible()  # the page's own script runs
            page.wait_for_function("() => window.__cspViolations.length >= 2")
            assert sorted(person.csp_violations()) == [
                "script-src-attr inline",
                "script-src-elem inline",
            ], person.csp_violations()

            # from the page's own code (a timer): inside page.evaluate itself,
            # DevTools would let eval run whatever the policy says
            page.evaluate(
                """() => setTimeout(() => {
                    const out = (window.__refused = {});
                    for (const [name, attempt] of Object.entries({
                        script() {
                            const s = document.createElement("script");
                            s.append(document.createTextNode("window.__pwned = 'script'"));
                            document.body.append(s);
                        },
                        eval: () => eval("window.__pwned = 'eval'"),
                        Function: () => new Function("window.__pwned = 'Function'")(),
                        timer: () => setTimeout("window.__pwned = 'timer'"),
                    })) {
                        try { attempt(); out[name] = null; }
                        catch (e) { out[name] = e.name; }
                    }
                })"""
            )
            page.wait_for_function("() => window.__cspViolations.length >= 6")
            refused = page.evaluate("() => window.__refused")
            assert refused == {
                "script": None,  # appended quietly, never run
                "eval": "EvalError",
                "Function": "EvalError",
                "timer": "TypeError",  # a string where Trusted Types wants TrustedScript
            }, refused
            assert (
                person.csp_violations()[2:] == ["require-trusted-types-for trusted-types-sink"] * 4
            ), person.csp_violations()
            # nothing ran, and nothing broke the page
            assert page.evaluate("() => window.__pwned") is None
            assert person.errors == [], person.errors
            assert person.dialogs == [], person.dialogs
            expect(person.textbox("Name")).to_be_editable()

    await in_browser(scenario)
