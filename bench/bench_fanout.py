"""Fan-out: 100 WebSocket clients in one room, senders posting as fast as the
server accepts. Reports deliveries/s, server CPU µs per delivery, and
send→deliver latency p50/p99 at full load and at half load, for the node and
for two baselines measured in the same run (a minimal trio-websocket
broadcast server; the node's path without the store), as ratios.

    python bench/bench_fanout.py [--receivers 100] [--senders 4] [--seconds 3] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

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


async def measure(
    url: str, mesh: dict, seconds: float, window: int, rate: float | None, server
) -> dict[str, float]:  # type: ignore[no-untyped-def,type-arg]
    host, port = url.removeprefix("http://").split(":")
    receivers = [await RawWs.connect(host, int(port)) for _ in mesh["receivers"]]
    for ws, token in zip(receivers, mesh["receivers"], strict=True):
        await authenticate(ws, token)
    senders = [await RawWs.connect(host, int(port)) for _ in mesh["senders"]]
    for ws, token in zip(senders, mesh["senders"], strict=True):
        await authenticate(ws, token)
    delivered = 0
    latencies: list[float] = []
    stop = trio.Event()
    marker = b'"content":"'

    async def receive(ws: RawWs) -> None:
        nonlocal delivered
        while True:
            for frame in await ws.receive_batch():
                if b'"type":"message"' not in frame:
                    continue
                delivered += 1
                i = frame.find(marker)
                if i >= 0:
                    j = frame.find(b" ", i)
                    latencies.append(time.perf_counter() - float(frame[i + len(marker) : j]))

    async def send(ws: RawWs, room: str) -> None:
        outstanding = trio.Semaphore(window)
        period = None if not rate else len(mesh["senders"]) / rate

        async def acks() -> None:
            while True:
                for frame in await ws.receive_batch():
                    if b'"type":"message"' in frame:
                        outstanding.release()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(acks)
            next_at = trio.current_time()
            while not stop.is_set():
                await outstanding.acquire()
                if period is not None:
                    next_at += period
                    await trio.sleep_until(next_at)
                content = f"{time.perf_counter():.6f} x"
                await ws.send_text(
                    json.dumps({"type": "send_message", "roomId": room, "content": content})
                )
            nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        for ws in receivers:
            nursery.start_soon(receive, ws)
        for ws in senders:
            nursery.start_soon(send, ws, mesh["room"])
        await trio.sleep(0.5)  # warm up
        delivered, latencies[:] = 0, []
        cpu0, t0 = server.cpu_seconds(), time.perf_counter()
        await trio.sleep(seconds)
        got, elapsed, cpu = delivered, time.perf_counter() - t0, server.cpu_seconds() - cpu0
        sample = list(latencies)
        stop.set()
        nursery.cancel_scope.cancel()
    for ws in receivers + senders:
        await ws.aclose()
    return {
        "rate": got / elapsed,
        "cpu_us": cpu / got * 1e6 if got else float("nan"),
        "p50_ms": percentile(sample, 50) * 1000,
        "p99_ms": percentile(sample, 99) * 1000,
    }


async def bench(kind: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    full, half = [], []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            server = start_server(kind, Path(tmp))
            try:
                if kind == "trio-websocket":
                    mesh = {
                        "room": "r",
                        "senders": ["x"] * args.senders,
                        "receivers": ["x"] * args.receivers,
                    }
                else:
                    mesh = await setup_mesh(server.url, args.senders, args.receivers)
                result = await measure(server.url, mesh, args.seconds, args.window, None, server)
                full.append(result)
                half.append(
                    await measure(
                        server.url,
                        mesh,
                        args.seconds,
                        args.window,
                        result["rate"] / args.receivers / 2,
                        server,
                    )
                )
            finally:
                server.stop()

    def med(rows: list[dict[str, float]]) -> dict[str, float]:
        return {k: median([r[k] for r in rows]) for k in rows[0]}

    return {"full": med(full), "half": med(half)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--receivers", type=int, default=100)
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument("--window", type=int, default=8, help="messages in flight per sender")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=["node", "node-nostore", "trio-websocket"])
    args = parser.parse_args()
    raise_fd_limit()
    kinds = [args.only] if args.only else ["trio-websocket", "node-nostore", "node"]
    results = {kind: await bench(kind, args) for kind in kinds}
    print(
        f"\nfan-out: {args.receivers} receivers, {args.senders} senders, "
        f"median of {args.runs} runs of {args.seconds:g} s"
    )
    print(
        f"{'server':<16}{'deliveries/s':>14}{'CPU µs/deliv':>14}{'p50 ms full':>13}"
        f"{'p99 ms full':>13}{'p50 ms half':>13}{'p99 ms half':>13}"
    )
    for kind, r in results.items():
        f, h = r["full"], r["half"]
        print(
            f"{kind:<16}{f['rate']:>14.0f}{f['cpu_us']:>14.1f}{f['p50_ms']:>13.1f}"
            f"{f['p99_ms']:>13.1f}{h['p50_ms']:>13.1f}{h['p99_ms']:>13.1f}"
        )
    if "node" in results:
        for base in ("trio-websocket", "node-nostore"):
            if base in results:
                ratio = results["node"]["full"]["rate"] / results[base]["full"]["rate"]
                print(f"node / {base}: {ratio:.2f}x deliveries/s")
    print(f"reproduce: {command_line()}")


if __name__ == "__main__":
    trio.run(main)
