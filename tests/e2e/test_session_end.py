"""A session whose start fails (the store unavailable while its snapshot is
read) and whose client has hung up meanwhile ends at once: it does not stay
open, and its participant online, until its token expires."""

from __future__ import annotations

import json
import socket
import struct
from functools import partial
from pathlib import Path

import httpx
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import Request, TextMessage

from quart_mesh import Settings, create_app, serve
from quart_mesh.errors import Unavailable
from tests.helpers import Mesh


async def test_a_failed_start_after_a_hang_up_ends_the_session(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    app = create_app(Settings(data_dir=tmp_path / "mesh-data"))
    url: str = await nursery.start(partial(serve, app, port=0))
    port = int(url.rsplit(":", 1)[1])
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        owner = await Mesh(http).setup()
    realtime = app.node.realtime
    reading, hung_up = trio.Event(), trio.Event()

    async def snapshot_frame(actor: object) -> str:
        reading.set()
        await hung_up.wait()
        raise Unavailable("the store is down (injected)", "storage_unavailable")

    app.node.world.snapshot_frame = snapshot_frame  # type: ignore[method-assign]

    with trio.fail_after(20):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        client = WSConnection(ConnectionType.CLIENT)
        await stream.send_all(client.send(Request(host=f"127.0.0.1:{port}", target="/ws")))
        client.receive_data(await stream.receive_some(65536))  # the 101 answer
        frame = json.dumps({"type": "authenticate", "token": owner.token})
        await stream.send_all(client.send(TextMessage(data=frame)))
        await reading.wait()
        assert realtime.sessions == 1
        # a reset, not a polite close: the node's next write fails at once
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await stream.aclose()
        hung_up.set()
        while realtime.sessions:  # ends now, not when the token expires
            await trio.sleep(0.05)
    nursery.cancel_scope.cancel()
