"""Apps and the app store over real sockets: CRUD, versions, permissions,
deployment, the ``/run`` page's headers, limits, and generation through the
model proxy against a real OpenAI-compatible upstream on loopback.

(The sandbox itself is proven in a real browser: test_app_sandbox.py.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from quart_mesh import Settings, create_app
from quart_mesh.config import Limits, ModelConfig
from tests.helpers import Mesh, User, assert_error
from tests.receiver import free_port
from tests.upstream import Upstream

pytestmark = pytest.mark.e2e

FIELDS = {
    "appId",
    "name",
    "description",
    "ownerId",
    "ownerName",
    "version",
    "deployed",
    "createdAt",
    "updatedAt",
    "runUrl",
}


@pytest.fixture
def settings(tmp_path: Path, upstream: Upstream) -> Settings:
    url = f"http://127.0.0.1:{upstream.port}/v1"
    return Settings(
        data_dir=tmp_path / "mesh-data",
        models=(
            ModelConfig("builder", url, "app-model"),
            ModelConfig("broken", url, "broken-model"),
            ModelConfig("slow", url, "hang-model"),
            ModelConfig("gone", f"http://127.0.0.1:{free_port()}/v1", "app-model"),
        ),
        model_timeout=1.0,
        limits=Limits(max_app_versions=3, max_apps_per_participant=4),
    )


async def create(mesh: Mesh, user: User, **body: Any) -> httpx.Response:
    body = {"name": "Counter", "html": "<h1>hi</h1>", **body}
    return await mesh.http.post("/api/apps", json=body, headers=user.headers)


async def test_crud_versions_and_permissions(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    carol = await mesh.register("carol")
    guest = await mesh.guest()

    r = await create(mesh, bob, description="counts", css="h1{color:red}", js="let n = 1;")
    assert r.status_code == 201, r.text
    app = r.json()
    assert set(app) == FIELDS | {"html", "css", "js"}
    app_id = app["appId"]
    assert (app["name"], app["description"], app["ownerId"], app["ownerName"]) == (
        "Counter",
        "counts",
        bob.participant_id,
        "bob",
    )
    assert (app["version"], app["deployed"]) == (1, False)
    assert app["runUrl"] == f"{base_url}/api/apps/{app_id}/run"

    # lists carry no source; members see their own, admins everyone's
    listed = (await mesh.http.get("/api/apps", headers=bob.headers)).json()
    assert [set(a) for a in listed] == [FIELDS]
    assert (await mesh.http.get("/api/apps", headers=carol.headers)).json() == []
    everyone = (await mesh.http.get("/api/apps", headers=owner.headers)).json()
    assert [a["appId"] for a in everyone] == [app_id]
    assert_error(await mesh.http.get("/api/apps"), 401, "unauthorized")

    got = (await mesh.http.get(f"/api/apps/{app_id}", headers=bob.headers)).json()
    assert (got["html"], got["css"], got["js"]) == ("<h1>hi</h1>", "h1{color:red}", "let n = 1;")

    # a new version keeps the parts not given
    r = await mesh.http.put(
        f"/api/apps/{app_id}/source", json={"css": "h1{color:blue}"}, headers=bob.headers
    )
    assert r.status_code == 200, r.text
    assert (r.json()["version"], r.json()["html"], r.json()["css"]) == (
        2,
        "<h1>hi</h1>",
        "h1{color:blue}",
    )
    versions = (await mesh.http.get(f"/api/apps/{app_id}/versions", headers=bob.headers)).json()
    assert [(v["version"], set(v)) for v in versions] == [
        (2, {"version", "createdAt", "size"}),
        (1, {"version", "createdAt", "size"}),
    ]
    assert versions[1]["size"] == len("<h1>hi</h1>h1{color:red}let n = 1;")
    first = (await mesh.http.get(f"/api/apps/{app_id}/versions/1", headers=bob.headers)).json()
    assert (first["version"], first["css"]) == (1, "h1{color:red}")
    for bad in ("9", "x", "-1", "1e3"):
        r = await mesh.http.get(f"/api/apps/{app_id}/versions/{bad}", headers=bob.headers)
        assert_error(r, 404, "version_not_found")

    # someone else's undeployed app does not exist for carol
    for method, path in [
        ("GET", f"/api/apps/{app_id}"),
        ("GET", f"/api/apps/{app_id}/versions"),
        ("GET", f"/api/apps/{app_id}/versions/1"),
        ("PUT", f"/api/apps/{app_id}/source"),
        ("POST", f"/api/apps/{app_id}/deploy"),
        ("POST", f"/api/apps/{app_id}/undeploy"),
        ("DELETE", f"/api/apps/{app_id}"),
    ]:
        r = await mesh.http.request(method, path, json={"html": "<p>x</p>"}, headers=carol.headers)
        assert_error(r, 404, "app_not_found")
    # guests read only
    assert_error(await create(mesh, guest), 403, "forbidden")
    assert_error(
        await mesh.http.post(f"/api/apps/{app_id}/deploy", headers=guest.headers), 403, "forbidden"
    )
    # an admin may change anyone's app
    r = await mesh.http.put(
        f"/api/apps/{app_id}/source", json={"html": "<h1>v3</h1>"}, headers=owner.headers
    )
    assert r.json()["version"] == 3

    # deploying puts it in the public app store
    assert (await mesh.http.get("/api/apps/deployed")).json() == []
    r = await mesh.http.post(f"/api/apps/{app_id}/deploy", headers=bob.headers)
    assert (r.status_code, r.json()["deployed"]) == (200, True)
    store = (await mesh.http.get("/api/apps/deployed")).json()
    assert store == [
        {
            "appId": app_id,
            "name": "Counter",
            "description": "counts",
            "author": "bob",
            "runUrl": f"{base_url}/api/apps/{app_id}/run",
            "updatedAt": r.json()["updatedAt"],
        }
    ]
    # a deployed app's current source is public anyway; its history is not
    r = await mesh.http.get(f"/api/apps/{app_id}", headers=carol.headers)
    assert r.json()["html"] == "<h1>v3</h1>"
    assert_error(await mesh.http.get(f"/api/apps/{app_id}/versions", headers=carol.headers), 404)
    assert_error(
        await mesh.http.put(
            f"/api/apps/{app_id}/source", json={"html": "<p>mine</p>"}, headers=carol.headers
        ),
        404,
        "app_not_found",
    )
    r = await mesh.http.post(f"/api/apps/{app_id}/undeploy", headers=owner.headers)
    assert r.json()["deployed"] is False
    assert (await mesh.http.get("/api/apps/deployed")).json() == []

    r = await mesh.http.delete(f"/api/apps/{app_id}", headers=bob.headers)
    assert r.json() == {"ok": True, "appId": app_id}
    assert_error(await mesh.http.get(f"/api/apps/{app_id}", headers=bob.headers), 404)
    assert_error(await mesh.http.get(f"/api/apps/{app_id}/run"), 404, "app_not_found")


async def test_run_page_headers_and_preview(base_url: str, mesh: Mesh) -> None:
    await mesh.setup()
    bob = await mesh.register("bob")
    carol = await mesh.register("carol")
    js = "document.body.dataset.ran = 'yes'; const s = '</script><b>x</b>';"
    app = (await create(mesh, bob, css="h1 { color: teal }", js=js)).json()
    run = f"/api/apps/{app['appId']}/run"

    # undeployed: only the author (or an admin) previews it, with the header
    assert_error(await mesh.http.get(run), 404, "app_not_found")
    assert_error(await mesh.http.get(run, headers=carol.headers), 404, "app_not_found")
    bad = {"Authorization": "Bearer nope"}
    assert_error(await mesh.http.get(run, headers=bad), 404, "app_not_found")
    # a token in the URL is not a way in (it would leak through logs and Referer)
    assert_error(await mesh.http.get(run, params={"token": bob.token}), 404, "app_not_found")
    preview = await mesh.http.get(run, headers=bob.headers)
    assert preview.status_code == 200, preview.text

    await mesh.http.post(f"/api/apps/{app['appId']}/deploy", headers=bob.headers)
    r = await mesh.http.get(run)
    assert r.status_code == 200
    assert r.text == preview.text
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    csp = [d.strip() for d in r.headers["content-security-policy"].split(";")]
    sandbox = csp[0].split()
    assert sandbox[0] == "sandbox"
    assert "allow-scripts" in sandbox
    assert "allow-same-origin" not in r.headers["content-security-policy"]
    assert "allow-top-navigation" not in r.headers["content-security-policy"]
    assert "connect-src 'none'" in csp
    assert "default-src 'none'" in csp
    assert "frame-ancestors 'self'" in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "no-referrer"
    assert r.headers["cache-control"] == "no-store"
    assert "set-cookie" not in r.headers

    page = r.text
    assert page.startswith("<!doctype html>")
    assert "<title>Counter</title>" in page
    assert "<style>\nh1 { color: teal }\n</style>" in page
    assert "<h1>hi</h1>" in page
    # the app's own "</script" cannot end its script element early
    assert "const s = '<\\/script><b>x</b>';\n</script>" in page
    assert page.count("</script>") == 1

    # a whole document gets the css and js put inside it
    doc = "<!DOCTYPE html><html><head><title>Mine</title></head><body><p>x</p></body></html>"
    other = (await create(mesh, bob, html=doc, css="p{}", js="1;")).json()
    r = await mesh.http.get(f"/api/apps/{other['appId']}/run", headers=bob.headers)
    assert r.text == (
        "<!DOCTYPE html><html><head><title>Mine</title><style>\np{}\n</style>\n</head>"
        "<body><p>x</p><script>\n1;\n</script>\n</body></html>"
    )
    assert_error(await mesh.http.get("/api/apps/nope/run"), 404, "app_not_found")
    assert_error(await mesh.http.post(run), 405, "method_not_allowed")


async def test_limits_and_bad_input(base_url: str, mesh: Mesh, settings: Settings) -> None:
    await mesh.setup()
    bob = await mesh.register("bob")
    for body, status, code in [
        ({"name": ""}, 400, "invalid_name"),
        ({"name": "  "}, 400, "invalid_name"),
        ({"name": "x" * 101}, 400, "invalid_name"),
        ({"name": "a\nb"}, 400, "invalid_name"),
        ({"name": 5}, 400, "invalid_field"),
        ({"html": None}, 400, "missing_field"),
        ({"html": " "}, 400, "empty_source"),
        ({"html": ["x"]}, 400, "invalid_field"),
        ({"js": "\x00"}, 400, "invalid_source"),
        ({"description": "d" * 2001}, 400, "invalid_description"),
    ]:
        assert_error(await create(mesh, bob, **body), status, code)
    assert_error(await mesh.http.post("/api/apps", json={"html": "x"}, headers=bob.headers), 400)

    limit = settings.limits.max_app_source_bytes
    # over the source limit (a body well within max_app_body_bytes)
    r = await create(mesh, bob, html="<p>" + "é" * (limit // 2) + "</p>")
    assert_error(r, 413, "source_too_large")
    # exactly at the limit is fine, though the body is over max_body_bytes
    r = await create(mesh, bob, html="h" * (limit - 2), css="c", js="j")
    assert r.status_code == 201, r.text
    big = r.json()
    r = await mesh.http.put(
        f"/api/apps/{big['appId']}/source", json={"js": "jj"}, headers=bob.headers
    )
    assert_error(r, 413, "source_too_large")
    # over max_app_body_bytes: refused as a body
    r = await create(mesh, bob, html="x" * settings.limits.max_app_body_bytes)
    assert_error(r, 413, "too_large")

    # versions beyond max_app_versions (3) drop the oldest
    app = (await create(mesh, bob)).json()
    path = f"/api/apps/{app['appId']}"
    for n in range(2, 6):
        r = await mesh.http.put(f"{path}/source", json={"html": f"<p>{n}</p>"}, headers=bob.headers)
        assert r.json()["version"] == n
    versions = (await mesh.http.get(f"{path}/versions", headers=bob.headers)).json()
    assert [v["version"] for v in versions] == [5, 4, 3]
    assert_error(await mesh.http.get(f"{path}/versions/1", headers=bob.headers), 404)
    assert_error(
        await mesh.http.put(f"{path}/source", json={}, headers=bob.headers), 400, "missing_field"
    )
    assert_error(
        await mesh.http.put(f"{path}/source", json={"html": ""}, headers=bob.headers),
        400,
        "empty_source",
    )
    # max_apps_per_participant (4): bob owns two; two more, then no more
    for _ in range(2):
        assert (await create(mesh, bob)).status_code == 201
    assert_error(await create(mesh, bob), 409, "too_many_apps")
    assert_error(
        await mesh.http.get("/api/apps/01ZZZZZZZZZZZZZZZZZZZZZZZZ", headers=bob.headers), 404
    )
    assert_error(await mesh.http.get("/api/apps/x/versions", headers=bob.headers), 404)


async def generate(mesh: Mesh, user: User, **body: Any) -> httpx.Response:
    return await mesh.http.post("/api/apps/generate", json=body, headers=user.headers)


async def test_generate(base_url: str, mesh: Mesh, upstream: Upstream) -> None:
    owner = await mesh.setup()
    bob = await mesh.register("bob")

    # fenced html, css and javascript blocks; the first configured model by default
    r = await generate(mesh, bob, prompt="a counter")
    assert r.status_code == 201, r.text
    app = r.json()
    assert set(app) == FIELDS | {"html", "css", "js"}
    assert (app["name"], app["description"], app["version"], app["deployed"]) == (
        "a counter",
        "a counter",
        1,
        False,
    )
    assert app["html"] == '<h1>Counter</h1><button id="c">0</button>'
    assert app["css"] == "button { color: teal; }"
    assert app["js"] == "c.onclick = () => { c.textContent = +c.textContent + 1; };"
    seen = upstream.requests[-1].body
    assert seen["model"] == "app-model"
    assert seen["stream"] is False
    assert seen["messages"][0]["role"] == "system"
    assert "self-contained" in seen["messages"][0]["content"]
    assert seen["messages"][-1] == {"role": "user", "content": "a counter"}

    # a JSON object, with the model's name for the app
    r = await generate(mesh, bob, prompt="as json please", model="builder")
    assert r.status_code == 201, r.text
    assert (r.json()["name"], r.json()["html"]) == ("Json Counter", '<button id="b">0</button>')
    assert r.json()["css"] == "button { font-size: 2em; }"
    # one fenced document; a name given wins
    r = await generate(mesh, bob, prompt="a document", name="My doc")
    assert (r.json()["name"], r.json()["css"], r.json()["js"]) == ("My doc", "", "")
    assert r.json()["html"].startswith("<!DOCTYPE html><html><head><title>Doc</title>")
    assert "Enjoy" not in r.json()["html"]
    run = await mesh.http.get(r.json()["runUrl"], headers=bob.headers)
    assert "<h1 id=t>Doc app</h1>" in run.text

    mine = (await mesh.http.get("/api/apps", headers=bob.headers)).json()
    assert len(mine) == 3
    assert (await mesh.http.get("/api/apps/deployed")).json() == []
    usage = (await mesh.http.get("/api/models/usage", headers=owner.headers)).json()
    # generating counts as the caller's use of the model
    assert {(u["participantId"], u["model"]) for u in usage} == {(bob.participant_id, "builder")}


async def test_generate_errors(base_url: str, mesh: Mesh) -> None:
    await mesh.setup()
    bob = await mesh.register("bob")
    guest = await mesh.guest()
    for body, status, code in [
        ({}, 400, "missing_field"),
        ({"prompt": " "}, 400, "invalid_prompt"),
        ({"prompt": "x" * 8001}, 400, "invalid_prompt"),
        ({"prompt": "x", "model": 3}, 400, "invalid_field"),
        ({"prompt": "x", "name": ""}, 400, "invalid_name"),
        ({"prompt": "x", "model": "nope"}, 400, "model_not_found"),
        ({"prompt": "x", "model": "gone"}, 502, "upstream_unreachable"),
        ({"prompt": "x", "model": "broken"}, 502, "upstream_error"),
        ({"prompt": "say nothing"}, 502, "no_app_in_answer"),
        ({"prompt": "x", "model": "slow"}, 504, "upstream_timeout"),
    ]:
        r = await generate(mesh, bob, **body)
        assert_error(r, status, code)
        assert "GPU" not in r.text or code == "upstream_error"
    assert_error(await generate(mesh, guest, prompt="x"), 403, "forbidden")
    assert (await mesh.http.get("/api/apps", headers=bob.headers)).json() == []


async def test_generate_without_models(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path / "plain"))
    async with app.test_app():
        client = app.test_client()
        r = await client.post(
            "/api/setup/init",
            json={"name": "owner", "password": "correct horse battery", "meshName": "m"},
        )
        headers = {"Authorization": "Bearer " + (await r.get_json())["token"]}
        r = await client.post("/api/apps/generate", json={"prompt": "x"}, headers=headers)
        assert r.status_code == 400
        assert (await r.get_json())["code"] == "no_model"
