"""The owner's console, part A (js/console-settings.js, console-roles.js,
console-rules.js, console-limits.js): the mesh's settings, the setup
checklist and statistics, roles, room rules, rate limits and uploads. Each
change made in the page is checked through the node's REST API, and where it
matters, in what another person can then do."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser import Person, call, chromium, in_browser, shot
from tests.helpers import User
from tests.web.conftest import Served
from tests.web.test_chat import signed_in, two_people

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]


def console(person: Person, section: str) -> Any:
    """Open the console's *section* by its link; the section's area."""
    person.page.goto(f"{person.base_url}/#console/{section}")
    expect(person.heading("Console", level=1)).to_be_visible()
    return person.page.locator(".console-section")


def top(person: Person) -> None:
    """Scroll the view back to its heading (for screenshots)."""
    person.page.evaluate("() => document.querySelector('.panel-view').scrollTo(0, 0)")


def stat(person: Person, group: str, term: str) -> Any:
    """The value of *term* in the statistics group *group*."""
    box = person.page.locator(".console-stat-group").filter(
        has=person.page.get_by_role("heading", name=group, exact=True)
    )
    return box.locator("dt", has_text=re.compile(f"^{re.escape(term)}$")).locator(
        "xpath=following-sibling::dd[1]"
    )


def rest(node: Served) -> Any:
    """Async REST helpers bound to *node*, for ``call`` from the browser thread."""

    async def get(user: User, path: str) -> Any:
        r = await node.mesh.http.get(path, headers=user.headers)
        return r.status_code, r.json()

    async def put(user: User, path: str, body: Any) -> Any:
        r = await node.mesh.http.put(path, json=body, headers=user.headers)
        return r.status_code, r.json()

    async def post(user: User, path: str, body: Any) -> Any:
        r = await node.mesh.http.post(path, json=body, headers=user.headers)
        return r.status_code, r.json()

    async def delete(user: User, path: str) -> Any:
        r = await node.mesh.http.delete(path, headers=user.headers)
        return r.status_code, r.json()

    return get, put, post, delete


async def test_mesh_settings_checklist_and_statistics(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    for text in ("one", "two", "three"):
        await node.mesh.send(alice_user, room_id, text)
    get, put, _, _ = rest(node)

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            bob = signed_in(browser, node.url, bob_user)
            expect(alice.heading("#Town Square")).to_be_visible()
            console(alice, "settings")
            expect(alice.page.get_by_role("link", name="Mesh", exact=True)).to_have_attribute(
                "aria-current", "page"
            )
            name = alice.textbox("Mesh name")
            expect(name).to_have_value("Test Mesh")
            expect(alice.page.get_by_role("radio", name=re.compile("^Public"))).to_be_checked()
            expect(
                alice.page.get_by_role("combobox", name="Default room", exact=True)
            ).to_have_value(room_id)

            # the checklist: each step's state in words
            steps = (
                alice.page.get_by_role("heading", name="Setup checklist", exact=True)
                .locator("xpath=..")
                .get_by_role("listitem")
            )
            expect(steps).to_have_count(6)
            expect(steps.filter(has_text="Create the owner account")).to_contain_text("Done")
            expect(steps.filter(has_text="Configure a model")).to_contain_text("Not done")
            expect(alice.page.get_by_text("4 of 6 steps done.")).to_be_visible()

            # statistics: real numbers, refreshed on demand
            expect(stat(alice, "People and rooms", "Messages")).to_have_text("3")
            expect(stat(alice, "People and rooms", "Participants")).to_have_text("2")
            expect(stat(alice, "People and rooms", "Humans")).to_have_text("2")
            expect(stat(alice, "People and rooms", "Rooms")).to_have_text("1")
            expect(stat(alice, "Node", "Version")).not_to_have_text("—")
            bob.send("four")
            expect(bob.message("four")).to_be_visible()
            alice.button("Refresh statistics").click()
            expect(stat(alice, "People and rooms", "Messages")).to_have_text("4")
            expect(stat(alice, "People and rooms", "Online now")).to_have_text("2")
            expect(
                alice.page.get_by_role("status").filter(has_text="Statistics refreshed")
            ).to_be_visible()
            top(alice)
            shot(alice.page, "console-settings")

            # nothing changed: nothing sent
            alice.button("Save settings").click()
            expect(alice.page.get_by_text("Nothing to save: no field was changed.")).to_be_visible()
            # the node's refusal is shown next to the form
            name.fill("   ")
            alice.button("Save settings").click()
            code, refusal = call(put, alice_user, "/api/admin/mesh/settings", {"name": "   "})
            assert code == 400
            expect(
                alice.page.get_by_role("alert").filter(has_text=refusal["error"])
            ).to_be_visible()
            assert call(get, alice_user, "/api/admin/mesh/settings")[1]["name"] == "Test Mesh"

            # a change: only the changed fields, persisted, shown at once
            name.fill("Harbor")
            alice.page.get_by_role("textbox", name="Description", exact=True).fill(
                "Boats and <b>bold</b> plans"
            )
            alice.page.get_by_role("radio", name=re.compile("^Private")).check()
            alice.page.get_by_role("radio", name=re.compile("^Closed")).check()
            alice.page.get_by_role("checkbox", name="Guests may post messages", exact=True).check()
            alice.button("Save settings").click()
            expect(
                alice.page.get_by_role("status").filter(
                    has_text="Saved: name, description, visibility, registration, guests' posting."
                )
            ).to_be_visible()
            code, saved = call(get, alice_user, "/api/admin/mesh/settings")
            assert code == 200
            assert saved["name"] == "Harbor"
            assert saved["description"] == "Boats and <b>bold</b> plans"
            assert saved["visibility"] == "private"
            assert saved["registrationMode"] == "closed"
            assert saved["guestsCanSend"] is True
            assert saved["defaultRoomId"] == room_id
            expect(alice.page.locator("#mesh-name")).to_have_text("Harbor")
            expect(alice.page).to_have_title(re.compile(r"Console · Harbor$"))

            # bob sees the new name after a reload; a signed-out visitor
            # sees that registration is closed and no guest entrance
            bob.page.reload()
            expect(bob.page.locator("#mesh-name")).to_have_text("Harbor")
            visitor = Person(browser, node.url)
            visitor.open()
            expect(visitor.heading("Sign in")).to_be_visible()
            expect(visitor.page.locator("#auth-mesh")).to_have_text("Harbor")
            expect(visitor.page.get_by_text("Registration is closed on this mesh")).to_be_visible()
            expect(visitor.button("Create an account")).to_be_hidden()
            expect(visitor.page.locator("#guest-section")).to_be_hidden()

            # another admin's change shows when the window gets the focus back
            call(put, alice_user, "/api/admin/mesh/settings", {"description": "changed elsewhere"})
            alice.page.evaluate("() => window.dispatchEvent(new Event('focus'))")
            expect(alice.page.get_by_role("textbox", name="Description", exact=True)).to_have_value(
                "changed elsewhere"
            )

            # the owner makes the node a registry (off by default): it lists meshes at once
            registry = alice.page.get_by_role(
                "checkbox", name="List other public meshes (this node is a registry)", exact=True
            )
            expect(registry).not_to_be_checked()
            assert call(get, alice_user, "/api/meshes/public")[0] == 404
            registry.check()
            alice.button("Save settings").click()
            expect(
                alice.page.get_by_role("status").filter(has_text="Saved: registry.")
            ).to_be_visible()
            code, saved = call(get, alice_user, "/api/admin/mesh/settings")
            assert (saved["registryEnabled"], saved["registryEnabledSource"]) == (True, "admin")
            assert call(get, alice_user, "/api/meshes/public") == (200, [])
            manifest = call(get, alice_user, "/.well-known/mesh-manifest.json")[1]
            assert manifest["federation"]["isRegistry"] is True

            # a member: no console link, the address is a room, the API refuses
            nav = bob.page.get_by_role("navigation", name="Rooms and people")
            expect(nav.get_by_role("link", name="Console")).to_have_count(0)
            bob.page.goto(node.url + "/#console/settings")
            expect(bob.heading("#Town Square")).to_be_visible()
            expect(bob.heading("Console", level=1)).to_have_count(0)
            for path in ("/api/admin/mesh/settings", "/api/admin/stats", "/api/admin/setup-status"):
                assert call(get, bob_user, path)[0] == 403
            assert call(put, bob_user, "/api/admin/mesh/settings", {"name": "Mine"})[0] == 403

            # at 380 px: no horizontal scrolling of the page
            narrow = signed_in(browser, node.url, alice_user, width=380, height=800)
            console(narrow, "settings")
            expect(narrow.textbox("Mesh name")).to_have_value("Harbor")
            expect(stat(narrow, "People and rooms", "Messages")).to_have_text("4")
            assert narrow.page.evaluate("() => document.documentElement.scrollWidth") <= 380
            shot(narrow.page, "console-settings-narrow")
            for person in (alice, bob, visitor, narrow):
                person.assert_clean(console=False)

    await in_browser(scenario)


async def test_roles_created_assigned_edited_and_deleted(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, _ = await two_people(node)
    get, put, _, delete = rest(node)

    def roles_by_name() -> dict[str, Any]:
        return {r["name"]: r for r in call(get, alice_user, "/api/roles")[1]}

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            console(alice, "roles")
            page = alice.page
            roles = page.get_by_role("table", name="Roles of this mesh", exact=True)
            expect(roles.get_by_role("row")).to_have_count(8)  # heading + 7 built-in
            expect(roles.get_by_role("row").filter(has_text="member")).to_contain_text("Built-in")

            # a custom role from scratch
            create = page.get_by_role("form").filter(
                has=page.get_by_role("button", name="Create role", exact=True)
            )
            create.get_by_role("textbox", name="Role name", exact=True).fill("helper")
            create.get_by_role("spinbutton", name="Role priority", exact=True).fill("450")
            for permission in (
                "participants.read",
                "rooms.read",
                "rooms.join",
                "messages.send",
                "models.use",
            ):
                create.get_by_role(
                    "checkbox", name=re.compile(f"^{re.escape(permission)} ")
                ).check()
            page.get_by_role("button", name="Create role", exact=True).click()
            expect(page.get_by_text("Created the role helper with 5 permissions.")).to_be_visible()
            expect(roles.get_by_role("row").filter(has_text="helper")).to_contain_text("Custom")
            helper = roles_by_name()["helper"]
            assert helper["priority"] == 450
            assert helper["builtin"] is False
            assert sorted(helper["permissions"]) == sorted(
                ["participants.read", "rooms.read", "rooms.join", "messages.send", "models.use"]
            )

            # one from a template, with another name
            page.get_by_role("combobox", name="Template", exact=True).select_option("announcer")
            expect(page.get_by_text(re.compile("^posts announcements"))).to_be_visible()
            page.get_by_role("textbox", name="Name (optional)", exact=True).fill("herald")
            page.get_by_role("button", name="Create from template", exact=True).click()
            expect(page.get_by_text("Created the role herald (priority 350).")).to_be_visible()
            assert roles_by_name()["herald"]["permissions"] == [
                "participants.read",
                "rooms.read",
                "rooms.join",
                "messages.send",
            ]

            # assign helper to bob: his permissions are the role's
            before = call(get, bob_user, "/api/auth/me")[1]
            assert "messages.react" in before["permissions"]
            page.get_by_role("combobox", name="Participant", exact=True).select_option(
                label="bob (member)"
            )
            page.get_by_role("combobox", name="New role", exact=True).select_option("helper")
            page.get_by_role("button", name="Assign role", exact=True).click()
            expect(page.get_by_text("bob is now helper.")).to_be_visible()
            me = call(get, bob_user, "/api/auth/me")[1]
            assert me["role"] == "helper"
            assert sorted(me["permissions"]) == sorted(helper["permissions"])
            expect(
                roles.get_by_role("row").filter(has_text="helper").get_by_role("cell").nth(4)
            ).to_have_text("1")

            # refused: nobody changes their own role; the node's message shows
            code, refusal = call(
                put,
                alice_user,
                f"/api/participants/{alice_user.participant_id}/role",
                {"role": "member"},
            )
            assert code == 403
            page.get_by_role("combobox", name="Participant", exact=True).select_option(
                label="alice (owner)"
            )
            page.get_by_role("combobox", name="New role", exact=True).select_option("member")
            page.get_by_role("button", name="Assign role", exact=True).click()
            expect(page.get_by_role("alert").filter(has_text=refusal["error"])).to_be_visible()
            assert call(get, alice_user, "/api/auth/me")[1]["role"] == "owner"

            # edit herald: a new priority, one permission fewer
            page.get_by_role("button", name="Edit herald", exact=True).click()
            edit = page.get_by_role("form", name="Edit the role herald", exact=True)
            expect(
                page.get_by_role("heading", name="Edit the role herald", exact=True)
            ).to_be_focused()
            edit.get_by_role("spinbutton", name="New priority", exact=True).fill("360")
            edit.get_by_role("checkbox", name=re.compile(r"^messages\.send ")).uncheck()
            page.get_by_role("button", name="Save role", exact=True).click()
            expect(page.get_by_text("Saved the role herald.")).to_be_visible()
            herald = roles_by_name()["herald"]
            assert herald["priority"] == 360
            assert "messages.send" not in herald["permissions"]
            top(alice)
            shot(page, "console-roles")

            # deleting asks first; a role in use is refused with the node's word
            page.get_by_role("button", name="Delete helper", exact=True).click()
            page.get_by_role("group", name="Confirm deleting helper", exact=True).get_by_role(
                "button", name="Delete helper"
            ).click()
            in_use = call(delete, alice_user, f"/api/roles/{helper['roleId']}")
            assert in_use[0] == 409
            expect(page.get_by_role("alert").filter(has_text=in_use[1]["error"])).to_be_visible()
            assert "helper" in roles_by_name()
            page.get_by_role("button", name="Delete herald", exact=True).click()
            page.get_by_role("button", name="Keep herald", exact=True).click()
            assert "herald" in roles_by_name()
            page.get_by_role("button", name="Delete herald", exact=True).click()
            page.get_by_role("group", name="Confirm deleting herald", exact=True).get_by_role(
                "button", name="Delete herald"
            ).click()
            expect(page.get_by_text("Deleted the role herald.")).to_be_visible()
            assert "herald" not in roles_by_name()
            expect(roles.get_by_role("row").filter(has_text="herald")).to_have_count(0)

            # the catalog
            page.get_by_text("Permission catalog", exact=True).click()
            catalog = page.get_by_role("table", name="Every permission the node knows", exact=True)
            expect(catalog.get_by_role("row").filter(has_text="roles.manage")).to_contain_text(
                "owner"
            )

            # an admin without roles.manage assigns, but is offered no role editing
            call(
                put,
                alice_user,
                f"/api/participants/{bob_user.participant_id}/role",
                {"role": "admin"},
            )
            bob = signed_in(browser, node.url, bob_user)
            console(bob, "roles")
            expect(
                bob.page.get_by_role("table", name="Roles of this mesh", exact=True)
            ).to_be_visible()
            expect(bob.page.get_by_role("button", name="Assign role", exact=True)).to_be_visible()
            expect(bob.button("Create role")).to_have_count(0)
            expect(bob.button("Edit helper")).to_have_count(0)
            options = bob.page.get_by_role("combobox", name="New role", exact=True).locator(
                "option"
            )
            expect(options).not_to_contain_text(["admin"])
            alice.assert_clean(console=False)
            bob.assert_clean()

    await in_browser(scenario)


async def test_room_rules_and_rate_limits(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    carol_user = await node.mesh.register("carol")
    await node.mesh.join(carol_user, room_id)
    get, _put, post, _ = rest(node)

    def posts(user: User, text: str) -> int:
        code: int = call(post, user, f"/api/rooms/{room_id}/messages", {"content": text})[0]
        return code

    def bob_posts(text: str) -> int:
        return posts(bob_user, text)

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            page = alice.page
            console(alice, "rules")
            expect(page.get_by_role("combobox", name="Room", exact=True)).to_have_value(room_id)
            expect(page.get_by_text("Current preset: none.")).to_be_visible()

            # a preset: bob may no longer post
            page.get_by_role("radio", name=re.compile("^Read only")).check()
            page.get_by_role("button", name="Apply preset", exact=True).click()
            expect(page.get_by_text("Applied the preset Read only.")).to_be_visible()
            expect(page.get_by_text("Current preset: Read only.")).to_be_visible()
            assert (
                call(get, alice_user, f"/api/rooms/{room_id}/permissions")[1]["preset"]
                == "read_only"
            )
            assert bob_posts("still here?") == 403

            # an override for his role lets members post again
            cell = page.get_by_role("combobox", name="member: Post (messages.send)", exact=True)
            expect(cell).to_have_value("inherit")
            cell.select_option("allow")
            expect(page.get_by_text("Saved: messages.send allowed to member.")).to_be_visible()
            overrides = page.get_by_role("table", name="Overrides in #Town Square", exact=True)
            expect(overrides.get_by_role("row").filter(has_text="role member")).to_contain_text(
                "Allowed"
            )
            assert bob_posts("back") == 201
            # a rule for bob himself wins over his role's
            form = page.get_by_role("form", name="A rule for one participant", exact=True)
            form.get_by_role("combobox", name="Participant", exact=True).select_option(
                label="bob (member)"
            )
            form.get_by_role("combobox", name="Permission", exact=True).select_option(
                "messages.send"
            )
            form.get_by_role("combobox", name="Effect", exact=True).select_option("deny")
            page.get_by_role("button", name="Add rule", exact=True).click()
            expect(page.get_by_text("Saved: messages.send denied to bob.")).to_be_visible()
            assert bob_posts("and now?") == 403
            top(alice)
            shot(page, "console-rules")
            page.get_by_role(
                "button", name="Remove the rule messages.send for bob", exact=True
            ).click()
            expect(page.get_by_text("Removed the rule messages.send for bob.")).to_be_visible()
            assert bob_posts("again") == 201
            # back to inherit: the preset decides again
            page.get_by_role(
                "combobox", name="member: Post (messages.send)", exact=True
            ).select_option("inherit")
            expect(page.get_by_text("Saved: member inherits messages.send.")).to_be_visible()
            assert call(get, alice_user, f"/api/rooms/{room_id}/permissions")[1]["overrides"] == []
            assert bob_posts("once more?") == 403
            page.get_by_role("radio", name=re.compile("^Default")).check()
            page.get_by_role("button", name="Apply preset", exact=True).click()
            expect(page.get_by_text("Preset and overrides cleared.")).to_be_visible()
            assert bob_posts("free") == 201

            # rate limits: messages to one a minute; bob's second is refused
            console(alice, "limits")
            rules = page.get_by_role("table", name="Rate limit rules", exact=True)
            row = rules.get_by_role("row").filter(
                has=page.locator("code", has_text=re.compile("^messages$"))
            )
            expect(row).to_contain_text("20 per 10 s, bursts of 150")
            expect(row).to_contain_text("node settings")
            expect(page.get_by_text("Yes (MESH_RATE_LIMITS)")).to_be_visible()
            expect(page.get_by_text("127.0.0.0/8")).to_be_visible()
            page.get_by_role("button", name="Edit the messages limit", exact=True).click()
            edit = page.get_by_role("form", name="The messages limit", exact=True)
            edit.get_by_role("spinbutton", name="Count", exact=True).fill("1")
            edit.get_by_role("spinbutton", name="Per (seconds)", exact=True).fill("60")
            edit.get_by_role("spinbutton", name="Burst", exact=True).fill("1")
            page.get_by_role("button", name="Save limit", exact=True).click()
            expect(page.get_by_text("messages is now 1 per minute.")).to_be_visible()
            expect(row).to_contain_text("this console")
            rule = call(get, alice_user, "/api/admin/mesh/settings")[1]["rateLimits"]["messages"]
            assert (rule["count"], rule["per"], rule["burst"], rule["source"]) == (
                1,
                60,
                1,
                "admin",
            )
            # (bob's earlier messages count against the new rule already)
            assert posts(carol_user, "first") == 201
            assert posts(carol_user, "second") == 429
            page.reload()
            expect(row.get_by_role("cell").nth(4)).to_have_text("1")  # refused since start

            # multipliers
            page.get_by_role("spinbutton", name="Multiplier of member", exact=True).fill("2.5")
            page.get_by_role("button", name="Save multipliers", exact=True).click()
            expect(page.get_by_text("Multipliers saved.")).to_be_visible()
            saved = call(get, alice_user, "/api/admin/mesh/settings")[1]
            assert saved["roleMultipliers"]["member"] == 2.5
            assert saved["roleMultipliersSource"] == "admin"

            # uploads: what the roles say
            uploads = page.get_by_role("heading", name="Uploads", exact=True).locator("xpath=..")
            expect(uploads).to_contain_text("agent")
            expect(uploads).to_contain_text("MESH_UPLOAD_QUOTA_BYTES")
            top(alice)
            shot(page, "console-limits")

            # off, then back to the node's setting
            page.get_by_role("button", name="Edit the messages limit", exact=True).click()
            page.get_by_role("checkbox", name="Off (no limit)", exact=True).check()
            page.get_by_role("button", name="Save limit", exact=True).click()
            expect(page.get_by_text("messages is now Off.")).to_be_visible()
            assert (
                call(get, alice_user, "/api/admin/mesh/settings")[1]["rateLimits"]["messages"][
                    "off"
                ]
                is True
            )
            page.get_by_role("button", name="Edit the messages limit", exact=True).click()
            page.get_by_role("button", name="Back to default", exact=True).click()
            expect(
                page.get_by_text(
                    "messages is back to the node's setting: 20 per 10 s, bursts of 150."
                )
            ).to_be_visible()
            rule = call(get, alice_user, "/api/admin/mesh/settings")[1]["rateLimits"]["messages"]
            assert rule["source"] == "settings"
            assert rule["count"] == 20
            alice.assert_clean(console=False)

            narrow = signed_in(browser, node.url, alice_user, width=380, height=800)
            for section in ("rules", "limits", "roles"):
                console(narrow, section)
                expect(narrow.page.locator(".console-section h2").first).to_be_visible()
                narrow.page.locator(".console-section .table-wrap").first.wait_for()
                width = narrow.page.evaluate("() => document.documentElement.scrollWidth")
                assert width <= 380, section
                shot(narrow.page, f"console-{section}-narrow")
            narrow.assert_clean()

    await in_browser(scenario)
