"""Realtime: the node's WebSocket endpoint ``/ws``.

:class:`Realtime` is the node's component for WebSocket connections. Behind
:func:`~quart_mesh.server.serve`, the server hands it each upgrade request
(:meth:`~Realtime.serve_websocket`) and the node's own transport speaks the
protocol; under a stock ASGI server, the app's ``/ws`` route hands it the
server's connection (:meth:`~Realtime.serve_asgi_websocket`, through
:class:`~quart_mesh.realtime.quart_ws.QuartWebSocket`). Either way it runs a
:class:`~quart_mesh.realtime.session.ProtocolSession` on it, and on shutdown
tells every open session the node is going away.
"""

from __future__ import annotations

import logging

import trio

from ..client_address import ClientAddresses
from .quart_ws import AsgiWebSocket, QuartWebSocket
from .session import GOING_AWAY, ProtocolSession, SessionServices, SessionSocket
from .transport import WebSocket

__all__ = ["Realtime"]

log = logging.getLogger(__name__)


class Realtime:
    def __init__(
        self, services: SessionServices, client_addresses: ClientAddresses | None = None
    ) -> None:
        self._services = services
        #: who the client of an upgrade is (behind trusted proxies too)
        self._clients = client_addresses or ClientAddresses()
        self._settings = services.settings
        #: until the node runs, and once it stops, upgrades are refused
        self.accepting = False
        self._scopes: dict[SessionSocket, trio.CancelScope] = {}
        self._closing = False

    async def serve_websocket(self, stream: trio.abc.Stream, head: bytes) -> None:
        """Run one WebSocket connection whose request head has been read."""
        ws = WebSocket(stream, max_message_bytes=self._settings.max_frame_bytes)
        if not await ws.accept(head):
            return
        if self._closing or not self.accepting:
            await ws.close(GOING_AWAY, "shutting down")
            return
        header = self._clients.header
        values = [v for name, v in ws.request_headers if name == header]
        await self._run(ws, self._clients.resolve(_peer_address(stream), values))

    async def serve_asgi_websocket(self, websocket: AsgiWebSocket) -> None:
        """Run one WebSocket connection of an ASGI server (Quart's ``websocket``,
        whose ASGI ``receive`` is wrapped by :func:`~quart_mesh.realtime.quart_ws.end_in_band`).

        A client that goes is seen as on the node's own transport: its last
        messages are handled and its queued sends stored. Errors of the
        session are logged here; the server goes on.
        """
        ws = QuartWebSocket(websocket, max_message_bytes=self._settings.max_frame_bytes)
        await ws.accept()
        if self._closing or not self.accepting:
            await ws.close(GOING_AWAY, "shutting down")
            return
        header = self._clients.header
        client = self._clients.resolve(websocket.remote_addr, websocket.headers.getlist(header))
        try:
            await self._run(ws, client)
        except Exception:
            log.exception("WebSocket session failed; the server goes on")

    async def _run(self, ws: SessionSocket, client: str | None) -> None:
        code, reason = 1000, ""
        with trio.CancelScope() as scope:
            self._scopes[ws] = scope
            try:
                await ProtocolSession(self._services, ws, client=client).run()
            finally:
                del self._scopes[ws]
        if scope.cancelled_caught:
            code, reason = GOING_AWAY, "server shutting down"
        with trio.CancelScope(shield=True):
            await ws.close(code, reason)

    @property
    def sessions(self) -> int:
        """WebSocket connections open now (authenticated or not yet)."""
        return len(self._scopes)

    def shut_down(self) -> None:
        """Tell every session the node is going away (their tasks then end)."""
        self._closing = True
        for scope in self._scopes.values():
            scope.cancel()


def _peer_address(stream: trio.abc.Stream) -> str | None:
    """The client's IP address, if *stream* is a socket that knows it."""
    inner = getattr(stream, "transport_stream", stream)  # under TLS
    sock = getattr(inner, "socket", None)
    try:
        peer = sock.getpeername() if sock is not None else None
    except OSError:
        return None
    if isinstance(peer, tuple) and peer and isinstance(peer[0], str):
        return peer[0]
    return None
