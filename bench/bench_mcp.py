"""The MCP endpoint (``/mcp``, issue 30): how many MCP sessions one node
holds, and how soon a waiting ``wait_for_messages`` returns a message.

1. **Sessions.** For each count, a fresh node (``_servers.py node``: the
   node as served, rate limits off) and a mesh of guests, each opening at
   most ``max_mcp_sessions_per_participant`` sessions. The client opens the
   sessions as an MCP client does — ``initialize``, then
   ``notifications/initialized`` — ``--in-flight`` at a time, and with
   ``--streams`` also keeps each session's GET stream (the standalone SSE
   stream a client holds for notifications) open: one connection per
   session. Then it reports the server's RSS and open file descriptors
   against an idle node, the time to open each session (p50/p99), and the
   latency of a ``tools/call`` of ``list_rooms`` on one session (p50 of
   ``--calls``) with all of them open, to see where the node degrades.
2. **Latency.** One node; a member waits in ``wait_for_messages`` (over
   ``/mcp``) and another in a ``POST /api/poll`` long poll (the same-run
   baseline: the delivery service both use), then the owner sends a message
   over REST; each waiter's return is timed from just before the send (one
   process, one clock). ``--runs`` times; median and p95.

The client speaks JSON-RPC over HTTP itself (httpx) so that it is not the
bottleneck; the official SDK client is exercised by ``tests/e2e/test_mcp.py``.

    python bench/bench_mcp.py [--counts 250 1000 2000] [--streams] [--in-flight 50]
        [--calls 20] [--runs 30]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import trio
from _common import ServerProcess, command_line, median, percentile, raise_fd_limit, start_server

PER_PARTICIPANT = 16  # the node's default max_mcp_sessions_per_participant
PROTOCOL = "2025-11-25"
ACCEPT = {"Accept": "application/json, text/event-stream"}
INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": PROTOCOL,
        "capabilities": {},
        "clientInfo": {"name": "bench_mcp", "version": "1"},
    },
}


def _fds(server: ServerProcess) -> int:
    return len(os.listdir(f"/proc/{server.process.pid}/fd"))


def _result(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC result of an answer (JSON, or one SSE ``data:`` event)."""
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
        text = next(d for d in data if d)
    body = json.loads(text)
    if "error" in body:
        raise RuntimeError(body["error"])
    return dict(body["result"])


class Session:
    """One MCP session over raw HTTP."""

    def __init__(self, http: httpx.AsyncClient, token: str) -> None:
        self.http = http
        self.headers = {**ACCEPT, "Authorization": f"Bearer {token}"}
        self.ids = 0

    async def open(self) -> None:
        r = await self.http.post("/mcp", json=INIT, headers=self.headers)
        r.raise_for_status()
        self.headers["Mcp-Session-Id"] = r.headers["mcp-session-id"]
        self.headers["Mcp-Protocol-Version"] = PROTOCOL
        r = await self.http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers=self.headers,
        )
        r.raise_for_status()

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        self.ids += 1
        body = {
            "jsonrpc": "2.0",
            "id": self.ids,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        }
        r = await self.http.post("/mcp", json=body, headers=self.headers)
        result = _result(r)
        if result.get("isError"):
            raise RuntimeError(result["content"])
        return dict(result["structuredContent"])

    async def hold_stream(self, opened: trio.Event) -> None:
        """The session's GET stream, held open until cancelled."""
        async with self.http.stream("GET", "/mcp", headers=self.headers) as r:
            r.raise_for_status()
            opened.set()
            async for _ in r.aiter_bytes():
                pass


async def _setup(url: str, guests: int) -> tuple[str, str, list[str]]:
    """Owner, a room, *guests* guests in it: (owner token, room id, guest tokens)."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        r = await http.post(
            "/api/setup/init",
            json={"name": "owner", "password": "bench passphrase", "meshName": "bench"},
        )
        owner = r.json()["token"]
        headers = {"Authorization": f"Bearer {owner}"}
        room = (await http.post("/api/rooms", json={"name": "bench"}, headers=headers)).json()
        tokens = []
        for _ in range(guests):
            token = (await http.post("/api/auth/guest")).json()["token"]
            await http.post(
                f"/api/rooms/{room['roomId']}/join", headers={"Authorization": f"Bearer {token}"}
            )
            tokens.append(token)
    return owner, room["roomId"], tokens


async def sessions(count: int, args: argparse.Namespace) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="bench-mcp-"))
    server = start_server("node", data)
    try:
        _, _, tokens = await _setup(server.url, math.ceil(count / PER_PARTICIPANT))
        await trio.sleep(1)
        rss0, fds0 = server.rss_bytes(), _fds(server)
        limits = httpx.Limits(max_connections=count + 100, max_keepalive_connections=args.in_flight)
        timeout = httpx.Timeout(120, read=None)
        opened: list[Session] = []
        latencies: list[float] = []
        errors: list[str] = []
        limiter = trio.CapacityLimiter(args.in_flight)
        async with (
            httpx.AsyncClient(base_url=server.url, timeout=timeout, limits=limits) as http,
            trio.open_nursery() as streams,
        ):

            async def open_one(i: int) -> None:
                async with limiter:
                    session = Session(http, tokens[i // PER_PARTICIPANT])
                    start = time.perf_counter()
                    try:
                        await session.open()
                        if args.streams:
                            ready = trio.Event()
                            streams.start_soon(session.hold_stream, ready)
                            await ready.wait()
                    except (httpx.HTTPError, KeyError, RuntimeError) as exc:
                        errors.append(repr(exc)[:160])
                        return
                    latencies.append(time.perf_counter() - start)
                    opened.append(session)

            cpu0, wall0 = server.cpu_seconds(), time.perf_counter()
            async with trio.open_nursery() as nursery:
                for i in range(count):
                    nursery.start_soon(open_one, i)
            wall, cpu = time.perf_counter() - wall0, server.cpu_seconds() - cpu0
            await trio.sleep(1)
            rss, fds = server.rss_bytes(), _fds(server)
            calls = []
            probe = opened[len(opened) // 2] if opened else None
            for _ in range(args.calls if probe else 0):
                start = time.perf_counter()
                assert probe is not None
                await probe.call("list_rooms")
                calls.append(time.perf_counter() - start)
            streams.cancel_scope.cancel()
        return {
            "sessions": len(opened),
            "errors": len(errors),
            "first_error": errors[0] if errors else None,
            "kib_per_session": (rss - rss0) / 1024 / max(1, len(opened)),
            "rss_mib": rss / 2**20,
            "fds": fds - fds0,
            "open_wall_s": wall,
            "open_cpu_ms_per_session": cpu * 1000 / max(1, len(opened)),
            "open_p50_ms": median(latencies) * 1000,
            "open_p99_ms": percentile(latencies, 99) * 1000,
            "call_p50_ms": median(calls) * 1000,
        }
    finally:
        server.stop()


async def latency(args: argparse.Namespace) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="bench-mcp-"))
    server = start_server("node", data)
    try:
        owner, room, (mcp_token, poll_token) = await _setup(server.url, 2)
        timeout = httpx.Timeout(60)
        mcp_ms: list[float] = []
        poll_ms: list[float] = []
        async with httpx.AsyncClient(base_url=server.url, timeout=timeout) as http:
            session = Session(http, mcp_token)
            await session.open()
            cursor = (await session.call("wait_for_messages", timeout=0))["cursor"]
            poll_headers = {"Authorization": f"Bearer {poll_token}"}
            r = await http.post("/api/poll", json={}, headers=poll_headers)
            poll_cursor = r.json()["cursor"]
            for run in range(args.runs):
                sent_at = 0.0
                got: dict[str, float] = {}

                async def mcp_waiter(got: dict[str, float]) -> None:
                    nonlocal cursor
                    answer = await session.call("wait_for_messages", cursor=cursor, timeout=20)
                    got["mcp"] = time.perf_counter()
                    assert answer["messages"], answer
                    cursor = answer["cursor"]

                async def poll_waiter(got: dict[str, float]) -> None:
                    nonlocal poll_cursor
                    r = await http.post(
                        "/api/poll",
                        json={"cursor": poll_cursor, "timeout": 20},
                        headers=poll_headers,
                    )
                    got["poll"] = time.perf_counter()
                    assert r.json()["messages"], r.text
                    poll_cursor = r.json()["cursor"]

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(mcp_waiter, got)
                    nursery.start_soon(poll_waiter, got)
                    await trio.sleep(0.3)  # both are waiting
                    sent_at = time.perf_counter()
                    r = await http.post(
                        f"/api/rooms/{room}/messages",
                        json={"content": f"run {run}"},
                        headers={"Authorization": f"Bearer {owner}"},
                    )
                    r.raise_for_status()
                mcp_ms.append((got["mcp"] - sent_at) * 1000)
                poll_ms.append((got["poll"] - sent_at) * 1000)
        return {
            "runs": args.runs,
            "mcp_p50_ms": median(mcp_ms),
            "mcp_p95_ms": percentile(mcp_ms, 95),
            "poll_p50_ms": median(poll_ms),
            "poll_p95_ms": percentile(poll_ms, 95),
        }
    finally:
        server.stop()


async def main(args: argparse.Namespace) -> None:
    print(f"# {command_line()}")
    for count in args.counts:
        figures = await sessions(count, args)
        print(json.dumps({"count": count, "streams": args.streams, **figures}), flush=True)
    if args.runs:
        print(json.dumps({"latency": await latency(args)}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="*", default=[250, 1000, 2000])
    parser.add_argument("--streams", action="store_true", help="hold each session's GET stream")
    parser.add_argument("--in-flight", type=int, default=50)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--runs", type=int, default=30)
    raise_fd_limit()
    trio.run(main, parser.parse_args())
