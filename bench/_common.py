"""Shared pieces of the benchmarks: a lean WebSocket client, server processes,
CPU accounting, statistics. Clients always run in a different process from
the server, on loopback."""

from __future__ import annotations

import base64
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import trio

ROOT = Path(__file__).resolve().parent.parent
_LISTENING = re.compile(rb"listening on (http://\S+)")


def raise_fd_limit() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class RawWs:
    """A minimal WebSocket client: just enough framing for a load generator
    that must not be the bottleneck (no per-frame JSON unless asked)."""

    def __init__(self, stream: trio.SocketStream, buffer: bytes) -> None:
        self.stream = stream
        self.buffer = bytearray(buffer)
        self.pending: list[bytes] = []

    @classmethod
    async def connect(cls, host: str, port: int, path: str = "/ws") -> RawWs:
        stream = await trio.open_tcp_stream(host, port)
        key = base64.b64encode(os.urandom(16))
        await stream.send_all(
            b"GET " + path.encode() + b" HTTP/1.1\r\nHost: bench\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Key: " + key + b"\r\n"
            b"Sec-WebSocket-Version: 13\r\n\r\n"
        )
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(65536)
            if not chunk:
                raise ConnectionError("closed during handshake")
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            raise ConnectionError(head[:80].decode(errors="replace"))
        return cls(stream, rest)

    async def send_text(self, text: str) -> None:
        payload = text.encode()
        n = len(payload)
        if n < 126:
            head = bytes((0x81, 0x80 | n))
        elif n < 65536:
            head = bytes((0x81, 0x80 | 126)) + n.to_bytes(2, "big")
        else:
            head = bytes((0x81, 0x80 | 127)) + n.to_bytes(8, "big")
        # a zero masking key leaves the payload as is (legal, and cheap)
        await self.stream.send_all(head + b"\x00\x00\x00\x00" + payload)

    def _frames(self) -> list[bytes]:
        out = []
        buf = self.buffer
        pos = 0
        while len(buf) - pos >= 2:
            n = buf[pos + 1] & 0x7F
            start = pos + 2
            if n == 126:
                if len(buf) - pos < 4:
                    break
                n = int.from_bytes(buf[pos + 2 : pos + 4], "big")
                start = pos + 4
            elif n == 127:
                if len(buf) - pos < 10:
                    break
                n = int.from_bytes(buf[pos + 2 : pos + 10], "big")
                start = pos + 10
            if len(buf) - start < n:
                break
            if buf[pos] & 0x0F == 0x1:
                out.append(bytes(buf[start : start + n]))
            pos = start + n
        del buf[:pos]
        return out

    async def receive_batch(self) -> list[bytes]:
        """Whatever complete text frames have arrived (waits for at least one)."""
        if self.pending:
            frames, self.pending = self.pending, []
            return frames
        while True:
            frames = self._frames()
            if frames:
                return frames
            chunk = await self.stream.receive_some(262144)
            if not chunk:
                raise ConnectionError("closed")
            self.buffer += chunk

    async def receive_json(self) -> dict[str, Any]:
        """The next frame, decoded (frames of the same read wait in ``pending``)."""
        if not self.pending:
            self.pending.extend(await self.receive_batch())
        return dict(json.loads(self.pending.pop(0)))

    async def aclose(self) -> None:
        await self.stream.aclose()


@dataclass
class ServerProcess:
    process: subprocess.Popen[bytes]
    url: str

    @property
    def host_port(self) -> tuple[str, int]:
        host, port = self.url.removeprefix("http://").split(":")
        return host, int(port)

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.process.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks

    def rss_bytes(self) -> int:
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def start_server(kind: str, data_dir: Path, *extra: str) -> ServerProcess:
    """Start a server process: ``node``, ``node-nostore`` or ``trio-websocket``."""
    return spawn([sys.executable, str(ROOT / "bench" / "_servers.py"), kind, str(data_dir), *extra])


def spawn(args: list[str], env: dict[str, str] | None = None) -> ServerProcess:
    """Start a process that prints ``listening on http://...``; wait for that line.
    Its output keeps being read so the pipe never fills (into the file named by
    ``BENCH_SERVER_LOG``, if set)."""
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    assert process.stdout is not None
    output = b""
    deadline = time.monotonic() + 30
    while not (match := _LISTENING.search(output)):
        line = process.stdout.readline()
        if not line or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"did not start: {output.decode(errors='replace')}")
        output += line
    log_path = os.environ.get("BENCH_SERVER_LOG")

    def drain() -> None:
        assert process.stdout is not None
        with open(log_path or os.devnull, "ab") as log:
            log.write(output)
            for line in process.stdout:
                log.write(line)
                log.flush()

    threading.Thread(target=drain, daemon=True).start()
    return ServerProcess(process, match.group(1).decode())


async def setup_mesh(url: str, senders: int, receivers: int) -> dict[str, Any]:
    """Owner, a room, *senders* members and *receivers* guests, all in the room."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        r = await http.post(
            "/api/setup/init",
            json={"name": "owner", "password": "bench passphrase", "meshName": "bench"},
        )
        owner = r.json()
        headers = {"Authorization": f"Bearer {owner['token']}"}
        room = (await http.post("/api/rooms", json={"name": "bench"}, headers=headers)).json()
        tokens = [owner["token"]]
        for i in range(senders - 1):
            r = await http.post(
                "/api/auth/register", json={"name": f"sender{i}", "password": "bench passphrase"}
            )
            tokens.append(r.json()["token"])
        guests = []
        for _ in range(receivers):
            guests.append((await http.post("/api/auth/guest")).json()["token"])
        for token in tokens[1:] + guests:
            await http.post(
                f"/api/rooms/{room['roomId']}/join", headers={"Authorization": f"Bearer {token}"}
            )
    return {"room": room["roomId"], "senders": tokens, "receivers": guests}


async def authenticate(ws: RawWs, token: str) -> None:
    await ws.send_text(json.dumps({"type": "authenticate", "token": token}))
    seen: set[str] = set()
    while "snapshot" not in seen:
        seen.add((await ws.receive_json())["type"])


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def command_line() -> str:
    return "python " + " ".join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]])


def python_client(script: str) -> list[str]:
    """The command line of *script*'s own load generator (run with ``--client``)."""
    return [sys.executable, script, "--client"]


def start_client(command: list[str], job: dict[str, Any]) -> subprocess.Popen[str]:
    """A load-generator process running *command*, given *job* as one JSON
    line on its standard input."""
    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(job) + "\n")
    proc.stdin.flush()
    return proc
