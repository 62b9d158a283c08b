"""The body guard around the app (``quart_mesh/asgi_guards.py``): a request
whose events the app received to the end costs no task; one the app
answered before its body's end is read on, and discarded, by a pump in the
long-lived nursery, so the server's bounded queue never stays full. An
HTTP/1 answer before a body's end says ``Connection: close`` and is
announced to the server (``early_answer``) before it is sent.

The server is stood in for by a memory channel of hypercorn's size (10)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, ASGISendEvent, Scope
from trio.testing import wait_all_tasks_blocked

from quart_mesh.asgi_guards import drain_request_bodies, early_answer

pytestmark = [pytest.mark.timeout(10), pytest.mark.store_free]

#: a request with a body, as hypercorn describes it
HTTP: Any = {"type": "http", "http_version": "1.1", "headers": [(b"content-length", b"100")]}
#: hypercorn's ``max_app_queue_size``
QUEUE = 10


def part(more: bool) -> Any:
    return {"type": "http.request", "body": b"x", "more_body": more}


async def answer(send: ASGISendCallable) -> None:
    await send({"type": "http.response.start", "status": 401, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def test_a_request_read_to_the_end_starts_no_task() -> None:
    to_app, from_server = trio.open_memory_channel[Any](QUEUE)
    sent: list[ASGISendEvent] = []

    async def send(message: ASGISendEvent) -> None:
        sent.append(message)

    async def app(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        assert (await receive())["more_body"] is False
        await answer(send)

    async with trio.open_nursery() as pump_nursery:
        guarded = drain_request_bodies(app, lambda: pump_nursery)
        to_app.send_nowait(part(False))
        await guarded(HTTP, from_server.receive, send)
        assert pump_nursery.child_tasks == frozenset()
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]


async def test_an_early_answer_has_the_rest_of_the_body_read_and_discarded() -> None:
    to_app, from_server = trio.open_memory_channel[Any](QUEUE)

    async def send(message: ASGISendEvent) -> None:
        pass

    async def app(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        assert (await receive())["more_body"] is True
        await answer(send)  # before the body's end

    async with trio.open_nursery() as nursery:
        guarded = drain_request_bodies(app, lambda: nursery)
        to_app.send_nowait(part(True))
        await guarded(HTTP, from_server.receive, send)
        assert len(nursery.child_tasks) == 1  # the pump

        # the client goes on sending, more than the queue holds: none of it blocks
        with trio.fail_after(5):
            for _ in range(3 * QUEUE):
                await to_app.send(part(True))
            await to_app.send(part(False))
            await wait_all_tasks_blocked()
        assert nursery.child_tasks == frozenset()  # the pump ended at the body's end
        to_app.send_nowait({"type": "http.disconnect"})  # the queue has room for it


async def test_a_pump_ends_at_the_disconnect() -> None:
    to_app, from_server = trio.open_memory_channel[Any](QUEUE)

    async def send(message: ASGISendEvent) -> None:
        pass

    async def app(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        await answer(send)  # without reading anything

    async with trio.open_nursery() as nursery:
        guarded = drain_request_bodies(app, lambda: nursery)
        await guarded(HTTP, from_server.receive, send)
        await to_app.send(part(True))
        await to_app.send({"type": "http.disconnect"})  # the client went away
        await wait_all_tasks_blocked()
        assert nursery.child_tasks == frozenset()


async def test_the_apps_sends_are_shielded(nursery: trio.Nursery) -> None:
    """hypercorn finishes the stream inside the app's last send; Quart's
    cancellation must not cut it off halfway."""
    finished = trio.Event()

    async def send(message: ASGISendEvent) -> None:
        await trio.sleep(0.01)  # a checkpoint inside the server's send
        finished.set()

    async def app(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        await receive()
        with trio.CancelScope() as scope_:
            scope_.cancel()
            await send({"type": "http.response.body", "body": b""})

    to_app, from_server = trio.open_memory_channel[Any](QUEUE)
    to_app.send_nowait(part(False))
    await drain_request_bodies(app, lambda: nursery)(HTTP, from_server.receive, send)
    assert finished.is_set()


async def _served(scope: Any, body_read: bool) -> tuple[list[ASGISendEvent], list[int]]:
    """What an app answering *scope* sends (with the body read to its end or
    not), and how many answers had been sent when ``early_answer`` was called."""
    to_app, from_server = trio.open_memory_channel[Any](QUEUE)
    sent: list[ASGISendEvent] = []
    announced: list[int] = []

    async def send(message: ASGISendEvent) -> None:
        sent.append(message)

    async def app(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 413, "headers": [(b"a", b"b")]})
        await send({"type": "http.response.body", "body": b"{}"})

    token = early_answer.set(lambda: announced.append(len(sent)))
    try:
        async with trio.open_nursery() as nursery:
            to_app.send_nowait(part(not body_read))
            await drain_request_bodies(app, lambda: nursery)(scope, from_server.receive, send)
            to_app.send_nowait({"type": "http.disconnect"})
    finally:
        early_answer.reset(token)
    return sent, announced


async def test_an_early_answer_closes_the_connection_and_is_announced_first() -> None:
    sent, announced = await _served(HTTP, False)
    assert announced == [0]  # before the answer left
    assert list(sent[0]["headers"]) == [(b"a", b"b"), (b"connection", b"close")]  # type: ignore[typeddict-item]


@pytest.mark.parametrize(
    ("scope", "body_read"),
    [
        pytest.param(HTTP, True, id="body-read"),
        pytest.param({**HTTP, "http_version": "2"}, False, id="http2"),
        pytest.param({**HTTP, "headers": []}, False, id="no-body"),
        pytest.param({**HTTP, "headers": [(b"content-length", b"0")]}, False, id="empty-body"),
    ],
)
async def test_other_answers_keep_the_connection(scope: Any, body_read: bool) -> None:
    """The body read to its end; HTTP/2 (a stream ends, not its connection);
    a request without a body, answered before its (empty) end was read."""
    sent, announced = await _served(scope, body_read)
    assert announced == []
    assert list(sent[0]["headers"]) == [(b"a", b"b")]  # type: ignore[typeddict-item]
