"""Many idle sessions and connection storms (issue 16): memory per
authenticated idle WebSocket session, the cost of opening them, and one
message to a room with all of them.

For each count (default 1,000 and 5,000), a fresh node and a fresh mesh of
``--participants`` guests (all members of one room), of which
``--connected`` hold the sessions (round-robin: most participants are
registered but not connected, and each connected one has several
sessions). ``--clients`` load-generator processes open the sessions,
``--in-flight`` at a time in all, each timing TCP connect → ``auth_ok`` →
``snapshot`` received (the snapshot is not decoded: the client must not be
the bottleneck; its own CPU is printed). Then, with every session idle:

- KiB per session: the server's RSS after the storm minus before, per session;
- the storm's wall time and server CPU, and handshake→snapshot p50/p99;
- one ``POST /api/rooms/:id/messages`` by the owner: the time to its 201
  and until the last of the sessions received the ``message`` (client and
  conductor read one wall clock).

    python bench/bench_idle.py [--counts 1000 5000] [--participants 500]
        [--connected 50] [--in-flight 200] [--clients 2] [--runs 1]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common
import httpx
import trio
from _common import (
    RawWs,
    ServerProcess,
    command_line,
    median,
    percentile,
    raise_fd_limit,
    start_server,
)
from bench_speed import find_node

_SNAPSHOT = b'{"type":"snapshot"'
_MESSAGE = b'"type":"message"'

# --------------------------------------------------------------------------
# a load-generator process


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Ends:
    """Sessions that got the message, or ended; ``done`` once all have."""

    def __init__(self) -> None:
        self.arrivals: list[float] = []
        self.closed: list[str] = []
        self.sessions = 0
        self.done = trio.Event()

    def check(self) -> None:
        if len(self.arrivals) + len(self.closed) >= self.sessions:
            self.done.set()


async def _follow(ws: RawWs, ends: _Ends) -> None:
    """Read everything the session is sent, answering pings (an idle client
    is still alive), and note when the first ``message`` frame arrives."""
    buf = ws.buffer
    waiting = True
    try:
        while True:
            pos = 0
            while len(buf) - pos >= 2:
                n = buf[pos + 1] & 0x7F
                start = pos + 2
                if n == 126:
                    if len(buf) - pos < 4:
                        break
                    n, start = int.from_bytes(buf[pos + 2 : pos + 4], "big"), pos + 4
                elif n == 127:
                    if len(buf) - pos < 10:
                        break
                    n, start = int.from_bytes(buf[pos + 2 : pos + 10], "big"), pos + 10
                if len(buf) - start < n:
                    break
                opcode = buf[pos] & 0x0F
                if opcode == 0x9:  # ping: pong with its payload (a zero mask)
                    payload = bytes(buf[start : start + n])
                    await ws.stream.send_all(bytes((0x8A, 0x80 | n)) + bytes(4) + payload)
                elif opcode == 0x8:
                    ends.closed.append("close frame")
                    ends.check()
                    return
                elif waiting and opcode == 0x1 and _MESSAGE in buf[start : start + n]:
                    ends.arrivals.append(time.time())
                    ends.check()
                    waiting = False
                pos = start + n
            del buf[:pos]
            chunk = await ws.stream.receive_some(262144)
            if not chunk:
                ends.closed.append("closed")
                ends.check()
                return
            buf += chunk
    except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        ends.closed.append(repr(exc)[:200])
        ends.check()


async def _client(job: dict[str, Any]) -> None:
    host, port = job["host"], job["port"]
    limiter = trio.CapacityLimiter(job["in_flight"])
    sockets: list[RawWs] = []
    latencies: list[float] = []
    errors: list[str] = []
    ends = _Ends()

    async with trio.open_nursery() as following:

        async def open_one(token: str) -> None:
            async with limiter:
                start = time.perf_counter()
                try:
                    ws = await RawWs.connect(host, port)
                    await ws.send_text(json.dumps({"type": "authenticate", "token": token}))
                    while not any(f.startswith(_SNAPSHOT) for f in await ws.receive_batch()):
                        pass
                except (OSError, ConnectionError, trio.BrokenResourceError) as exc:
                    errors.append(repr(exc)[:200])
                    return
                latencies.append(time.perf_counter() - start)
                sockets.append(ws)
                following.start_soon(_follow, ws, ends)

        cpu0, wall0 = _cpu(), time.perf_counter()
        async with trio.open_nursery() as nursery:
            for token in job["tokens"]:
                nursery.start_soon(open_one, token)
        report = {
            "latencies": latencies,
            "errors": errors,
            "wall": time.perf_counter() - wall0,
            "cpu": _cpu() - cpu0,
        }
        print(json.dumps(report), flush=True)
        await trio.to_thread.run_sync(sys.stdin.readline)  # "wait": the message is coming
        cpu0 = _cpu()
        ends.sessions = len(sockets)
        ends.check()
        with trio.move_on_after(60):
            await ends.done.wait()
        result = {"arrivals": ends.arrivals, "closed": ends.closed, "cpu": _cpu() - cpu0}
        print(json.dumps(result), flush=True)
        await trio.to_thread.run_sync(sys.stdin.readline)  # "quit"
        following.cancel_scope.cancel()
    for ws in sockets:
        await ws.aclose()


def client_main() -> None:
    raise_fd_limit()
    trio.run(_client, json.loads(sys.stdin.readline()))


# --------------------------------------------------------------------------
# the conductor


async def _setup(url: str, participants: int) -> tuple[str, str, list[str]]:
    """Owner, one room, *participants* guests, all members: (owner token, room, tokens)."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        r = await http.post(
            "/api/setup/init",
            json={"name": "owner", "password": "bench passphrase", "meshName": "bench"},
        )
        owner = r.json()["token"]
        headers = {"Authorization": f"Bearer {owner}"}
        room = (await http.post("/api/rooms", json={"name": "bench"}, headers=headers)).json()
        room_id = room["roomId"]
        tokens: list[str] = []
        limiter = trio.CapacityLimiter(8)

        async def guest() -> None:
            async with limiter:
                token = (await http.post("/api/auth/guest")).json()["token"]
                r = await http.post(
                    f"/api/rooms/{room_id}/join", headers={"Authorization": f"Bearer {token}"}
                )
                r.raise_for_status()
                tokens.append(token)

        async with trio.open_nursery() as nursery:
            for _ in range(participants):
                nursery.start_soon(guest)
    return owner, room_id, tokens


_IDLE_MJS = Path(__file__).resolve().parent / "native" / "idle.mjs"


def _start_client(job: dict[str, Any], node: str | None) -> subprocess.Popen[str]:
    """A load-generator process given *job*: Node.js with ``ws``
    (``native/idle.mjs``) if *node*, else this script's own Python client
    (the same line protocol)."""
    command = _common.python_client(__file__) if node is None else [node, str(_IDLE_MJS)]
    return _common.start_client(command, job)


async def _line(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    line = await trio.to_thread.run_sync(proc.stdout.readline)
    if not line:
        raise RuntimeError("a client process died")
    found = dict(json.loads(line))
    if "fatal" in found:
        raise RuntimeError(f"a client process failed: {found['fatal']}")
    return found


def _tell(procs: list[subprocess.Popen[str]], word: str) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(word + "\n")
        proc.stdin.flush()


async def storm(count: int, args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server("node", Path(tmp))
        procs: list[subprocess.Popen[str]] = []
        try:
            return await _storm(server, count, args, procs)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
            server.stop()


async def _storm(
    server: ServerProcess, count: int, args: argparse.Namespace, procs: list[subprocess.Popen[str]]
) -> dict[str, float]:
    owner, room, tokens = await _setup(server.url, args.participants)
    host, port = server.host_port
    connected = tokens[: args.connected]
    sessions = [connected[i % len(connected)] for i in range(count)]
    # warm up the paths once, then measure from a settled baseline
    warm = await RawWs.connect(host, port)
    await warm.send_text(json.dumps({"type": "authenticate", "token": connected[0]}))
    while not any(f.startswith(_SNAPSHOT) for f in await warm.receive_batch()):
        pass
    await warm.aclose()
    await trio.sleep(1.5)
    print(f"  storm of {count} begins (server pid {server.process.pid})", flush=True)
    rss0, cpu0, wall0 = server.rss_bytes(), server.cpu_seconds(), time.perf_counter()
    clients = args.clients
    for i in range(clients):
        job = {
            "host": host,
            "port": port,
            "tokens": sessions[i::clients],
            "in_flight": max(1, args.in_flight // clients),
        }
        procs.append(_start_client(job, args.node))
    reports = [await _line(proc) for proc in procs]
    wall, cpu = time.perf_counter() - wall0, server.cpu_seconds() - cpu0
    await trio.sleep(2.0)  # presence settles; the snapshots are out
    rss1 = server.rss_bytes()
    latencies = [x for r in reports for x in r["latencies"]]
    errors = [e for r in reports for e in r["errors"]]
    _tell(procs, "wait")
    await trio.sleep(0.5)
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
        posted = time.time()
        r = await http.post(
            f"/api/rooms/{room}/messages",
            json={"content": "hello everyone"},
            headers={"Authorization": f"Bearer {owner}"},
        )
        acked = time.time()
        r.raise_for_status()
    arrived = [await _line(proc) for proc in procs]
    arrivals = [x for a in arrived for x in a["arrivals"]]
    closed = [x for a in arrived for x in a["closed"]]
    if closed:
        print(f"  {len(closed)} sessions ended before the message, e.g. {closed[0]}")
    _tell(procs, "quit")
    if errors:
        print(f"  {len(errors)} sessions failed, e.g. {errors[0]}")
    return {
        "kib": (rss1 - rss0) / count / 1024,
        "rss": rss1 / 2**20,
        "wall": wall,
        "cpu": cpu,
        "client_cpu": sum(r["cpu"] for r in reports),
        "p50": percentile(latencies, 50) * 1e3,
        "p99": percentile(latencies, 99) * 1e3,
        "failed": len(errors),
        "ack": (acked - posted) * 1e3,
        "last": (max(arrivals) - posted) * 1e3 if arrivals else float("nan"),
        "first": (min(arrivals) - posted) * 1e3 if arrivals else float("nan"),
        "received": len(arrivals),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--participants", type=int, default=500)
    parser.add_argument("--connected", type=int, default=50)
    parser.add_argument("--in-flight", type=int, default=200)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--client",
        choices=["node", "python"],
        default="node",
        help="load generator: Node.js with ws (native/idle.mjs; python if Node.js or ws "
        "is missing) or this script's Python client",
    )
    args = parser.parse_args()
    args.node = find_node() if args.client == "node" else None
    raise_fd_limit()
    print(f"load average before: {os.getloadavg()[0]:.2f} (cores: {os.cpu_count()})")
    print(
        f"\nidle authenticated sessions: {args.participants} participants in the mesh, "
        f"{args.connected} of them connected, {args.in_flight} sessions opening at a time "
        f"from {args.clients} client processes "
        f"({'Node.js ws, native/idle.mjs' if args.node else 'Python, this script'}); "
        f"median of {args.runs} run(s)"
    )
    columns = (
        f"{'sessions':>9}{'KiB each':>9}{'RSS MiB':>8}{'open s':>8}{'srv CPU s':>10}"
        f"{'cli CPU s':>10}{'p50 ms':>8}{'p99 ms':>8}{'201 ms':>8}{'first ms':>9}"
        f"{'last ms':>8}{'got':>6}"
    )
    print(columns)
    for count in args.counts:
        rows = [await storm(count, args) for _ in range(args.runs)]

        def med(key: str, rows: list[dict[str, float]] = rows) -> float:
            return median([r[key] for r in rows])

        print(
            f"{count:>9}{med('kib'):>9.1f}{med('rss'):>8.0f}{med('wall'):>8.1f}"
            f"{med('cpu'):>10.1f}{med('client_cpu'):>10.1f}{med('p50'):>8.0f}"
            f"{med('p99'):>8.0f}{med('ack'):>8.0f}{med('first'):>9.0f}{med('last'):>8.0f}"
            f"{med('received'):>6.0f}",
            flush=True,
        )
    print(
        "targets: <= 16 KiB per session; 5,000 open in < 10 s; last delivery <= 100 ms; "
        "the 201 independent of the room's size"
    )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(f"reproduce: {command_line()}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--client"]:
        client_main()
    else:
        trio.run(main)
