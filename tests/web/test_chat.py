"""Two people chatting in real browsers: live messages, pending and failed
sends, Enter and Shift+Enter, edits, deletes, reactions, threads, mentions,
attachments."""

from __future__ import annotations

import re
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Route, expect

from tests.browser import Person, call, chromium, in_browser, shot, until
from tests.helpers import User
from tests.web.conftest import Served

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]

SEND = re.compile(r".*/api/rooms/[0-9A-Z]{26}/messages$")


def png(width: int = 40, height: int = 30) -> bytes:
    """A small, valid PNG (a red rectangle)."""
    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


async def two_people(node: Served) -> tuple[User, User, str]:
    owner = await node.mesh.setup("alice")
    bob = await node.mesh.register("bob")
    room_id = (await node.mesh.http.get("/api/setup/status")).json()["defaultRoomId"]
    await node.mesh.join(bob, room_id)
    return owner, bob, room_id


def signed_in(browser: Any, url: str, user: User, **kw: Any) -> Person:
    person = Person(browser, url, **kw)
    person.open()
    person.sign_in(user.name)
    return person


async def test_messages_live_pending_failed_edited_deleted(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)

    async def set_preset(preset: str) -> None:
        r = await node.mesh.http.post(
            f"/api/rooms/{room_id}/permissions/preset",
            json={"preset": preset},
            headers=alice_user.headers,
        )
        assert r.status_code == 200, r.text

    async def stored() -> list[dict[str, Any]]:
        return await node.mesh.messages(alice_user, room_id)

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            bob = signed_in(browser, node.url, bob_user)
            for person in (alice, bob):
                expect(person.heading("#Town Square")).to_be_visible()

            # typing shows on the other side; the message arrives live
            bob.composer.press_sequentially("hi ali")
            expect(alice.page.get_by_text("bob is typing…")).to_be_visible()
            bob.composer.press_sequentially("ce")
            bob.composer.press("Enter")
            expect(alice.message("hi alice")).to_be_visible()
            expect(alice.page.get_by_text("bob is typing…")).to_have_count(0)
            expect(bob.composer).to_have_value("")

            # Shift+Enter breaks the line, Enter sends
            bob.composer.fill("line one")
            bob.composer.press("Shift+Enter")
            bob.composer.press_sequentially("line two")
            expect(bob.composer).to_have_value("line one\nline two")
            bob.composer.press("Enter")
            expect(alice.message("line one")).to_contain_text("line two")

            # pending until the node's own message event confirms it
            held: list[Route] = []
            bob.page.route(
                SEND,
                lambda route: (
                    held.append(route) if route.request.method == "POST" else route.continue_()
                ),
            )
            pending = bob.send("wait for it")
            expect(pending).to_contain_text("sending…")
            expect(alice.message("wait for it")).to_have_count(0)
            shot(bob.page, "pending")
            # the page shows "sending…" before the request reaches the route
            until(bob, lambda: bool(held))
            assert len(held) == 1
            held[0].continue_()
            expect(pending).not_to_contain_text("sending…")
            expect(alice.message("wait for it")).to_be_visible()
            bob.page.unroute(SEND)

            # refused by the node: failed, with its reason, then retried
            call(set_preset, "read_only")
            failed = bob.send("while it is read-only")
            expect(failed.get_by_role("alert")).to_contain_text("Not sent: your role (member)")
            shot(bob.page, "failed")
            call(set_preset, "default")
            failed.get_by_role("button", name="Retry").click()
            expect(alice.message("while it is read-only")).to_be_visible()
            expect(bob.message("while it is read-only")).not_to_contain_text("Not sent")
            # too large: never stored; its text is back in the box with the reason
            bob.send("x" * 17000)
            expect(bob.page.get_by_role("form", name="Send a message")).to_contain_text(
                "Not sent: content is 16.6 KB; the limit is 16 KB"
            )
            expect(bob.composer).to_have_value("x" * 17000)
            bob.composer.fill("")

            # edit one's own message; everyone sees it changed
            mine = bob.message("hi alice")
            mine.hover()
            mine.get_by_role("button", name="Edit message").click()
            editor = bob.timeline.get_by_role("textbox", name="Edit message")
            expect(editor).to_be_focused()
            editor.fill("hi alice, edited")
            editor.press("Enter")
            expect(alice.message("hi alice, edited")).to_contain_text("(edited)")
            # others' messages: members may not edit or delete them…
            alices = alice.send("from alice")
            expect(alices).to_be_visible()
            theirs = bob.message("from alice")
            expect(theirs.get_by_role("button", name="Edit message")).to_have_count(0)
            expect(theirs.get_by_role("button", name="Delete message")).to_have_count(0)
            # …the owner may (moderation)
            moderated = alice.message("line one")
            moderated.hover()
            moderated.get_by_role("button", name="Delete message").click()
            dialog = alice.page.get_by_role("dialog", name="Delete this message?")
            expect(dialog).to_be_visible()
            dialog.get_by_role("button", name="Delete message").click()
            expect(bob.message("line one")).to_have_count(0)
            expect(alice.message("line one")).to_have_count(0)
            # one's own, cancelled and then deleted
            own = bob.message("wait for it")
            own.hover()
            own.get_by_role("button", name="Delete message").click()
            bob.page.get_by_role("dialog").get_by_role("button", name="Cancel").click()
            expect(own).to_be_visible()
            own.get_by_role("button", name="Delete message").click()
            bob.page.get_by_role("dialog").get_by_role("button", name="Delete message").click()
            expect(alice.message("wait for it")).to_have_count(0)

            for person in (alice, bob):
                # only bob's refused sends (403, 413) were logged as errors
                person.assert_clean(console=person is alice)
            assert all("status of 4" in e for e in bob.console_errors), bob.console_errors

    await in_browser(scenario)
    # each stored once; the deleted and the discarded are gone
    contents = [m["content"] for m in await stored()]
    assert contents == ["hi alice, edited", "while it is read-only", "from alice"], contents


async def test_reactions_threads_and_mentions(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    await node.mesh.send(bob_user, room_id, "what do you think?")

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            bob = signed_in(browser, node.url, bob_user)
            question = alice.message("what do you think?")
            expect(question).to_be_visible()

            # reactions: add, counts, who reacted, remove
            question.hover()
            question.get_by_role("button", name="Add reaction").click()
            question.get_by_role("button", name="React with 👍").click()
            theirs = bob.message("what do you think?")
            reaction = theirs.get_by_role("button", name=re.compile("^👍 1: alice$"))
            expect(reaction).to_have_attribute("aria-pressed", "false")
            reaction.click()  # bob adds his
            both = alice.message("what do you think?").get_by_role(
                "button", name="👍 2: alice, bob"
            )
            expect(both).to_have_attribute("aria-pressed", "true")
            expect(theirs.get_by_role("button", name="👍 2: alice, bob")).to_have_attribute(
                "aria-pressed", "true"
            )
            theirs.get_by_role("button", name="👍 2: alice, bob").click()  # and takes it back
            expect(
                alice.message("what do you think?").get_by_role("button", name="👍 1: alice")
            ).to_be_visible()

            # a reply in a thread
            question.hover()
            question.get_by_role("button", name="Reply in thread").click()
            thread = alice.page.get_by_role("complementary", name="Thread")
            expect(thread).to_be_visible()
            expect(
                thread.get_by_role("article").filter(has_text="what do you think?")
            ).to_be_visible()
            reply_box = thread.get_by_role("textbox", name="Reply in thread")
            expect(reply_box).to_be_focused()
            reply_box.fill("looks good to me")
            reply_box.press("Enter")
            expect(
                thread.get_by_role("article").filter(has_text="looks good to me")
            ).not_to_contain_text("sending…")
            shot(alice.page, "thread")
            # bob sees the reply in the room, marked as part of a thread, and opens it
            reply = bob.message("looks good to me")
            expect(reply).to_contain_text("in a thread: bob: what do you think?")
            reply.get_by_role("button", name=re.compile("^bob: what do you think")).click()
            bob_thread = bob.page.get_by_role("complementary", name="Thread")
            expect(
                bob_thread.get_by_role("article").filter(has_text="looks good to me")
            ).to_be_visible()
            bob_box = bob_thread.get_by_role("textbox", name="Reply in thread")
            bob_box.fill("thanks!")
            bob_box.press("Enter")
            expect(thread.get_by_role("article").filter(has_text="thanks!")).to_be_visible()
            bob_box.press("Escape")
            expect(bob_thread).to_be_hidden()
            alice.button("Close thread").click()
            expect(thread).to_be_hidden()

            # @ completes names and addresses the message
            alice.composer.press_sequentially("@bo")
            option = alice.page.get_by_role("option", name="bob")
            expect(option).to_be_visible()
            # the box points at the suggestion assistive technology reads
            # (aria-activedescendant; a textarea takes no aria-expanded)
            expect(alice.composer).to_have_attribute(
                "aria-activedescendant", re.compile("-option-0$")
            )
            alice.composer.press("Enter")
            expect(alice.composer).to_have_value("@bob ")
            alice.composer.press_sequentially("please look")
            alice.composer.press("Enter")
            mention = bob.message("please look")
            expect(mention).to_have_class(re.compile(r"\bmentions-me\b"))
            expect(mention.locator(".mention.me")).to_have_text("@bob")
            for person in (alice, bob):
                person.assert_clean()

    await in_browser(scenario)
    messages = await node.mesh.messages(alice_user, room_id)
    by_content = {m["content"]: m for m in messages}
    question = by_content["what do you think?"]
    assert question["reactions"] == [
        {"emoji": "👍", "count": 1, "participantIds": [alice_user.participant_id]}
    ]
    assert by_content["looks good to me"]["threadId"] == question["messageId"]
    assert by_content["thanks!"]["threadId"] == question["messageId"]
    assert by_content["@bob please look"]["to"] == bob_user.participant_id


async def test_attachments_upload_with_progress(
    browser_ready: None, serve_node: Any, tmp_path: Path
) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    image = tmp_path / "chart.png"
    image.write_bytes(png())
    notes = tmp_path / "notes.txt"
    notes.write_text("plain notes\n")

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            bob = signed_in(browser, node.url, bob_user)
            expect(bob.heading("#Town Square")).to_be_visible()
            held: list[Route] = []
            bob.page.route("**/api/upload", lambda route: held.append(route))
            with bob.page.expect_file_chooser() as chooser:
                bob.button("Attach files").click()
            chooser.value.set_files([str(image), str(notes)])
            progress = bob.page.get_by_role("progressbar", name="Uploading chart.png")
            expect(progress).to_be_visible()
            # sending before the files are up is refused with a reason
            bob.composer.fill("the chart")
            bob.composer.press("Enter")
            expect(bob.page.get_by_role("alert")).to_have_text(
                "Wait until the files have uploaded."
            )
            shot(bob.page, "uploading")
            until(bob, lambda: len(held) == 2)
            for route in held:
                route.continue_()
            files = bob.page.get_by_role("list", name="Files to send")
            expect(files.get_by_text("ready")).to_have_count(2)
            bob.composer.press("Enter")
            sent = alice.message("the chart")
            picture = sent.get_by_role("img", name="chart.png")
            expect(picture).to_be_visible()
            expect(picture).to_have_js_property("complete", True)
            assert picture.evaluate("img => img.naturalWidth") == 40
            download = sent.get_by_role("link", name=re.compile(r"notes\.txt"))
            expect(download).to_have_attribute("download", "notes.txt")
            href = download.get_attribute("href")
            assert href is not None
            assert href.startswith("/uploads/")
            shot(alice.page, "attachments")
            for person in (alice, bob):
                person.assert_clean()

    await in_browser(scenario)
    [message] = [
        m for m in await node.mesh.messages(alice_user, room_id) if m["content"] == "the chart"
    ]
    assert [(a["filename"], a["contentType"]) for a in message["attachments"]] == [
        ("chart.png", "image/png"),
        ("notes.txt", "text/plain; charset=utf-8"),
    ]
