"""Server processes for the benchmarks.

    python bench/_servers.py node DATA_DIR            the node, as shipped
    python bench/_servers.py node-nostore DATA_DIR    the node's send path without the store
    python bench/_servers.py trio-websocket DATA_DIR  a minimal trio-websocket broadcast server
    python bench/_servers.py websockets DATA_DIR      the websockets library's broadcast() server
    python bench/_servers.py asgi-raw DATA_DIR        a raw ASGI app on hypercorn's trio worker
    python bench/_servers.py quart-bare DATA_DIR      a bare Quart-Trio app, same worker

An optional third argument is the port (default: any free one).

Each prints ``listening on http://HOST:PORT`` and runs until SIGTERM.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
from functools import partial
from itertools import count
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import raise_fd_limit


async def until_terminated() -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            return


async def run_node(data_dir: Path, *, store: bool, port: int = 0) -> None:
    from quart_mesh import Settings, create_app, serve
    from quart_mesh.config import RateLimits
    from quart_mesh.events import MessagePosted
    from quart_mesh.ids import new_id
    from quart_mesh.records import Message, now_ms
    from quart_mesh.services.authz import RoomRef, authorize
    from quart_mesh.services.messages import Messages
    from quart_mesh.services.validation import check_content

    if not store:
        seq = count(1_000_000)

        def send_without_store(
            self: Messages,
            actor,
            room_id,
            content,
            *,
            to=None,
            thread_id=None,
            attachments=None,
            client_id=None,
        ):  # type: ignore[no-untyped-def]
            """Messages.submit_send minus the store: same checks, same publish
            (no attachments: the benchmark sends none)."""
            authorize(actor, "messages.send", RoomRef(room_id))
            check_content(content, self._limits)
            if room_id not in self._broker.rooms_of(actor.participant_id):
                raise ValueError("not a member")
            message = Message(
                next(seq),
                new_id(),
                room_id,
                actor.participant_id,
                actor.name,
                content,
                now_ms(),
                to_id=to,
                thread_id=thread_id,
                client_id=client_id,
            )
            self._broker.publish(MessagePosted(room_id, message=message))

            async def done() -> Message:
                return message

            return done()

        Messages.submit_send = send_without_store  # type: ignore[method-assign]

    # benchmarks measure throughput: the per-participant rate limits are off
    settings = Settings(
        data_dir=data_dir, subscriber_buffer=4096, rate_limits=RateLimits(enabled=False)
    )
    app = create_app(settings, freeze_heap=True)
    await serve(app, host="127.0.0.1", port=port, shutdown_trigger=until_terminated)


async def run_trio_websocket() -> None:
    """The minimal broadcast server most people would write with trio-websocket."""
    from trio_websocket import ConnectionClosed, WebSocketRequest, serve_websocket

    clients: set = set()  # type: ignore[type-arg]

    async def handler(request: WebSocketRequest) -> None:
        ws = await request.accept()
        clients.add(ws)
        try:
            while True:
                frame = json.loads(await ws.get_message())
                if frame.get("type") == "authenticate":
                    await ws.send_message('{"type":"auth_ok"}')
                    await ws.send_message('{"type":"snapshot","rooms":[],"participants":[]}')
                elif frame.get("type") == "send_message":
                    text = json.dumps(
                        {"type": "message", "content": frame["content"]}, separators=(",", ":")
                    )
                    for other in list(clients):
                        try:
                            await other.send_message(text)
                        except ConnectionClosed:
                            clients.discard(other)
        except ConnectionClosed:
            pass
        finally:
            clients.discard(ws)

    async with trio.open_nursery() as nursery:
        servers = await nursery.start(serve_websocket, handler, "127.0.0.1", 0, None)
        port = servers.port
        print(f"listening on http://127.0.0.1:{port}", flush=True)
        await until_terminated()
        nursery.cancel_scope.cancel()


async def run_websockets_broadcast(port: int = 0) -> None:
    """The broadcast server of the ``websockets`` library's documentation:
    asyncio, ``websockets.broadcast()`` to every authenticated connection
    (one room, no store, no checks). It answers ``authenticate`` with
    ``auth_ok`` and an empty ``snapshot``, and each ``send_message`` with a
    ``message`` frame (content and clientId) to everyone, the sender included."""
    import asyncio

    from websockets.asyncio.server import ServerConnection, broadcast, serve

    clients: set[ServerConnection] = set()
    dumps = json.JSONEncoder(separators=(",", ":")).encode

    async def handler(ws: ServerConnection) -> None:
        try:
            async for raw in ws:
                frame = json.loads(raw)
                kind = frame.get("type")
                if kind == "send_message":
                    message = {
                        "type": "message",
                        "roomId": frame.get("roomId"),
                        "content": frame.get("content"),
                    }
                    if "clientId" in frame:
                        message["clientId"] = frame["clientId"]
                    broadcast(clients, dumps(message))
                elif kind == "authenticate":
                    await ws.send('{"type":"auth_ok","participantId":"p"}')
                    await ws.send('{"type":"snapshot","rooms":[],"participants":[],"cursor":"0"}')
                    clients.add(ws)
        finally:
            clients.discard(ws)

    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set_result, None)
    async with serve(handler, "127.0.0.1", port, compression=None, max_queue=None) as server:
        bound = next(iter(server.sockets)).getsockname()[1]
        print(f"listening on http://127.0.0.1:{bound}", flush=True)
        await stop


#: what the HTTP ceilings answer: about the size of the node's ``/api/mesh/settings``
SETTINGS_BODY = b'{"name":"bench","description":"","visibility":"public"}'


async def raw_asgi_app(scope: dict, receive, send) -> None:  # type: ignore[no-untyped-def,type-arg]
    """The stack's ceiling: an ASGI app that answers every request with a
    small JSON body, no framework."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    elif scope["type"] == "http":
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(SETTINGS_BODY)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": SETTINGS_BODY})


def bare_quart_app():  # type: ignore[no-untyped-def]
    """A bare Quart-Trio app: one JSON route (and ``/api/health``), nothing else."""
    from quart_trio import QuartTrio

    app = QuartTrio("quart_bare")
    settings = json.loads(SETTINGS_BODY)

    @app.get("/api/mesh/settings")
    async def mesh_settings():  # type: ignore[no-untyped-def]
        return settings

    @app.get("/api/health")
    async def health():  # type: ignore[no-untyped-def]
        return {"ok": True}

    @app.post("/api/rooms/<room_id>/messages")
    async def post_message(room_id: str):  # type: ignore[no-untyped-def]
        """The POST ceiling: a JSON body read and parsed, a bearer token
        looked at, a 201 with a message-sized JSON answer (no store)."""
        from quart import request

        if not request.headers.get("Authorization", "").startswith("Bearer "):
            return {"error": "authentication required", "code": "unauthorized"}, 401
        body = await request.get_json()
        if not isinstance(body, dict) or not isinstance(body.get("content"), str):
            return {"error": "content is required", "code": "bad_request"}, 400
        return {
            "messageId": "01KBENCHBENCHBENCHBENCHBEN",
            "roomId": room_id,
            "senderId": "01KBENCHBENCHBENCHBENCHBEN",
            "senderName": "bench",
            "content": body["content"],
            "createdAt": 0,
            "cursor": "1",
        }, 201

    return app


async def run_hypercorn(app, port: int = 0) -> None:  # type: ignore[no-untyped-def]
    """*app* under hypercorn's trio worker, configured as the node configures it."""
    from hypercorn.config import Config
    from hypercorn.trio import serve

    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.keep_alive_timeout = 5.0
    config.errorlog = logging.getLogger("hypercorn.error")
    config.errorlog.setLevel(logging.WARNING)
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, app, config, shutdown_trigger=until_terminated))
        print(f"listening on {binds[0]}", flush=True)


def main() -> None:
    raise_fd_limit()
    kind, data_dir = sys.argv[1], Path(sys.argv[2])
    port = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    if kind == "trio-websocket":
        trio.run(run_trio_websocket)
    elif kind == "websockets":
        import asyncio

        asyncio.run(run_websockets_broadcast(port))
    elif kind == "asgi-raw":
        trio.run(run_hypercorn, raw_asgi_app, port)
    elif kind == "quart-bare":
        trio.run(run_hypercorn, bare_quart_app(), port)
    else:
        trio.run(lambda: run_node(data_dir, store=kind == "node", port=port))


if __name__ == "__main__":
    main()
