"""ASGI-level guards that keep one bad client from wedging a connection.

hypercorn 0.18 (trio worker) hands each request's events to the app through
a bounded memory channel whose receiving end nobody reads once the app has
answered. If the app answers early — a 401 before reading the body, a 413 at
the body limit — and the client keeps sending, hypercorn's reader blocks on
that full channel; the ``http.disconnect`` it must deliver to finish the
stream blocks behind it, and the connection (two tasks and a socket) hangs
for ever. :func:`drain_request_bodies` watches what the app receives and,
when the app returns before the request's body was complete, starts a pump
that reads on until ``http.disconnect`` (or the body's end), discarding it,
so hypercorn always gets to close the stream. It also shields the app's
sends so that closing is never cut off halfway.

An HTTP/1 answer given before the request's body ended closes the
connection (hypercorn does, with the body unread): the guard says so in the
answer (``Connection: close``) and tells the server that serves the
connection, through :data:`early_answer`, before the answer leaves. The
node's server (:mod:`quart_mesh.server`) then reads and discards what the
client still sends, within bounds, before it closes the socket: closing
with data unread resets the connection, and a proxy still sending the body
(nginx) reports that reset as 502 instead of passing the answer on.

While the app runs, Quart reads every event eagerly, so nothing needs
draining then; a request whose body the app saw to the end (every request
without a body, most with one) costs no task.

WebSocket scopes reach the app only when it serves ``/ws`` itself (a stock
ASGI server: :mod:`quart_mesh.asgi`); behind :func:`~quart_mesh.server.serve`
the node's own transport takes upgrades, and one that reaches hypercorn (a
later request on a kept-alive connection) is refused at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import cast

import trio
from hypercorn.typing import (
    ASGIReceiveCallable,
    ASGIReceiveEvent,
    ASGISendCallable,
    ASGISendEvent,
    HTTPResponseStartEvent,
    HTTPScope,
    Scope,
)

from .realtime.quart_ws import end_in_band

__all__ = ["drain_request_bodies", "early_answer"]

ASGIApp = Callable[[Scope, ASGIReceiveCallable, ASGISendCallable], Awaitable[None]]

#: Set by a server around each HTTP/1 connection it serves (the node's own,
#: :mod:`quart_mesh.server`; stock hypercorn sets none): called, before the
#: answer is sent, when a request on the connection is answered before its
#: body's end. The connection closes after that answer, and the server reads
#: the rest of the body first.
early_answer: ContextVar[Callable[[], None] | None] = ContextVar("early_answer", default=None)


def drain_request_bodies(
    app: ASGIApp, nursery: Callable[[], trio.Nursery], *, websockets: bool = False
) -> ASGIApp:
    """Wrap an ASGI app so every HTTP request's events are read to the end.

    Args:
        app: the ASGI callable to wrap (``Quart.asgi_app``).
        nursery: returns the long-lived nursery that owns the pumps (the
            app's lifespan nursery). A pump outlives its request by design:
            it starts when the app has returned with the request's body
            unfinished, and ends at ``http.disconnect`` (which hypercorn
            sends only after the app has returned) or at the body's end.
        websockets: pass WebSocket scopes to the app (which serves ``/ws``
            itself), with the client's disconnect handed over in band
            (:func:`~quart_mesh.realtime.quart_ws.end_in_band`); otherwise
            they are refused at once.
    """

    async def wrapped(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        kind = scope["type"]
        if kind == "http":
            request = _Request(receive, send, cast("HTTPScope", scope))
            # Quart decodes the query string as UTF-8, and fails (a 500) on
            # other bytes, which HTTP/2 lets through
            answer = app if _utf8(cast("HTTPScope", scope).get("query_string", b"")) else _bad_query
            try:
                await answer(scope, request.receive, request.send)
            finally:
                if not request.ended:
                    # answered before the body's end: read (and discard) the rest
                    nursery().start_soon(_Pump(receive).run)
        elif kind == "websocket" and websockets:
            await app(scope, end_in_band(receive), send)
        elif kind == "websocket":
            # WebSockets are the node's own (quart_mesh.realtime); an upgrade that
            # reaches hypercorn (a later request on a kept-alive connection) is
            # refused at once, so nothing waits on hypercorn's WebSocket stream.
            await send({"type": "websocket.close", "code": 1008, "reason": None})
        else:
            await app(scope, receive, send)

    return wrapped


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


async def _bad_query(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
    """400 ``invalid_query``, as the API answers a query it cannot read."""
    body = b'{"error": "the query string is not valid UTF-8", "code": "invalid_query"}'
    await send(
        {
            "type": "http.response.start",
            "status": 400,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


class _Request:
    """One HTTP request's events as the app sees them: it notes whether the
    app has received the last of them, and shields the app's sends. An
    HTTP/1 answer before a body's end says ``Connection: close`` and is
    announced (:data:`early_answer`)."""

    __slots__ = ("_receive", "_scope", "_send", "ended")

    def __init__(self, receive: ASGIReceiveCallable, send: ASGISendCallable, scope: HTTPScope):
        self._receive = receive
        self._send = send
        self._scope = scope
        #: the app received the body's last part, or ``http.disconnect``:
        #: at most the disconnect is left, and the server's queue has room for it
        self.ended = False

    async def receive(self) -> ASGIReceiveEvent:
        message = await self._receive()
        if not message.get("more_body", False):  # the body's end, or http.disconnect
            self.ended = True
        return message

    async def send(self, message: ASGISendEvent) -> None:
        if message["type"] == "http.response.start" and not self.ended and self._has_body():
            # answered before the body's end: hypercorn closes the
            # connection after this answer; the server hears of it first
            message = _closing(message)
            announce = early_answer.get()
            if announce is not None:
                announce()
        # hypercorn finishes the stream inside the app's last send: it hands
        # the app an http.disconnect and then closes or recycles the
        # connection. Quart cancels its request task on that disconnect, so
        # unshielded, the cancellation lands midway and leaves the socket
        # open with nobody reading it. (hypercorn already shields the
        # socket write itself, so this adds no new way to block.)
        with trio.CancelScope(shield=True):
            await self._send(message)

    def _has_body(self) -> bool:
        """The request is HTTP/1 and has a body (HTTP/2 ends a stream, never
        its connection, and forbids ``Connection``)."""
        if not self._scope["http_version"].startswith("1"):
            return False
        for name, value in self._scope["headers"]:
            if name == b"transfer-encoding" or (name == b"content-length" and value != b"0"):
                return True
        return False


def _closing(start: HTTPResponseStartEvent) -> HTTPResponseStartEvent:
    """*start* with ``Connection: close`` (the server closes the connection
    after it: the request's body is not read to its end)."""
    closing = start.copy()
    closing["headers"] = [
        *((name, value) for name, value in start["headers"] if name.lower() != b"connection"),
        (b"connection", b"close"),
    ]
    return closing


class _Pump:
    """Reads what is left of a request the app has answered before its body's
    end, discarding it, until ``http.disconnect`` or the body's end (then at
    most the disconnect is left to deliver, and the server's queue has room
    for it; in-process test clients never send one)."""

    def __init__(self, receive: ASGIReceiveCallable) -> None:
        self._receive = receive

    async def run(self) -> None:
        while True:
            message = await self._receive()
            if not message.get("more_body", False):
                return
