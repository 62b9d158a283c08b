"""Bad input of every kind gets a 4xx JSON error, and the node stays healthy."""

from __future__ import annotations

import contextlib
import json

import h2.connection
import h2.events
import httpx
import trio

from tests.helpers import Mesh, assert_error, wait_for


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

    assert (await http.get("/api/health")).json()["ok"] is True


async def test_oversized_chunked_body_gets_413_and_a_closed_connection(base_url: str) -> None:
    """Regression: after an early 413 hypercorn does not read the rest of the body,
    so a kept-alive connection used to hang; the node now closes it instead."""
    host, port = base_url.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    await stream.send_all(
        b"POST /api/auth/login HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    received = b""
    with trio.fail_after(10):
        try:
            for _ in range(40):
                await stream.send_all(b"1000\r\n" + b"a" * 4096 + b"\r\n")
            await stream.send_all(b"0\r\n\r\n")
            await stream.send_all(b"GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
        except trio.BrokenResourceError:
            pass  # the server closed after answering; what it sent is still readable
        try:
            while chunk := await stream.receive_some(65536):
                received += chunk
        except trio.BrokenResourceError:
            pass
    await stream.aclose()
    assert received.startswith(b"HTTP/1.1 413")
    assert b'"code":"too_large"' in received
    assert b"connection: close" in received.lower()


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


def count_tasks() -> int:
    """Tasks alive in this process (the served node runs in it)."""

    def walk(task: trio.lowlevel.Task) -> int:
        return 1 + sum(walk(child) for n in task.child_nurseries for child in n.child_tasks)

    return walk(trio.lowlevel.current_root_task())


async def settle_to(baseline: int, within: float = 5) -> int:
    """Wait (bounded) for the task count to come back down to *baseline*;
    the count then (polled: no event says a connection's tasks have ended)."""

    async def settled() -> bool:
        return count_tasks() <= baseline

    with contextlib.suppress(trio.TooSlowError):
        await wait_for(settled, within, interval=0.01)
    return count_tasks()


async def test_early_answers_leak_no_tasks(base_url: str) -> None:
    """Twenty abusive requests; afterwards the node holds no extra tasks."""
    async with httpx.AsyncClient(base_url=base_url) as http:
        assert (await http.get("/api/health")).status_code == 200
    baseline = count_tasks()
    for _ in range(20):
        await test_early_answer_then_more_body_does_not_wedge_the_connection(base_url)
    assert await settle_to(baseline) <= baseline


async def test_early_answer_then_more_body_does_not_wedge_the_connection(
    base_url: str,
) -> None:
    """Regression: a 401 sent before the body is read used to wedge the
    connection for ever once the client sent more than a few body chunks.

    Now either the server closes the connection after answering (body still
    arriving) or, if the whole body was in by then, keeps it alive and
    answers the next request on it."""
    host, port = base_url.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    body = b'{"name": "' + b"x" * 59_000 + b'"}'
    await stream.send_all(
        b"POST /api/rooms HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
    )
    received = b""
    with trio.fail_after(10):
        try:
            for i in range(0, len(body), 500):
                await stream.send_all(body[i : i + 500])
                # deliberate: a slow client, its body in separate small segments
                await trio.sleep(0.001)
            await stream.send_all(b"GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
        except trio.BrokenResourceError:
            pass  # closed after answering
        try:
            while not (received.count(b"HTTP/1.1 ") == 2 and received.endswith(b"}\n")):
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                received += chunk
        except trio.BrokenResourceError:
            pass
    await stream.aclose()
    responses = received.split(b"HTTP/1.1 ")[1:]
    assert responses[0].startswith(b"401"), received[:200]
    assert b'"code":"unauthorized"' in responses[0]
    if len(responses) == 2:
        assert responses[1].startswith(b"200")


async def test_a_query_string_that_is_not_utf8_over_http2_is_refused(base_url: str) -> None:
    """HTTP/1.1 (h11) refuses such a request line itself; HTTP/2 lets the
    bytes through to the app, which answers 400, not 500."""
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    connection = h2.connection.H2Connection()
    connection.initiate_connection()
    connection.send_headers(
        1,
        [
            (b":method", b"GET"),
            (b":path", b"/api/rooms?limit=\xff"),
            (b":scheme", b"http"),
            (b":authority", host.encode()),
        ],
        end_stream=True,
    )
    await stream.send_all(connection.data_to_send())
    status, body = None, b""
    with trio.fail_after(10):
        while True:
            data = await stream.receive_some(65536)
            assert data, "the node closed the connection"
            for event in connection.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    status = dict(event.headers)[b":status"]
                elif isinstance(event, h2.events.DataReceived):
                    body += event.data
                    connection.acknowledge_received_data(len(event.data), event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    await stream.aclose()
                    assert status == b"400", (status, body)
                    assert json.loads(body)["code"] == "invalid_query"
                    return
            await stream.send_all(connection.data_to_send())
