"""The body guard around the app (``quart_mesh/asgi_guards.py``): a request
whose events the app received to the end costs no task; one the app
answered before its body's end is read on, and discarded, by a pump in the
long-lived nursery, so the server's bounded queue never stays full.

The server is stood in for by a memory channel of hypercorn's size (10)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, ASGISendEvent, Scope
from trio.testing import wait_all_tasks_blocked

from quart_mesh.asgi_guards import drain_request_bodies

pytestmark = [pytest.mark.timeout(10), pytest.mark.store_free]

HTTP: Any = {"type": "http"}
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
