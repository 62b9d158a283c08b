"""The Apps view (``js/apps.js``): the app store, my apps, the source editor
(create, save a version, deploy, run in a sandboxed frame, load an old
version, undeploy, delete), generating an app from a prompt through a fake
upstream (progress, cancel, the node's errors), what a member may do with
someone else's app, and the frame's sandbox: an app's script cannot reach
the page, the token or the node's API."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from playwright.sync_api import expect

from quart_mesh.config import ModelConfig
from tests.browser import Person, call, chromium, in_browser, shot
from tests.upstream import Upstream
from tests.web.conftest import Served
from tests.web.test_accessibility import violations
from tests.web.test_chat import signed_in, two_people
from tests.web.test_panels import mesh_links

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]


def open_apps(person: Person) -> None:
    mesh_links(person).filter(has_text=re.compile("^Apps$")).click()
    expect(person.heading("Apps", level=1)).to_be_visible()


def frame_of(person: Person, name: str) -> Any:
    return person.page.frame_locator(f'iframe[title="App: {name}"]')


def said(person: Person) -> Any:
    """The editor's status line."""
    form = person.page.get_by_role("form", name=re.compile("^(Edit|New app)"))
    return form.get_by_role("status")


async def node_with_models(serve_node: Any, upstream: Upstream) -> Served:
    url = f"http://127.0.0.1:{upstream.port}/v1"
    return await serve_node(  # type: ignore[no-any-return]
        models=(
            ModelConfig("builder", url, "app-model"),
            ModelConfig("broken", url, "broken-model"),
            ModelConfig("slow", url, "hang-model"),
        ),
        model_timeout=60.0,
    )


async def test_create_edit_deploy_run_and_delete(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    alice_user, _, _ = await two_people(node)

    async def app_state(app_id: str) -> tuple[int, dict[str, Any]]:
        r = await node.mesh.http.get(f"/api/apps/{app_id}", headers=alice_user.headers)
        return r.status_code, r.json()

    def app_id_of(person: Person) -> str:
        match = re.search(r"#apps/([0-9A-Z]{26})$", person.page.url)
        assert match, person.page.url
        return match.group(1)

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            expect(alice.heading("#Town Square")).to_be_visible()
            open_apps(alice)
            expect(alice.page.get_by_text("No app is deployed yet.")).to_be_visible()
            expect(alice.page.get_by_text("You have no app yet")).to_be_visible()
            # no model on this node: nothing to generate with, and it says so
            expect(alice.button("Generate")).to_be_disabled()
            expect(alice.page.get_by_text("No model is configured on this node")).to_be_visible()

            # a new app: the name is required
            alice.button("New app").click()
            expect(alice.heading("New app")).to_be_visible()
            alice.button("Create").click()
            expect(alice.page.get_by_role("alert")).to_have_text("Give the app a name.")
            alice.textbox("Name").fill("Greeter")
            alice.textbox("Description (optional)").fill("says hello")
            alice.textbox("HTML").fill('<h1 id="t">Hello from the frame</h1>')
            alice.button("Create").click()
            expect(alice.heading("Edit “Greeter”")).to_be_visible()
            expect(said(alice)).to_have_text("Created as a draft (version 1).")
            expect(alice.page.get_by_text(re.compile(r"^Version 1 · draft"))).to_be_visible()
            app_id = app_id_of(alice)
            status, stored = call(app_state, app_id)
            assert status == 200
            assert stored["version"] == 1
            assert not stored["deployed"]
            assert stored["html"] == '<h1 id="t">Hello from the frame</h1>'

            # a draft is not run here
            expect(alice.button("Run")).to_have_count(0)

            # save a new version with a script
            alice.textbox("JavaScript").fill(
                "document.getElementById('t').textContent += ' (scripted)';"
            )
            alice.button("Save").click()
            expect(said(alice)).to_have_text("Saved as version 2.")
            versions = alice.page.get_by_role("table", name=re.compile("saved versions"))
            expect(versions.get_by_role("row")).to_have_count(3)  # the heading row + 2
            assert call(app_state, app_id)[1]["version"] == 2
            alice.heading("Apps", level=1).scroll_into_view_if_needed()
            shot(alice.page, "app-editor")

            # deploy, then run it in the frame
            alice.button("Deploy").click()
            expect(said(alice)).to_have_text("Deployed: it is in the app store.")
            assert call(app_state, app_id)[1]["deployed"] is True
            alice.button("Run").click()
            expect(alice.heading("Greeter", level=2)).to_be_visible()
            frame = frame_of(alice, "Greeter")
            expect(
                frame.get_by_role("heading", name="Hello from the frame (scripted)")
            ).to_be_visible()
            iframe = alice.page.locator('iframe[title="App: Greeter"]')
            expect(iframe).to_have_attribute("sandbox", "allow-scripts")
            expect(iframe).to_have_attribute("src", f"/api/apps/{app_id}/run")
            shot(alice.page, "app-running")
            assert violations(alice) == []

            # the store lists it
            alice.page.get_by_role("link", name="← All apps").click()
            store = alice.page.get_by_role("list", name="1 deployed app")
            row = store.get_by_role("listitem").filter(has_text="Greeter")
            expect(row).to_contain_text("says hello")
            expect(row).to_contain_text("alice")
            mine = alice.page.get_by_role("table", name="Your 1 app")
            expect(mine.get_by_role("row").filter(has_text="Greeter")).to_contain_text("Deployed")
            shot(alice.page, "apps")
            assert violations(alice) == []

            # an old version loaded and saved again becomes version 3
            alice.button("Edit Greeter").first.click()
            expect(alice.heading("Versions")).to_be_visible()
            expect(alice.button("Load version 1")).to_be_visible()
            assert violations(alice) == []
            alice.button("Load version 1").click()
            expect(alice.textbox("JavaScript")).to_have_value("")
            alice.button("Save").click()
            expect(said(alice)).to_have_text("Saved as version 3.")
            assert call(app_state, app_id)[1]["js"] == ""

            # undeploy: out of the store
            alice.button("Undeploy").click()
            expect(said(alice)).to_have_text("Undeployed: it is a draft again.")
            assert call(app_state, app_id)[1]["deployed"] is False

            # delete asks first; cancelling keeps it
            alice.button("Delete").click()
            dialog = alice.page.get_by_role("dialog", name="Delete this app?")
            expect(dialog).to_contain_text("“Greeter” and all its versions will be deleted")
            dialog.get_by_role("button", name="Cancel").click()
            assert call(app_state, app_id)[0] == 200
            alice.button("Delete").click()
            dialog.get_by_role("button", name="Delete app").click()
            expect(alice.page.get_by_text("You have no app yet")).to_be_visible()
            assert call(app_state, app_id)[0] == 404
            alice.assert_clean()

    await in_browser(scenario)


async def test_generate_from_a_prompt(
    browser_ready: None, serve_node: Any, upstream: Upstream
) -> None:
    node = await node_with_models(serve_node, upstream)
    alice_user, _, _ = await two_people(node)

    async def apps() -> list[dict[str, Any]]:
        r = await node.mesh.http.get("/api/apps", headers=alice_user.headers)
        return r.json()  # type: ignore[no-any-return]

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            expect(alice.heading("#Town Square")).to_be_visible()
            open_apps(alice)
            model = alice.page.get_by_role("combobox", name="Model")
            expect(model.get_by_role("option")).to_have_text(
                ["The node's default model", "broken", "builder", "slow"]
            )

            # the prompt is required
            alice.button("Generate").click()
            expect(alice.page.get_by_role("alert")).to_have_text("Describe the app you want.")

            # a model that never answers: progress, then cancelled
            alice.textbox("Describe the app").fill("a counter that never comes")
            model.select_option("slow")
            alice.button("Generate").click()
            status = alice.page.get_by_role("status").filter(has_text="Generat")
            expect(status).to_have_text(re.compile(r"^Generating… \d+ s$"))
            expect(alice.button("Generate")).to_be_disabled()
            expect(status).to_have_text(re.compile(r"^Generating… [1-9]\d* s$"))  # it counts
            shot(alice.page, "app-generate")
            assert violations(alice) == []
            alice.button("Cancel").click()
            expect(alice.page.get_by_text("Generation cancelled.")).to_be_visible()
            expect(alice.button("Generate")).to_be_enabled()
            expect(alice.button("Cancel")).to_be_hidden()
            assert call(apps) == []

            # an upstream failure: the node's message
            model.select_option("broken")
            alice.textbox("Describe the app").fill("a counter")
            alice.button("Generate").click()
            expect(alice.page.get_by_role("alert")).to_have_text(
                re.compile(r"^Generation failed: the model failed: .+")
            )
            assert call(apps) == []

            # a real answer: a draft app opens in the editor, and runs once deployed
            model.select_option("builder")
            alice.textbox("Name (optional)").fill("Clicks")
            alice.button("Generate").click()
            expect(alice.heading("Edit “Clicks”")).to_be_visible()
            expect(said(alice)).to_have_text(re.compile(r"^Generated in \d+ s as a draft"))
            expect(alice.textbox("HTML")).to_have_value(re.compile("<h1>Counter</h1>"))
            expect(alice.textbox("JavaScript")).to_have_value(re.compile("onclick"))
            made = call(apps)
            assert [(a["name"], a["description"], a["deployed"]) for a in made] == [
                ("Clicks", "a counter", False)
            ]
            alice.button("Deploy").click()
            alice.button("Run").click()
            counter = frame_of(alice, "Clicks").get_by_role("button", name="0")
            counter.click()
            expect(frame_of(alice, "Clicks").get_by_role("button", name="1")).to_be_visible()
            alice.assert_clean(console=False)  # the failed generation was a 502

    await in_browser(scenario)


#: the app's script: what it can reach of the page, the token and the API
PROBE_JS = """
const out = {};
out.origin = String(self.origin);
try { out.token = String(localStorage.getItem("mesh.token")); }
catch (e) { out.token = "error:" + e.name; }
try { out.parent = String(parent.document.title); }
catch (e) { out.parent = "error:" + e.name; }
try { out.parentStorage = String(parent.localStorage.getItem("mesh.token")); }
catch (e) { out.parentStorage = "error:" + e.name; }
try { out.parentApp = typeof parent.app; }
catch (e) { out.parentApp = "error:" + e.name; }
(async () => {
  try {
    const r = await fetch("/api/auth/me?from=app");
    out.fetch = "status:" + r.status + ":" + (await r.text());
  } catch (e) { out.fetch = "error:" + e.name; }
  try {
    const r = await fetch("/api/apps?from=app", {credentials: "include"});
    out.fetchApps = "status:" + r.status;
  } catch (e) { out.fetchApps = "error:" + e.name; }
  document.getElementById("out").textContent = JSON.stringify(out);
  document.body.dataset.done = "yes";
})();
"""


async def test_a_member_sees_the_store_and_apps_run_sandboxed(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, _ = await two_people(node)
    r = await node.mesh.http.post(
        "/api/apps",
        json={
            "name": "Probe",
            "description": "tries to get out",
            "html": '<h1>Probe</h1><pre id="out"></pre>',
            "js": PROBE_JS,
        },
        headers=alice_user.headers,
    )
    assert r.status_code == 201, r.text
    probe = r.json()
    r = await node.mesh.http.post(f"/api/apps/{probe['appId']}/deploy", headers=alice_user.headers)
    assert r.status_code == 200, r.text

    async def unchanged() -> dict[str, Any]:
        r = await node.mesh.http.get(f"/api/apps/{probe['appId']}", headers=alice_user.headers)
        return r.json()  # type: ignore[no-any-return]

    def scenario() -> None:
        with chromium() as browser:
            bob = signed_in(browser, node.url, bob_user, color_scheme="dark")
            expect(bob.heading("#Town Square")).to_be_visible()
            open_apps(bob)
            store = bob.page.get_by_role("list", name="1 deployed app")
            row = store.get_by_role("listitem").filter(has_text="Probe")
            expect(row).to_contain_text("alice")
            expect(row.get_by_role("button", name="Run Probe")).to_be_visible()
            # not his: no Edit, and not among his apps
            expect(bob.button("Edit Probe")).to_have_count(0)
            expect(bob.page.get_by_text("You have no app yet")).to_be_visible()

            # its address shows the source, read-only, with nothing to manage
            bob.page.goto(f"{node.url}/#apps/{probe['appId']}")
            expect(bob.heading("Edit “Probe”")).to_be_visible()
            expect(bob.page.get_by_text("You may read this app's source")).to_be_visible()
            expect(bob.textbox("JavaScript")).not_to_be_editable()
            for name in ("Save", "Deploy", "Undeploy", "Delete"):
                expect(bob.button(name)).to_have_count(0)
            expect(bob.heading("Versions")).to_have_count(0)

            assert violations(bob) == []  # in the dark theme

            # run it: it runs, but reaches nothing
            bob.button("Run").click()
            frame = frame_of(bob, "Probe")
            expect(frame.get_by_role("heading", name="Probe")).to_be_visible()
            assert violations(bob) == []
            expect(frame.locator("body[data-done=yes]")).to_be_attached()
            out = json.loads(frame.locator("#out").inner_text())
            assert out["origin"] == "null", out
            assert out["token"] == "error:SecurityError", out
            assert out["parent"] == "error:SecurityError", out
            assert out["parentStorage"] == "error:SecurityError", out
            assert out["parentApp"] == "error:SecurityError", out
            assert out["fetch"].startswith("error:"), out  # connect-src 'none'
            assert out["fetchApps"].startswith("error:"), out
            token = bob.token()
            assert token
            assert token not in json.dumps(out)
            # nothing left the frame for the node's API (the frame's own
            # requests are seen here: its page was)
            assert any(url.endswith(f"/api/apps/{probe['appId']}/run") for url in bob.requests)
            assert not [url for url in bob.requests if "from=app" in url], bob.requests
            # nor can this page reach into the app
            assert (
                bob.page.evaluate(
                    "() => String(document.querySelector('iframe.app-frame').contentDocument)"
                )
                == "null"
            )
            # bob is still signed in, the page unharmed
            expect(bob.button("Sign out")).to_be_visible()
            bob.assert_clean(console=False)  # the frame's blocked requests log errors

            # at 380 px: the store and a running app fit
            narrow = Person(browser, node.url, width=380, height=800)
            narrow.open()
            narrow.sign_in(bob_user.name)
            narrow.page.goto(f"{node.url}/#apps")
            expect(narrow.heading("App store")).to_be_visible()
            expect(narrow.page.get_by_role("list", name="1 deployed app")).to_be_visible()
            assert narrow.page.evaluate(
                "() => document.documentElement.scrollWidth <= window.innerWidth"
            )
            shot(narrow.page, "apps-narrow")
            assert violations(narrow) == []
            narrow.page.goto(f"{node.url}/#apps/{probe['appId']}")
            expect(narrow.heading("Edit “Probe”")).to_be_visible()
            assert narrow.page.evaluate(
                "() => document.documentElement.scrollWidth <= window.innerWidth"
            )
            assert violations(narrow) == []
            narrow.page.goto(f"{node.url}/#apps/run/{probe['appId']}")
            expect(frame_of(narrow, "Probe").locator("body[data-done=yes]")).to_be_attached()
            assert narrow.page.evaluate(
                "() => document.documentElement.scrollWidth <= window.innerWidth"
            )
            narrow.assert_clean(console=False)

    await in_browser(scenario)
    # bob changed nothing of alice's app
    after = await unchanged()
    assert (after["version"], after["deployed"]) == (1, True)
