"""The ``/run`` sandbox, proven in a real headless browser (Debian's chromium,
driven by Playwright's sync API in a worker thread: Playwright's async API
needs asyncio, these tests run under trio).

Before the app opens, a page of the node's own origin stores a secret in
``localStorage`` and a cookie. The app (deployed, served top-level and in an
iframe on a node page) then tries to read them and to call the node's API
with a real token baked into its source. It must run (it changes the page)
but in an opaque origin: no storage, no cookies, no network, no reach into
the embedding page. The node's own request log shows nothing reached the API.

Chromium missing: skipped, unless ``MESH_REQUIRE_BROWSER=1`` (CI), then failed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import trio
from quart import request

from quart_mesh import Settings, create_app, serve
from tests.browser import ARGS, CHROMIUM
from tests.helpers import Mesh

pytestmark = pytest.mark.e2e


@dataclass
class Served:
    url: str
    http: httpx.AsyncClient
    #: (path, Authorization header, User-Agent) of every request the node got
    seen: list[tuple[str, str, str]] = field(default_factory=list)


@pytest.fixture
async def served(settings: Settings, nursery: trio.Nursery) -> AsyncIterator[Served]:
    app = create_app(settings)
    seen: list[tuple[str, str, str]] = []

    @app.before_request
    async def _log() -> None:
        seen.append(
            (
                request.path,
                request.headers.get("Authorization", ""),
                request.headers.get("User-Agent", ""),
            )
        )

    url: str = await nursery.start(lambda task_status: serve(app, port=0, task_status=task_status))
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        yield Served(url, http, seen)


#: the app's script: records what it could and could not do, in the DOM
APP_JS = """
const out = {};
document.body.dataset.ran = "yes";
document.getElementById("title").textContent = "changed by script";
out.origin = String(self.origin);
try { out.storage = String(localStorage.getItem("secret")); }
catch (e) { out.storage = "error:" + e.name; }
try { out.cookie = String(document.cookie); }
catch (e) { out.cookie = "error:" + e.name; }
try { out.parent = String(window.parent.document.title); }
catch (e) { out.parent = "error:" + e.name; }
try { out.parentStorage = String(window.parent.localStorage.getItem("secret")); }
catch (e) { out.parentStorage = "error:" + e.name; }
try { out.beacon = String(navigator.sendBeacon("/api/auth/me?via=beacon", "x")); }
catch (e) { out.beacon = "error:" + e.name; }
const img = new Image();
img.src = "/api/auth/me?via=img";
(async () => {
  try {
    const r = await fetch("/api/auth/me", {headers: {Authorization: "Bearer __TOKEN__"}});
    out.fetch = "status:" + r.status + ":" + (await r.text());
  } catch (e) { out.fetch = "error:" + e.name; }
  try {
    const r = await fetch("__BASE__/api/auth/me", {
      headers: {Authorization: "Bearer __TOKEN__"}, mode: "cors"});
    out.fetchAbsolute = "status:" + r.status;
  } catch (e) { out.fetchAbsolute = "error:" + e.name; }
  document.getElementById("out").textContent = JSON.stringify(out);
  document.body.dataset.done = "yes";
})();
"""


def browse(base: str, run_url: str) -> dict[str, Any]:
    """Everything the browser saw (runs in a worker thread: blocking)."""
    from playwright.sync_api import sync_playwright

    result: dict[str, Any] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            context = browser.new_context()
            context.set_default_timeout(15_000)
            page = context.new_page()
            console: list[str] = []
            page.on("console", lambda message: console.append(message.text))

            # the node's origin holds a secret and a cookie
            page.goto(f"{base}/api/health")
            result["node_storage"] = page.evaluate(
                "() => { localStorage.setItem('secret', 's3cret');"
                " document.cookie = 'session=c00kie; path=/';"
                " return [localStorage.getItem('secret'), document.cookie]; }"
            )

            # the app, top-level
            response = page.goto(run_url)
            assert response is not None
            result["status"] = response.status
            page.wait_for_selector("body[data-done=yes]")
            result["top"] = json.loads(page.inner_text("#out"))
            result["title"] = page.inner_text("#title")

            # the app in an iframe on a page of the node's own origin
            page.goto(f"{base}/api/health")
            page.evaluate(
                "url => { const f = document.createElement('iframe'); f.id = 'app';"
                " f.src = url; document.body.appendChild(f); }",
                run_url,
            )
            page.wait_for_function("() => document.getElementById('app') !== null")
            frame = None
            for _ in range(150):
                frame = next((f for f in page.frames if f.url == run_url), None)
                if frame is not None:
                    break
                page.wait_for_timeout(100)
            assert frame is not None, [f.url for f in page.frames]
            frame.wait_for_selector("body[data-done=yes]")
            result["framed"] = json.loads(frame.inner_text("#out"))
            # nor can the embedding page reach into the app
            result["parent_sees"] = page.evaluate(
                "() => { const f = document.getElementById('app');"
                " try { return String(f.contentDocument); }"
                " catch (e) { return 'error:' + e.name; } }"
            )
            result["node_storage_after"] = page.evaluate("() => localStorage.getItem('secret')")
            result["console"] = console
        finally:
            browser.close()
    return result


async def test_app_runs_sandboxed_in_a_real_browser(browser_ready: None, served: Served) -> None:
    mesh = Mesh(served.http)
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    js = APP_JS.replace("__TOKEN__", owner.token).replace("__BASE__", served.url)
    html = '<h1 id="title">sandboxed</h1><pre id="out"></pre>'
    r = await served.http.post(
        "/api/apps", json={"name": "Probe", "html": html, "js": js}, headers=bob.headers
    )
    assert r.status_code == 201, r.text
    app = r.json()
    r = await served.http.post(f"/api/apps/{app['appId']}/deploy", headers=bob.headers)
    assert r.status_code == 200, r.text
    served.seen.clear()

    with trio.fail_after(50):
        seen = await trio.to_thread.run_sync(browse, served.url, app["runUrl"])

    # the secret really is there on the node's origin
    assert seen["node_storage"] == ["s3cret", "session=c00kie"]
    assert seen["status"] == 200
    for where in ("top", "framed"):
        out = seen[where]
        assert out["origin"] == "null", (where, out)  # an opaque origin
        assert out["storage"].startswith("error:SecurityError"), (where, out)
        assert out["cookie"].startswith("error:SecurityError"), (where, out)
        assert out["fetch"].startswith("error:"), (where, out)  # blocked by connect-src
        assert out["fetchAbsolute"].startswith("error:"), (where, out)
        # sendBeacon only queues (it answers true); CSP drops it later, which
        # the node's request log below shows
        assert "s3cret" not in json.dumps(out)
    assert seen["title"] == "changed by script"
    assert seen["framed"]["parent"].startswith("error:SecurityError"), seen["framed"]
    assert seen["framed"]["parentStorage"].startswith("error:SecurityError"), seen["framed"]
    assert seen["parent_sees"] == "null"
    assert seen["node_storage_after"] == "s3cret"

    # the node never got a request to its API from the app: the browser asked
    # only for the pages it was sent to (and maybe the favicon)
    paths = {path for path, _, _ in served.seen}
    assert paths <= {"/api/health", f"/api/apps/{app['appId']}/run", "/favicon.ico"}, paths
    assert all(owner.token not in auth for _, auth, _ in served.seen)
