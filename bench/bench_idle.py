"""Memory per authenticated idle WebSocket connection, at 1,000 and 5,000
connections: the server's resident memory before and after, divided by the
number of connections (median of several runs).

    python bench/bench_idle.py [--counts 1000 5000] [--runs 3]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import trio
from _common import (
    RawWs,
    authenticate,
    command_line,
    median,
    raise_fd_limit,
    setup_mesh,
    start_server,
)


async def idle(count: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server("node", Path(tmp))
        try:
            mesh = await setup_mesh(server.url, 1, 1)
            token = mesh["receivers"][0]
            host, port = server.host_port
            # warm up the paths once, then measure from a settled baseline
            warm = await RawWs.connect(host, port)
            await authenticate(warm, token)
            await warm.aclose()
            await trio.sleep(0.5)
            before = server.rss_bytes()
            sockets = []
            limiter = trio.CapacityLimiter(50)

            async def open_one() -> None:
                async with limiter:
                    ws = await RawWs.connect(host, port)
                    await authenticate(ws, token)
                    sockets.append(ws)

            async with trio.open_nursery() as nursery:
                for _ in range(count):
                    nursery.start_soon(open_one)
            await trio.sleep(1.0)
            after = server.rss_bytes()
            for ws in sockets:
                await ws.aclose()
            return (after - before) / count, after / 2**20
        finally:
            server.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    raise_fd_limit()
    print(f"\nidle authenticated WebSocket connections, median of {args.runs} runs")
    print(f"{'connections':>12}{'KiB each':>10}{'server RSS MiB':>16}")
    for count in args.counts:
        rows = [await idle(count) for _ in range(args.runs)]
        print(
            f"{count:>12}{median([r[0] for r in rows]) / 1024:>10.1f}"
            f"{median([r[1] for r in rows]):>16.0f}"
        )
    print("target: under 64 KiB per idle connection")
    print(f"reproduce: {command_line()}")


if __name__ == "__main__":
    trio.run(main)
