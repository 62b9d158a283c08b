"""ASGI-level guards that keep one bad client from wedging a connection.

hypercorn 0.18 (trio worker) hands each request's events to the app through
a bounded memory channel whose receiving end nobody reads once the app has
answered. If the app answers early — a 401 before reading the body, a 413 at
the body limit — and the client keeps sending, hypercorn's reader blocks on
that full channel; the ``http.disconnect`` it must deliver to finish the
stream blocks behind it, and the connection (two tasks and a socket) hangs
for ever. :func:`drain_request_bodies` puts a pump between hypercorn and the
app that keeps reading until ``http.disconnect``, discarding whatever
arrives after the app is done, so hypercorn always gets to close the stream,
and shields the app's sends so that closing is never cut off halfway.

WebSocket scopes reach the app only when it serves ``/ws`` itself (a stock
ASGI server: :mod:`quart_mesh.asgi`); behind :func:`~quart_mesh.server.serve`
the node's own transport takes upgrades, and one that reaches hypercorn (a
later request on a kept-alive connection) is refused at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio
from hypercorn.typing import (
    ASGIReceiveCallable,
    ASGIReceiveEvent,
    ASGISendCallable,
    ASGISendEvent,
    Scope,
)

from .realtime.quart_ws import end_in_band

__all__ = ["drain_request_bodies"]

ASGIApp = Callable[[Scope, ASGIReceiveCallable, ASGISendCallable], Awaitable[None]]

#: events buffered between the pump and the app (Quart reads them eagerly)
_RELAY_BUFFER = 16


def drain_request_bodies(
    app: ASGIApp, nursery: Callable[[], trio.Nursery], *, websockets: bool = False
) -> ASGIApp:
    """Wrap an ASGI app so every HTTP request's events are read to the end.

    Args:
        app: the ASGI callable to wrap (``Quart.asgi_app``).
        nursery: returns the long-lived nursery that owns the pumps (the
            app's lifespan nursery). A pump outlives its request by design:
            it ends at ``http.disconnect``, which hypercorn sends only after
            the app has returned.
        websockets: pass WebSocket scopes to the app (which serves ``/ws``
            itself), with the client's disconnect handed over in band
            (:func:`~quart_mesh.realtime.quart_ws.end_in_band`); otherwise
            they are refused at once.
    """

    async def wrapped(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] == "websocket" and websockets:
            await app(scope, end_in_band(receive), send)
            return
        if scope["type"] == "websocket":
            # WebSockets are the node's own (quart_mesh.realtime); an upgrade that
            # reaches hypercorn (a later request on a kept-alive connection) is
            # refused at once, so nothing waits on hypercorn's WebSocket stream.
            await send({"type": "websocket.close", "code": 1008, "reason": None})
            return
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        pump = _Pump(receive)
        nursery().start_soon(pump.run)

        async def shielded_send(message: ASGISendEvent) -> None:
            # hypercorn finishes the stream inside the app's last send: it hands
            # the app an http.disconnect and then closes or recycles the
            # connection. Quart cancels its request task on that disconnect, so
            # unshielded, the cancellation lands midway and leaves the socket
            # open with nobody reading it. (hypercorn already shields the
            # socket write itself, so this adds no new way to block.)
            with trio.CancelScope(shield=True):
                await send(message)

        try:
            await app(scope, pump.receive, shielded_send)
        finally:
            pump.app_done()

    return wrapped


class _Pump:
    """Reads one request's events from the server and relays them to the app.

    Ends at ``http.disconnect``, or once the app is done and the body is
    complete (then at most the disconnect is left to deliver, and the server's
    queue has room for it; in-process test clients never send one).
    """

    def __init__(self, receive: ASGIReceiveCallable) -> None:
        self._receive = receive
        self._relay_send, self._relay_receive = trio.open_memory_channel[ASGIReceiveEvent](
            _RELAY_BUFFER
        )
        self._scope = trio.CancelScope()
        self._body_complete = False

    async def receive(self) -> ASGIReceiveEvent:
        return await self._relay_receive.receive()

    def app_done(self) -> None:
        self._relay_receive.close()  # later relays fail: the pump discards
        if self._body_complete:
            self._scope.cancel()

    async def run(self) -> None:
        with self._scope, self._relay_send:
            while True:
                message = await self._receive()
                if message["type"] == "http.request" and not message.get("more_body", False):
                    self._body_complete = True
                try:
                    await self._relay_send.send(message)
                except trio.BrokenResourceError:
                    # the app has answered: discard the rest
                    if self._body_complete:
                        return
                if message["type"] == "http.disconnect":
                    return
