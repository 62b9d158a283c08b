"""A small real HTTP/1.1 server for tests: plays the services the node calls
(a webhook receiver). Built on h11 over trio sockets; records every request."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import h11
import trio


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


#: answers a request with (status, JSON body or None)
Handler = Callable[[Request], tuple[int, Any]]


@dataclass
class Receiver:
    handler: Handler = field(default=lambda request: (200, None))
    requests: list[Request] = field(default_factory=list)
    port: int = 0
    _scope: trio.CancelScope | None = None

    async def start(self, nursery: trio.Nursery, port: int = 0) -> int:
        """Listen on 127.0.0.1 (*port*, or a free one); returns the port."""
        scope = trio.CancelScope()
        self._scope = scope

        async def serve(task_status: trio.TaskStatus[int]) -> None:
            with scope:
                listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
                task_status.started(listeners[0].socket.getsockname()[1])
                await trio.serve_listeners(self._connection, listeners)

        self.port = await nursery.start(serve)
        return self.port

    def stop(self) -> None:
        """Stop listening (connections are refused afterwards)."""
        if self._scope is not None:
            self._scope.cancel()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def _connection(self, stream: trio.SocketStream) -> None:
        async with stream:
            conn = h11.Connection(h11.SERVER)
            recorded = await read_request(stream, conn)
            if recorded is None:
                return
            self.requests.append(recorded)
            status, answer = self.handler(recorded)
            payload = b"" if answer is None else json.dumps(answer).encode()
            headers = [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(payload))),
                ("Connection", "close"),
            ]
            await stream.send_all(conn.send(h11.Response(status_code=status, headers=headers)))
            await stream.send_all(conn.send(h11.Data(data=payload)))
            await stream.send_all(conn.send(h11.EndOfMessage()))


async def read_request(stream: trio.SocketStream, conn: h11.Connection) -> Request | None:
    """Read one HTTP request off *stream*; ``None`` if the client hung up first."""
    request: h11.Request | None = None
    body = b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(65536)
            if not data:
                return None
            conn.receive_data(data)
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            assert request is not None
            return Request(
                request.method.decode(),
                request.target.decode(),
                {k.decode().lower(): v.decode() for k, v in request.headers},
                body,
            )
        elif isinstance(event, h11.ConnectionClosed):
            return None


def free_port() -> int:
    """A port nothing listens on (for a receiver that is down, for now)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
