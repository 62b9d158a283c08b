"""Pipelined sends over a served node: what a client sent before it left is stored.

A client may send many ``send_message`` frames without waiting for their
echoes, then close (or just hang up). Every frame the node read before the
end of the stream must be stored, though the session's writer meets the
closed connection at its first echo.

Rules: loopback only, port 0, every wait bounded; each case runs a few
times (a race is what it guards against).
"""

from __future__ import annotations

import json

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Request, TextMessage

from tests.helpers import Mesh, User, open_client

#: sends pipelined per connection (the most one page of messages holds)
N = 200
RUNS = 3


def _sends(room_id: str, run: int) -> list[str]:
    return [
        json.dumps({"type": "send_message", "roomId": room_id, "content": f"r{run} m{i}"})
        for i in range(N)
    ]


async def _stored(mesh: Mesh, user: User, room_id: str) -> list[str]:
    """The room's contents once they stop growing (at most 10 s)."""
    contents: list[str] = []
    with trio.move_on_after(10):
        while len(contents) < N:
            page = await mesh.messages(user, room_id, limit=N)
            contents = [m["content"] for m in page]
            await trio.sleep(0.05)
    return contents


async def test_sends_pipelined_before_a_close_are_all_stored(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()  # the owner is never rate-limited
    for run in range(RUNS):
        room_id = (await mesh.create_room(owner, f"pipeline {run}"))["roomId"]
        async with open_client(base_url, message_queue_size=4096) as ws:
            await ws.send_message(json.dumps({"type": "authenticate", "token": owner.token}))
            with trio.fail_after(5):
                assert json.loads(await ws.get_message())["type"] == "auth_ok"
                assert json.loads(await ws.get_message())["type"] == "snapshot"
            for text in _sends(room_id, run):
                await ws.send_message(text)
            # leaving the block sends the close frame at once
        contents = await _stored(mesh, owner, room_id)
        assert contents == [f"r{run} m{i}" for i in range(N)], (run, len(contents))


async def test_sends_pipelined_before_a_hang_up_are_all_stored(base_url: str, mesh: Mesh) -> None:
    """The client writes its sends and a close frame, then closes its socket
    without reading anything (the kernel resets the connection when the
    echoes reach it)."""
    owner = await mesh.setup()
    host, port = base_url.removeprefix("http://").split(":")
    for run in range(RUNS):
        room_id = (await mesh.create_room(owner, f"hang up {run}"))["roomId"]
        client = WSConnection(ConnectionType.CLIENT)
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(client.send(Request(host=host, target="/ws")))
            with trio.fail_after(5):
                while True:
                    client.receive_data(await stream.receive_some(65536))
                    if any(isinstance(e, AcceptConnection) for e in client.events()):
                        break
            auth = json.dumps({"type": "authenticate", "token": owner.token})
            data = [client.send(TextMessage(auth))]
            data += [client.send(TextMessage(text)) for text in _sends(room_id, run)]
            data.append(client.send(CloseConnection(code=1000)))
            await stream.send_all(b"".join(data))
        contents = await _stored(mesh, owner, room_id)
        assert contents == [f"r{run} m{i}" for i in range(N)], (run, len(contents))
