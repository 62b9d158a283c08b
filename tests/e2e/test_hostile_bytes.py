"""The node survives any bytes any client sends (hypercorn #225 and friends).

Raw sockets send what no well-behaved client would; afterwards the node must
still serve an honest WebSocket client and HTTP, and hold no leftover tasks.
"""

from __future__ import annotations

import base64
import os
import struct

import httpx
import trio

from tests.e2e.test_bad_input import count_tasks, settle_to
from tests.helpers import Mesh, User, connect

UPGRADE = (
    b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def client_frame(
    payload: bytes, opcode: int = 0x1, fin: bool = True, length: int | None = None
) -> bytes:
    """A masked client frame; *length* may lie about the payload size."""
    n = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def poke(host: str, port: int, data: bytes, *, read: bool = True) -> bytes:
    stream = await trio.open_tcp_stream(host, port)
    received = b""
    try:
        await stream.send_all(data)
        if read:
            with trio.move_on_after(0.5):
                while chunk := await stream.receive_some(65536):
                    received += chunk
    except trio.BrokenResourceError:
        pass
    finally:
        await stream.aclose()
    return received


async def test_hostile_bytes_leave_the_node_serving(base_url: str, mesh: Mesh) -> None:
    owner: User = await mesh.setup()
    room_id = (await mesh.create_room(owner, "survivors"))["roomId"]
    host, port_text = base_url.removeprefix("http://").split(":")
    port = int(port_text)
    async with httpx.AsyncClient(base_url=base_url) as http:
        assert (await http.get("/api/health")).status_code == 200
    baseline = count_tasks()

    authenticate = client_frame(b'{"type":"authenticate","token":"%s"}' % owner.token.encode())
    cases = [
        UPGRADE + b"\x00",  # hypercorn #225: an upgrade followed by a stray byte
        UPGRADE + b"x" * 10,
        UPGRADE[:-2] + b"\r\nGARBAGE",
        b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n",  # no key, no version
        b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: short\r\nSec-WebSocket-Version: 99\r\n\r\n",
        UPGRADE + client_frame(b"x" * 10, length=500),  # truncated frame, then EOF
        UPGRADE + client_frame(b"\xff\xfe invalid utf-8"),
        UPGRADE + authenticate + client_frame(b"\xc3\x28"),
        UPGRADE + authenticate + client_frame(b"a" * 200_000),  # oversized
        UPGRADE + authenticate + client_frame(b"half", fin=False) + client_frame(b"x", opcode=0x1),
        UPGRADE + client_frame(b"", opcode=0x9) + client_frame(b"x" * 200, opcode=0x9),  # long ping
        UPGRADE + client_frame(b"", opcode=0x3),  # reserved opcode
        UPGRADE + b"\x81\x05hello",  # unmasked client frame
        UPGRADE + client_frame(b"\x03\xe8", opcode=0x8),  # close
        b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + os.urandom(64),  # TLS hello
        os.urandom(300),
        b"GET /ws HTTP/1.1\r\n" + b"X: " + b"y" * 20_000 + b"\r\n\r\n",
    ]
    for data in cases:
        await poke(host, port, data)
    # connections that never authenticate, or never finish their request head
    streams = []
    for i in range(200):
        stream = await trio.open_tcp_stream(host, port)
        await stream.send_all(UPGRADE if i % 2 else b"GET /api/heal")
        streams.append(stream)
    async with connect(base_url, owner) as ws:
        await ws.send(type="send_message", roomId=room_id, content="still standing")
        assert (await ws.expect("message"))["content"] == "still standing"
    async with httpx.AsyncClient(base_url=base_url) as http:
        assert (await http.get("/api/health")).json()["ok"] is True
    for stream in streams:
        await stream.aclose()
    # hypercorn keeps a connection that closed mid-request for its keep-alive
    # timeout (5 s) before its tasks end: allow for that, and no more
    assert await settle_to(baseline, within=10) <= baseline


async def test_pings_are_answered(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    host, port_text = base_url.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port_text))
    token = owner.token.encode()
    await stream.send_all(
        UPGRADE
        + client_frame(b'{"type":"authenticate","token":"%s"}' % token)
        + client_frame(b"are you there", opcode=0x9)
    )
    received = b""
    with trio.fail_after(5):
        while b"\x8a\x0dare you there" not in received:
            received += await stream.receive_some(65536)
    assert received.startswith(b"HTTP/1.1 101")
    await stream.aclose()


def test_key_is_base64() -> None:  # the handshake key used above is valid
    assert len(base64.b64decode(b"dGhlIHNhbXBsZSBub25jZQ==")) == 16
