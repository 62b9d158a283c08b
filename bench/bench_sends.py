"""Sends committed per second over REST and over WebSocket ``send_message``
(several senders), and poll round-trip latency; the node against its own send
path without the store (measured in the same run), as ratios.

    python bench/bench_sends.py [--senders 8] [--seconds 3] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import trio
from _common import (
    RawWs,
    authenticate,
    command_line,
    median,
    percentile,
    raise_fd_limit,
    setup_mesh,
    start_server,
)


class Counter:
    n = 0


async def rate(
    workers: list[Callable[[Counter], Awaitable[None]]], seconds: float, warmup: float = 0.3
) -> float:
    """Run *workers* (each counts what it completes); completions per second
    over *seconds*, after *warmup*."""
    counter = Counter()
    async with trio.open_nursery() as nursery:
        for worker in workers:
            nursery.start_soon(worker, counter)
        await trio.sleep(warmup)
        counter.n, t0 = 0, time.perf_counter()
        await trio.sleep(seconds)
        done, elapsed = counter.n, time.perf_counter() - t0
        nursery.cancel_scope.cancel()
    return done / elapsed


async def rest_sends(url: str, mesh: dict, seconds: float) -> float:  # type: ignore[type-arg]
    limits = httpx.Limits(max_connections=len(mesh["senders"]))
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as http:

        def sender(token: str) -> Callable[[Counter], Awaitable[None]]:
            async def run(counter: Counter) -> None:
                headers = {"Authorization": f"Bearer {token}"}
                while True:
                    r = await http.post(
                        f"/api/rooms/{mesh['room']}/messages",
                        json={"content": "rest"},
                        headers=headers,
                    )
                    assert r.status_code == 201, r.text
                    counter.n += 1

            return run

        return await rate([sender(token) for token in mesh["senders"]], seconds)


async def http_ceiling(url: str, senders: int, seconds: float) -> float:
    """``GET /api/setup/status`` (no token, no store) at the same concurrency:
    what the HTTP stack itself (hypercorn + Quart + this client) can do."""
    limits = httpx.Limits(max_connections=senders)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as http:

        async def run(counter: Counter) -> None:
            while True:
                assert (await http.get("/api/setup/status")).status_code == 200
                counter.n += 1

        return await rate([run] * senders, seconds)


async def ws_sends(url: str, mesh: dict, seconds: float, window: int) -> float:  # type: ignore[type-arg]
    host, port = url.removeprefix("http://").split(":")
    count = 0

    async def sender(token: str) -> None:
        nonlocal count
        ws = await RawWs.connect(host, int(port))
        await authenticate(ws, token)
        me = None
        outstanding = trio.Semaphore(window)

        async def acks() -> None:
            nonlocal count
            while True:
                for frame in await ws.receive_batch():
                    if b'"type":"message"' in frame and (me is None or me in frame):
                        count += 1
                        outstanding.release()

        me = json.dumps({"x": token[-12:]})[7:-2].encode()  # a per-sender marker
        async with trio.open_nursery() as nursery:
            nursery.start_soon(acks)
            frame = json.dumps(
                {"type": "send_message", "roomId": mesh["room"], "content": f"ws {me.decode()}"}
            )
            while True:
                await outstanding.acquire()
                await ws.send_text(frame)

    async with trio.open_nursery() as nursery:
        for token in mesh["senders"]:
            nursery.start_soon(sender, token)
        await trio.sleep(0.5)
        count, t0 = 0, time.perf_counter()
        await trio.sleep(seconds)
        done, elapsed = count, time.perf_counter() - t0
        nursery.cancel_scope.cancel()
    return done / elapsed


async def poll_rtt(url: str, mesh: dict, rounds: int = 200) -> dict[str, float]:  # type: ignore[type-arg]
    """A long-polling bot waits; another participant posts; time until the poll returns."""
    sender, bot = mesh["senders"][0], mesh["senders"][1]
    times: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        h_bot = {"Authorization": f"Bearer {bot}"}
        h_send = {"Authorization": f"Bearer {sender}"}
        cursor = (await http.post("/api/poll", json={}, headers=h_bot)).json()["cursor"]

        async def waiter(cursor: str, result: dict[str, object]) -> None:
            r = await http.post("/api/poll", json={"cursor": cursor, "timeout": 10}, headers=h_bot)
            result.update(r.json())
            result["t"] = time.perf_counter()

        for _ in range(rounds):
            result: dict[str, object] = {}
            async with trio.open_nursery() as nursery:
                nursery.start_soon(waiter, cursor, result)
                await trio.sleep(0.002)
                t0 = time.perf_counter()
                await http.post(
                    f"/api/rooms/{mesh['room']}/messages", json={"content": "p"}, headers=h_send
                )
            times.append(float(result["t"]) - t0)  # type: ignore[arg-type]
            cursor = result["cursor"]  # type: ignore[assignment]
    return {"p50_ms": percentile(times, 50) * 1e3, "p99_ms": percentile(times, 99) * 1e3}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--senders", type=int, default=8)
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    raise_fd_limit()
    results: dict[str, dict[str, list[float]]] = {}
    for kind in ("node-nostore", "node"):
        rows: dict[str, list[float]] = {
            "rest": [],
            "ws": [],
            "poll_p50": [],
            "poll_p99": [],
            "http": [],
        }
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory() as tmp:
                server = start_server(kind, Path(tmp))
                try:
                    mesh = await setup_mesh(server.url, args.senders, 0)
                    rows["rest"].append(await rest_sends(server.url, mesh, args.seconds))
                    rows["ws"].append(await ws_sends(server.url, mesh, args.seconds, args.window))
                    if kind == "node":
                        rows["http"].append(
                            await http_ceiling(server.url, args.senders, args.seconds)
                        )
                        rtt = await poll_rtt(server.url, mesh)
                        rows["poll_p50"].append(rtt["p50_ms"])
                        rows["poll_p99"].append(rtt["p99_ms"])
                finally:
                    server.stop()
        results[kind] = rows
    node, base = results["node"], results["node-nostore"]
    print(f"\nsends: {args.senders} senders, median of {args.runs} runs of {args.seconds:g} s")
    print(f"{'server':<14}{'REST sends/s':>14}{'WS sends/s':>12}")
    for kind, rows in results.items():
        print(f"{kind:<14}{median(rows['rest']):>14.0f}{median(rows['ws']):>12.0f}")
    print(
        f"node / node-nostore: REST {median(node['rest']) / median(base['rest']):.2f}x, "
        f"WS {median(node['ws']) / median(base['ws']):.2f}x"
    )
    print(
        f"HTTP stack ceiling (GET /api/setup/status, same client and concurrency): "
        f"{median(node['http']):.0f} requests/s"
    )
    print(
        f"poll round trip (long-poll wakes on a REST post): p50 {median(node['poll_p50']):.1f} ms,"
        f" p99 {median(node['poll_p99']):.1f} ms"
    )
    print(f"reproduce: {command_line()}")


if __name__ == "__main__":
    trio.run(main)
