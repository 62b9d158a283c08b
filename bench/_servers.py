"""Server processes for the benchmarks.

    python bench/_servers.py node DATA_DIR            the node, as shipped
    python bench/_servers.py node-nostore DATA_DIR    the node's send path without the store
    python bench/_servers.py trio-websocket DATA_DIR  a minimal trio-websocket broadcast server

An optional third argument is the port (default: any free one).

Each prints ``listening on http://HOST:PORT`` and runs until SIGTERM.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
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
    app = create_app(settings)
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


def main() -> None:
    raise_fd_limit()
    kind, data_dir = sys.argv[1], Path(sys.argv[2])
    port = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    if kind == "trio-websocket":
        trio.run(run_trio_websocket)
    else:
        trio.run(lambda: run_node(data_dir, store=kind == "node", port=port))


if __name__ == "__main__":
    main()
