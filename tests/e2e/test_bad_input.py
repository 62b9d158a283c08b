"""Bad input of every kind gets a 4xx JSON error, and the node stays healthy."""

from __future__ import annotations

import httpx
import trio

from tests.helpers import Mesh, assert_error


async def test_malformed_bodies(http: httpx.AsyncClient, mesh: Mesh) -> None:
    owner = await mesh.setup()
    room_id = (await mesh.create_room(owner, "r"))["roomId"]
    url = f"/api/rooms/{room_id}/messages"
    headers = {**owner.headers, "Content-Type": "application/json"}
    for raw in [
        b"{",
        b"[]",
        b'"text"',
        b"null",
        b"42",
        b"\xff\xfe\x00",
        b'{"content": NaN}',
        b'{"content": "\\ud800"}',
        b"[" * 60_000,
        b'{"content": "a"} trailing',
    ]:
        r = await http.post(url, content=raw, headers=headers)
        assert_error(r, 400, "invalid_json")
    # bodies over the limit (64 KiB), with and without a Content-Length
    r = await http.post(url, content=b'{"content": "' + b"a" * 70_000 + b'"}', headers=headers)
    assert_error(r, 413, "too_large")

    r = await http.post(url, content=_Chunks(40, 4096), headers=headers)
    assert_error(r, 413, "too_large")
    assert (await http.get("/api/health")).json()["ok"] is True


async def test_unknown_paths_and_methods(http: httpx.AsyncClient, mesh: Mesh) -> None:
    owner = await mesh.setup()
    assert_error(await http.get("/api/nothing-here"), 404, "not_found")
    assert_error(await http.get("/favicon.ico"), 404, "not_found")
    r = await http.put("/api/health")
    assert_error(r, 405, "method_not_allowed")
    assert "GET" in r.headers.get("Allow", "")
    assert_error(await http.delete("/api/rooms", headers=owner.headers), 405)


async def test_raw_socket_garbage_does_not_hurt(base_url: str, mesh: Mesh) -> None:
    """Hand-written bytes to the port: the server answers or closes, and lives on."""
    host, port = base_url.removeprefix("http://").split(":")
    payloads = [
        b"GARBAGE\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\n",  # no Host
        b"POST /api/auth/login HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{",  # short
        b"POST /api/auth/login HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
        b"GET /api/health HTTP/1.1\r\nHost: x\r\n" + b"X-A: " + b"a" * 70_000 + b"\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS ClientHello
    ]
    for payload in payloads:
        stream = await trio.open_tcp_stream(host, int(port))
        with trio.move_on_after(2):
            try:
                await stream.send_all(payload)
                await stream.receive_some(65536)
            except trio.BrokenResourceError:
                pass
        await stream.aclose()
    owner = await mesh.setup()
    assert (await mesh.http.get("/api/health")).json()["ok"] is True
    assert (await mesh.http.get("/api/auth/me", headers=owner.headers)).status_code == 200


class _Chunks:
    """A chunked request body (no Content-Length); a class, not an async
    generator, so an early 413 leaves nothing unfinalized behind."""

    def __init__(self, count: int, size: int) -> None:
        self.left, self.size = count, size

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> bytes:
        if self.left == 0:
            raise StopAsyncIteration
        self.left -= 1
        return b"a" * self.size
