"""Uploads can never be script, on a served node (decision 0056): whatever a
browser could run as a script, a module, a worker, WebAssembly or a document
is recorded and served as ``application/octet-stream``, as an attachment,
under ``nosniff`` and a sandbox CSP; what is shown inline (images, PDF, text,
JSON) is sandboxed too. Real Chromium then refuses to run an uploaded script
from a page on the node's own origin.

Loopback only, port 0, a time cap on every test.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest

from quart_mesh import Settings
from quart_mesh.ids import new_id
from quart_mesh.records import Upload, now_ms
from quart_mesh.store import Database
from quart_mesh.store import uploads as uploads_repo
from tests.browser import chromium, in_browser
from tests.helpers import Mesh, User

pytestmark = pytest.mark.e2e

INERT = "application/octet-stream"
CSP_ATTACHMENT = "sandbox; default-src 'none'"
CSP_INLINE = (
    "sandbox; default-src 'none'; img-src 'self'; media-src 'self'; style-src 'unsafe-inline'"
)
SCRIPT = b"globalThis.__pwned = 'ran'; if (typeof document === 'undefined') postMessage('ran');"
WASM = b"\x00asm\x01\x00\x00\x00"  # an empty, valid WebAssembly module
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(64))

#: (client name, bytes, client type, stored extension): all served inert
EXECUTABLE: list[tuple[str, bytes, str, str]] = [
    ("app.js", SCRIPT, "text/javascript", "js"),
    ("app.js", SCRIPT, "application/octet-stream", "js"),  # by the name alone
    ("mod.mjs", b"export default 1;", "text/plain", "js"),
    ("lib.cjs", SCRIPT, "application/x-javascript", "js"),
    ("worker.js", SCRIPT, "image/png", "js"),  # a script that claims to be a PNG
    ("noname", SCRIPT, "application/ecmascript", "js"),  # by the type alone
    ("noname", SCRIPT, "text/jscript", "js"),
    ("noname", SCRIPT, "module", "js"),
    ("m.wasm", WASM, "application/wasm", "wasm"),
    ("m.bin", WASM, "application/octet-stream", "wasm"),  # known by its magic bytes
    ("page.html", b"<!doctype html><script>alert(1)</script>", "text/html", "html"),
    ("page.htm", b"hello", "text/plain", "html"),
    ("page.xhtml", b"<html><body/></html>", "application/xhtml+xml", "html"),
    ("notes.txt", b"<script>alert(1)</script>", "text/plain", "html"),  # sniffed
    ("pic.svg", b'<svg xmlns="http://www.w3.org/2000/svg"><script>1</script></svg>',
     "image/svg+xml", "svg"),
    ("pic.png", b'<svg xmlns="http://www.w3.org/2000/svg"/>', "image/png", "svg"),
    ("feed.xml", b'<?xml version="1.0"?><rss/>', "text/xml", "xml"),
    ("style.xsl", b"<xsl:stylesheet/>", "application/xslt+xml", "xml"),
    ("data.bin", os.urandom(64) + b"\x00", "application/octet-stream", "bin"),
]  # fmt: skip

#: (client name, bytes, client type, served type, disposition)
PASSIVE: list[tuple[str, bytes, str, str, str]] = [
    ("dot.png", PNG, "image/png", "image/png", "inline"),
    ("x.gif", b"GIF89a" + bytes(20), "image/gif", "image/gif", "inline"),
    ("x.jpg", b"\xff\xd8\xff\xe0" + bytes(20), "image/jpeg", "image/jpeg", "inline"),
    ("x.webp", b"RIFF\x00\x00\x00\x00WEBPVP8 ", "image/webp", "image/webp", "inline"),
    ("doc.pdf", b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n", "application/pdf", "application/pdf", "inline"),
    ("a.txt", b"just words", "text/plain", "text/plain; charset=utf-8", "inline"),
    ("a.json", b'{"a": 1}', "application/json", "application/json", "inline"),
    ("a.zip", b"PK\x03\x04" + bytes(26), "application/zip", "application/zip", "attachment"),
]


async def _upload(mesh: Mesh, user: User, name: str, data: bytes, ctype: str) -> dict[str, Any]:
    r = await mesh.http.post(
        "/api/upload", files={"file": (name, data, ctype)}, headers=user.headers
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


def _assert_inert(r: httpx.Response, what: object) -> None:
    h = r.headers
    assert r.status_code == 200, what
    assert h["content-type"] == INERT, what
    assert h["content-disposition"].startswith("attachment;"), what
    assert h["x-content-type-options"] == "nosniff", what
    assert h["content-security-policy"] == CSP_ATTACHMENT, what


async def test_what_a_browser_could_run_is_served_inert(mesh: Mesh) -> None:
    owner = await mesh.setup()
    for name, data, claimed, ext in EXECUTABLE:
        case = (name, claimed)
        body = await _upload(mesh, owner, name, data, claimed)
        assert body["contentType"] == INERT, case
        assert body["url"].endswith("." + ext), (case, body["url"])
        for method in ("GET", "HEAD"):
            r = await mesh.http.request(method, body["url"])
            _assert_inert(r, (method, case))
        r = await mesh.http.get(body["url"])
        assert r.content == data, case
        # a range of it is as inert
        r = await mesh.http.get(body["url"], headers={"Range": "bytes=0-3"})
        assert r.status_code == 206
        assert r.headers["content-type"] == INERT
        assert r.headers["content-security-policy"] == CSP_ATTACHMENT


async def test_passive_files_are_sandboxed_too(mesh: Mesh) -> None:
    owner = await mesh.setup()
    for name, data, claimed, served, disposition in PASSIVE:
        body = await _upload(mesh, owner, name, data, claimed)
        assert body["contentType"] == served, name
        r = await mesh.http.get(body["url"])
        h = r.headers
        assert h["content-type"] == served, name
        assert h["content-disposition"].startswith(disposition + ";"), name
        assert h["x-content-type-options"] == "nosniff", name
        csp = CSP_INLINE if disposition == "inline" else CSP_ATTACHMENT
        assert h["content-security-policy"] == csp, name


async def test_uploads_recorded_as_script_before_are_served_inert(
    mesh: Mesh, settings: Settings
) -> None:
    """A row recorded by an earlier version (``text/javascript``, ``text/html``...)
    is served by its extension and type together: inert all the same."""
    owner = await mesh.setup()
    await _upload(mesh, owner, "first.txt", b"x", "text/plain")  # the folder exists
    old = [
        ("js", "text/javascript; charset=utf-8"),
        ("html", "text/html; charset=utf-8"),
        ("svg", "image/svg+xml"),
        ("xml", "application/xml"),
        # a type that does not go with its extension is not trusted either
        ("js", "image/png"),
        ("txt", "text/javascript; charset=utf-8"),
    ]
    db = Database(settings.resolved_database_url)
    await db.open()
    try:
        for ext, ctype in old:
            upload_id = new_id()
            upload = Upload(
                upload_id, f"{upload_id.lower()}.{ext}", "old", ctype, len(SCRIPT),
                owner.participant_id, now_ms(),
            )  # fmt: skip
            (settings.resolved_uploads_dir / upload.stored_name).write_bytes(SCRIPT)
            await db.write(lambda conn, u=upload: uploads_repo.insert_upload(conn, u))
            r = await mesh.http.get(upload.path)
            _assert_inert(r, (ext, ctype))
    finally:
        await db.close()


@pytest.mark.client_only  # the browser's side: the same on every store
async def test_chromium_runs_no_uploaded_script_on_the_nodes_origin(
    browser_ready: None, mesh: Mesh, base_url: str
) -> None:
    """A page on the node's own origin with no CSP at all (what injected HTML
    would be at worst) loads an uploaded script as a classic script, a module
    and a worker, and an uploaded module as WebAssembly: Chromium refuses each
    for its type. The same bytes with a script type, from the same origin, do
    run: the probe can tell."""
    owner = await mesh.setup()
    script = (await _upload(mesh, owner, "evil.js", SCRIPT, "text/javascript"))["url"]
    wasm = (await _upload(mesh, owner, "evil.wasm", WASM, "application/wasm"))["url"]
    probe = r"""async ([script, wasm]) => {
        const tag = (src, type) => new Promise((done) => {
            const s = document.createElement("script");
            s.src = src;
            if (type) s.type = type;
            s.onload = () => done("ran");
            s.onerror = () => done("refused");
            document.head.append(s);
        });
        const worker = (src) => new Promise((done) => {
            const w = new Worker(src);
            w.onmessage = () => done("ran");
            w.onerror = () => done("refused");
        });
        const out = {};
        out.classic = await tag(script + "?classic");
        out.module = await tag(script + "?module", "module");
        out.imported = await import(script + "?import").then(() => "ran", () => "refused");
        out.worker = await worker(script + "?worker");
        out.wasm = await WebAssembly.instantiateStreaming(fetch(wasm)).then(
            () => "ran", () => "refused");
        out.pwned = globalThis.__pwned ?? null;
        return out;
    }"""

    def scenario() -> tuple[dict[str, Any], dict[str, Any], list[str]]:
        with chromium() as browser:
            page = browser.new_page()
            console: list[str] = []
            page.on("console", lambda message: console.append(message.text))
            # pages of the node's origin, answered by the browser itself: one
            # with no CSP, and the control's same bytes served as script
            page.route(
                base_url + "/probe",
                lambda route: route.fulfill(body="<!doctype html><title>p</title>",
                                            content_type="text/html"),
            )  # fmt: skip
            page.route(
                base_url + "/control.js*",
                lambda route: route.fulfill(body=SCRIPT, content_type="text/javascript"),
            )
            page.route(
                base_url + "/control.wasm",
                lambda route: route.fulfill(body=WASM, content_type="application/wasm"),
            )
            page.goto(base_url + "/probe")
            refused = page.evaluate(probe, [script, wasm])
            control = page.evaluate(probe, [base_url + "/control.js", base_url + "/control.wasm"])
            return refused, control, console

    refused, control, console = await in_browser(scenario)
    assert control == {
        "classic": "ran",
        "module": "ran",
        "imported": "ran",
        "worker": "ran",
        "wasm": "ran",
        "pwned": "ran",
    }, control
    assert refused == {
        "classic": "refused",
        "module": "refused",
        "imported": "refused",
        "worker": "refused",
        "wasm": "refused",
        "pwned": None,
    }, refused
    # refused for its type, not for anything else
    assert any("MIME type" in line for line in console), console
