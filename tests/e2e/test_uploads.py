"""Uploads on a real served node: awkward files in, safe headers out; limits
refused early without buffering; attachments on messages everywhere.

Loopback only, port 0, no sleeps to wait for state, a time cap on every test.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from quart_mesh import Settings
from tests.e2e.test_bad_input import count_tasks, settle_to
from tests.helpers import Mesh, User, assert_error, connect

pytestmark = pytest.mark.e2e

MiB = 1024 * 1024
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(64))
CSP_ACTIVE = "sandbox; default-src 'none'"
CSP_PASSIVE = (
    "sandbox; default-src 'none'; img-src 'self'; media-src 'self'; style-src 'unsafe-inline'"
)
INERT = "application/octet-stream"
QUOTA = 100_000


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "mesh-data", upload_quota_bytes=QUOTA)


async def upload(
    mesh: Mesh, user: User | None, name: str, data: bytes, ctype: str = "application/octet-stream"
) -> httpx.Response:
    headers = user.headers if user is not None else {}
    return await mesh.http.post("/api/upload", files={"file": (name, data, ctype)}, headers=headers)


async def uploaded(
    mesh: Mesh, user: User, name: str, data: bytes, ctype: str = ""
) -> dict[str, Any]:
    r = await upload(mesh, user, name, data, ctype or "application/octet-stream")
    assert r.status_code == 201, r.text
    return dict(r.json())


def rss() -> int:
    """This process's resident memory (the served node runs in it), bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def test_awkward_files_are_stored_and_served_safely(
    base_url: str, mesh: Mesh, settings: Settings
) -> None:
    owner = await mesh.setup()
    noise = os.urandom(200_000)
    noise = b"\x00" + noise[1:]  # no magic bytes, not text
    cases: list[tuple[str, bytes, str, str, str, bool]] = [
        # (client name, bytes, client type, expected type, extension, served as attachment)
        # what a browser could run is recorded and served as inert bytes (decision 0056)
        ("page.html", b"<!DOCTYPE html><script>alert(1)</script>", "text/html",
         INERT, "html", True),
        ("pic.svg", b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
         "image/svg+xml", INERT, "svg", True),
        ("../../etc/passwd", b"root:x:0:0:root:/root:/bin/bash\n", "text/plain",
         "text/plain; charset=utf-8", "txt", False),
        ("empty.txt", b"", "text/plain", "text/plain; charset=utf-8", "txt", False),
        ("noise.dat", noise, "application/octet-stream", "application/octet-stream", "bin", True),
        ("dot.png", PNG, "image/png", "image/png", "png", False),
        # lying clients: HTML that claims to be a PNG; a PNG that claims to be HTML
        ("cat.png", b"<html><body onload=alert(1)>", "image/png", INERT, "html", True),
        ("x.html", PNG, "text/html", "image/png", "png", False),
        # plain text the client calls JavaScript is served as inert bytes (stricter)
        ("app.js", b"alert(document.cookie)", "text/plain", INERT, "js", True),
        ("data.json", b'{"a": [1, 2]}', "application/json", "application/json", "json", False),
        ("feed.xml", b'<?xml version="1.0"?><rss/>', "text/plain", INERT, "xml", True),
        ("doc.pdf", b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n", "application/pdf",
         "application/pdf", "pdf", False),
        ("a.zip", b"PK\x03\x04" + bytes(40), "application/zip", "application/zip", "zip", True),
    ]  # fmt: skip
    for name, data, claimed, ctype, ext, attachment in cases:
        body = await uploaded(mesh, owner, name, data, claimed)
        assert set(body) == {"url", "filename", "size", "contentType", "uploadId"}
        assert body["size"] == len(data), (name, body)
        assert body["contentType"] == ctype, (name, body)
        assert body["url"].startswith(base_url + "/uploads/"), body
        stored = body["url"].rsplit("/", 1)[1]
        assert stored == body["uploadId"].lower() + "." + ext
        r = await mesh.http.get(body["url"])
        assert r.status_code == 200, name
        assert r.content == data, name
        h = r.headers
        assert h["content-type"] == ctype
        assert h["x-content-type-options"] == "nosniff"
        assert h["cache-control"] == "public, max-age=31536000, immutable"
        assert h["etag"] == f'"{body["uploadId"]}"'
        assert h["last-modified"].endswith(" GMT")
        assert h["accept-ranges"] == "bytes"
        assert h["content-length"] == str(len(data))
        if attachment:
            assert h["content-disposition"].startswith("attachment;"), name
            assert h["content-security-policy"] == CSP_ACTIVE, name
        else:
            assert h["content-disposition"].startswith("inline;"), name
            assert h["content-security-policy"] == CSP_PASSIVE, name
        head = await mesh.http.head(body["url"])
        assert head.status_code == 200
        assert head.content == b""
        assert head.headers["content-length"] == str(len(data))
        assert head.headers["content-type"] == ctype
    # the client's name is metadata only
    passwd = await uploaded(mesh, owner, "../../etc/passwd", b"x")
    assert passwd["filename"] == "passwd"
    r = await mesh.http.get(passwd["url"])
    assert (
        r.headers["content-disposition"] == "inline; filename=\"passwd\"; filename*=UTF-8''passwd"
    )
    # a name with path separators and control characters, sent as raw bytes
    raw = (
        b'--XyZ\r\nContent-Disposition: form-data; name="file"; '
        b'filename="..\\\\..\\\\win\x07d\xc3\xa9 s.txt"\r\n\r\nx\r\n--XyZ--\r\n'
    )
    r = await mesh.http.post(
        "/api/upload",
        content=raw,
        headers={**owner.headers, "Content-Type": "multipart/form-data; boundary=XyZ"},
    )
    assert r.status_code == 201, r.text
    assert r.json()["filename"] == "wind\u00e9 s.txt"
    r = await mesh.http.get(r.json()["url"])
    assert r.headers["content-disposition"] == (
        "inline; filename=\"wind_ s.txt\"; filename*=UTF-8''wind%C3%A9%20s.txt"
    )
    # the folder holds server-chosen names only, private to the node's user
    folder = settings.data_dir / "uploads"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    names = sorted(p.name for p in folder.iterdir())
    assert len(names) == len(cases) + 2
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert not path.name.startswith(".")


async def test_ranges_and_conditional_requests(mesh: Mesh) -> None:
    owner = await mesh.setup()
    data = bytes(range(256)) * 4
    body = await uploaded(mesh, owner, "r.bin", data)
    url = body["url"]

    async def get(**headers: str) -> httpx.Response:
        return await mesh.http.get(url, headers=headers)

    r = await get(Range="bytes=10-19")
    assert r.status_code == 206
    assert r.content == data[10:20]
    assert r.headers["content-range"] == f"bytes 10-19/{len(data)}"
    assert r.headers["content-length"] == "10"
    r = await get(Range="bytes=-5")
    assert r.status_code == 206
    assert r.content == data[-5:]
    r = await get(Range="bytes=1000-")
    assert r.status_code == 206
    assert r.content == data[1000:]
    r = await get(Range="bytes=0-99999")  # clipped to the file
    assert r.status_code == 206
    assert r.content == data
    for unsatisfiable in ("bytes=1024-", "bytes=5000-6000"):
        r = await get(Range=unsatisfiable)
        assert_error(r, 416, "range_not_satisfiable")
        assert r.headers["content-range"] == f"bytes */{len(data)}"
    # several ranges, a malformed one, or another unit: the whole file
    for whole in ("bytes=0-1,5-6", "bytes=x-y", "lines=1-2"):
        r = await get(Range=whole)
        assert r.status_code == 200, whole
        assert r.content == data, whole
    # If-Range: the range only while the file is the one the client knows
    r = await get(Range="bytes=0-1", **{"If-Range": body and r.headers["etag"]})
    assert r.status_code == 206
    r = await get(Range="bytes=0-1", **{"If-Range": '"other"'})
    assert r.status_code == 200
    assert r.content == data
    # conditional GET
    etag, modified = r.headers["etag"], r.headers["last-modified"]
    for headers in ({"If-None-Match": etag}, {"If-None-Match": f'"x", W/{etag}'},
                    {"If-None-Match": "*"}, {"If-Modified-Since": modified}):  # fmt: skip
        r = await get(**headers)
        assert r.status_code == 304, headers
        assert r.content == b"", headers
        assert r.headers["etag"] == etag
        assert "immutable" in r.headers["cache-control"]
    r = await get(**{"If-None-Match": '"other"'})
    assert r.status_code == 200
    assert r.content == data
    # an empty file has no satisfiable range
    empty = await uploaded(mesh, owner, "e.txt", b"")
    assert_error(await mesh.http.get(empty["url"], headers={"Range": "bytes=0-0"}), 416)
    assert (await mesh.http.get(empty["url"])).content == b""


async def test_unknown_and_malformed_names_are_404(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    real = (await uploaded(mesh, owner, "a.txt", b"hello"))["url"].rsplit("/", 1)[1]
    ghost = "0" * 26 + ".txt"
    for path in [
        f"/uploads/{ghost}",
        f"/uploads/{real.upper()}",
        f"/uploads/{real[:-4]}.exe",
        f"/uploads/{real[:-4]}",
        "/uploads/..%2f..%2fetc%2fpasswd",
        "/uploads/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "/uploads/..%5c..%5cmesh.db",
        "/uploads/.secret",
        "/uploads/mesh.db",
        "/uploads/",
        f"/uploads/{real}%00.txt",
        f"/uploads/{real}/x",
    ]:
        assert_error(await mesh.http.get(path), 404)
    # raw bytes, as a client that does not normalize paths would send them
    host, port = base_url.removeprefix("http://").split(":")
    for raw in (b"/uploads/../../etc/passwd", b"/uploads/../mesh.db", b"/uploads/%2e%2e/secret"):
        stream = await trio.open_tcp_stream(host, int(port))
        with trio.fail_after(5):
            await stream.send_all(
                b"GET " + raw + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
            received = b""
            while chunk := await stream.receive_some(65536):
                received += chunk
        await stream.aclose()
        assert received.startswith(b"HTTP/1.1 404"), received[:100]
        assert b'"code":"not_found"' in received or b'"code":"upload_not_found"' in received


async def test_bad_uploads_are_refused(mesh: Mesh) -> None:
    owner = await mesh.setup(visibility="public")
    assert_error(await upload(mesh, None, "a.txt", b"x"), 401, "unauthorized")
    guest = await mesh.guest()
    assert_error(await upload(mesh, guest, "a.txt", b"x"), 403, "forbidden")
    h = owner.headers
    r = await mesh.http.post("/api/upload", json={"file": "x"}, headers=h)
    assert_error(r, 400, "invalid_upload")
    r = await mesh.http.post("/api/upload", files={"other": ("a.txt", b"x")}, headers=h)
    assert_error(r, 400, "missing_file")
    r = await mesh.http.post(
        "/api/upload", data={"file": "not a file"}, files={"x": ("x", b"x")}, headers=h
    )
    assert_error(r, 400, "missing_file")
    r = await mesh.http.post("/api/upload", data={"file": "form, not multipart"}, headers=h)
    assert_error(r, 400, "invalid_upload")
    # extra fields are ignored; two files are not
    r = await mesh.http.post(
        "/api/upload", data={"note": "hi"}, files={"file": ("a.txt", b"x")}, headers=h
    )
    assert r.status_code == 201, r.text
    r = await mesh.http.post(
        "/api/upload", files=[("file", ("a.txt", b"x")), ("file", ("b.txt", b"y"))], headers=h
    )
    assert_error(r, 400, "invalid_upload")
    # a truncated body (no closing boundary), and one that is not multipart inside
    ctype = {"Content-Type": "multipart/form-data; boundary=XyZ"}
    truncated = b'--XyZ\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\nabc'
    for raw in (truncated, b"garbage", b""):
        r = await mesh.http.post("/api/upload", content=raw, headers={**h, **ctype})
        assert_error(r, 400)
    assert (await mesh.http.get("/api/health")).json()["ok"] is True


async def test_size_limit_and_quota(mesh: Mesh, settings: Settings) -> None:
    owner = await mesh.setup()
    limit = settings.limits.max_upload_bytes
    body = await uploaded(mesh, owner, "big.bin", b"\x00" * limit)
    assert body["size"] == limit
    r = await upload(mesh, owner, "big.bin", b"\x00" * (limit + 1))
    assert_error(r, 413, "upload_too_large")
    assert r.headers["connection"] == "close"
    # a member has a quota (admins and the owner do not)
    member = await mesh.register("member")
    await uploaded(mesh, member, "a.bin", b"a" * (QUOTA - 10))
    assert_error(await upload(mesh, member, "b.bin", b"b" * 11), 413, "quota_exceeded")
    await uploaded(mesh, member, "c.bin", b"c" * 10)
    assert_error(await upload(mesh, member, "d.bin", b"d"), 413, "quota_exceeded")
    assert not [p for p in (settings.data_dir / "uploads").iterdir() if p.name.startswith(".")]


async def _raw_upload(base_url: str, head: bytes, chunks: int, chunk: bytes) -> bytes:
    """Send *head*, then *chunks* times *chunk* while reading the answer at the
    same time (the server may answer and close before the body is done)."""
    host, port = base_url.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    received = bytearray()

    async def send() -> None:
        try:
            await stream.send_all(head)
            for _ in range(chunks):
                await stream.send_all(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the server answered and closed

    async def receive() -> None:
        try:
            while data := await stream.receive_some(65536):
                received.extend(data)
        except trio.BrokenResourceError:
            pass
        nursery.cancel_scope.cancel()

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            nursery.start_soon(receive)
    await stream.aclose()
    return bytes(received)


async def test_a_50_mib_upload_is_refused_early_without_buffering(
    base_url: str, mesh: Mesh, settings: Settings
) -> None:
    owner = await mesh.setup()
    assert (await mesh.http.get("/api/health")).status_code == 200
    baseline_tasks = count_tasks()
    before = rss()
    boundary = b"b0undary"
    part = (
        b"--" + boundary + b'\r\nContent-Disposition: form-data; name="file"; filename="big"\r\n'
        b"Content-Type: application/octet-stream\r\n\r\n"
    )
    request = (
        b"POST /api/upload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + owner.token.encode()
        + b"\r\nContent-Type: multipart/form-data; boundary="
        + boundary
    )
    piece = b"\xab" * MiB
    # declared 50 MiB: refused at once, before the body is read
    declared = request + b"\r\nContent-Length: " + str(50 * MiB + 200).encode() + b"\r\n\r\n"
    answer = await _raw_upload(base_url, declared + part, 50, piece)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"code":"upload_too_large"' in answer
    assert b"connection: close" in answer.lower()
    # chunked, size unknown: refused once past the limit, while streaming
    chunked = request + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
    framed = b"%x\r\n" % len(piece) + piece + b"\r\n"
    answer = await _raw_upload(
        base_url, chunked + b"%x\r\n" % len(part) + part + b"\r\n", 50, framed
    )
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"code":"upload_too_large"' in answer
    grown = rss() - before
    assert grown < 20 * MiB, f"RSS grew by {grown / MiB:.1f} MiB"
    # nothing left behind: no partial file, no stuck connection, the node serves
    assert not list((settings.data_dir / "uploads").iterdir())
    assert await settle_to(baseline_tasks) <= baseline_tasks
    assert (await mesh.http.get("/api/health")).json()["ok"] is True
    await uploaded(mesh, owner, "after.txt", b"still fine")


async def test_attachments_everywhere(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    member = await mesh.register("member")
    room_id = (await mesh.create_room(owner, "files"))["roomId"]
    await mesh.join(member, room_id)
    a = await uploaded(mesh, owner, "a.png", PNG)
    b = await uploaded(mesh, member, "b.txt", b"notes")

    def shown(up: dict[str, Any]) -> dict[str, Any]:
        return {
            "uploadId": up["uploadId"],
            "url": "/uploads/" + up["url"].rsplit("/", 1)[1],
            "filename": up["filename"],
            "contentType": up["contentType"],
            "size": up["size"],
        }

    async with connect(base_url, member) as ws:
        # REST, by URL and by id; the member sees it on the WebSocket
        first = await mesh.send(owner, room_id, "two files", attachments=[a["url"], b["uploadId"]])
        assert first["attachments"] == [shown(a), shown(b)]
        event = await ws.expect("message", content="two files")
        assert event["attachments"] == [shown(a), shown(b)]
        # WebSocket, by path; duplicates collapse
        path = "/uploads/" + a["url"].rsplit("/", 1)[1]
        await ws.send(
            type="send_message", roomId=room_id, content="again", attachments=[path, path]
        )
        second = await ws.expect("message", content="again")
        assert second["attachments"] == [shown(a)]
        # bad attachments are refused on the WebSocket too
        await ws.send(type="send_message", roomId=room_id, content="x", attachments=["0" * 26])
        error = await ws.expect("error")
        assert error["code"] == "unknown_attachment", error
        plain = await mesh.send(owner, room_id, "none")
        assert plain["attachments"] == []
    # history and polling carry them
    history = await mesh.messages(member, room_id)
    assert [m["attachments"] for m in history] == [[shown(a), shown(b)], [shown(a)], []]
    r = await mesh.http.post(
        "/api/poll", json={"cursor": str(int(first["cursor"]) - 1)}, headers=owner.headers
    )
    assert [m["attachments"] for m in r.json()["messages"]] == [
        [shown(a), shown(b)],
        [shown(a)],
        [],
    ]
    single = await mesh.http.get(
        f"/api/rooms/{room_id}/messages/{first['messageId']}", headers=owner.headers
    )
    assert single.json()["attachments"] == [shown(a), shown(b)]
    # refused attachments
    url = f"/api/rooms/{room_id}/messages"
    for bad, code in [
        ("not a list", "invalid_attachments"),
        ([1], "invalid_attachments"),
        (["/etc/passwd"], "invalid_attachments"),
        (["https://x/uploads/../../etc/passwd"], "invalid_attachments"),
        ([a["url"] + "?x=1"], "invalid_attachments"),
        ([b["uploadId"]] * 11, "invalid_attachments"),
        (["0" * 26], "unknown_attachment"),
        ([a["url"].replace(".png", ".txt")], "unknown_attachment"),
    ]:
        r = await mesh.http.post(
            url, json={"content": "x", "attachments": bad}, headers=owner.headers
        )
        assert_error(r, 400, code)
    # deleting a message keeps the upload and the other message's attachment
    r = await mesh.http.delete(f"{url}/{first['messageId']}", headers=owner.headers)
    assert r.status_code == 200, r.text
    assert (await mesh.http.get(a["url"])).content == PNG
    assert (await mesh.http.get(b["url"])).content == b"notes"
    history = await mesh.messages(member, room_id)
    assert [m["attachments"] for m in history] == [[shown(a)], []]
