"""Model proxy: streamed chat completions relayed by the node
(``POST /api/models/v1/chat/completions``, ``stream: true``) against the same
streams read directly from the upstream, measured in the same run, as ratios.

The upstream is a fake OpenAI-compatible server (trio + h11, its own process)
that streams ``max_tokens`` small SSE events as fast as it can, one write
each, then ``data: [DONE]``. The client is a raw HTTP/1.1 socket client (one
keep-alive connection per concurrent stream), not httpx, so that the load
generator is not what is measured. Reports streams/s, events/s, time to first
event p50/p99, the node's CPU per stream, and the node's resident memory per
open stream (streams held open by the upstream after their first event).
``--serve-upstream`` runs the fake upstream alone (the benchmark starts it).

    python bench/bench_proxy.py [--events 200] [--concurrency 1 16] [--seconds 2] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import h11
import httpx
import trio
from _common import (
    ServerProcess,
    command_line,
    median,
    percentile,
    raise_fd_limit,
    setup_mesh,
    spawn,
)

#: one streamed event, as OpenAI sends them (48 bytes on the wire, plus chunk framing)
EVENT = b'data: {"choices":[{"delta":{"content":"ab"}}]}\n\n'
DONE = b"data: [DONE]\n\n"


# the fake upstream (runs in its own process: ``bench_proxy.py --serve-upstream``)


async def _upstream_connection(stream: trio.SocketStream) -> None:
    """Serve chat completions on one keep-alive connection.

    Model ``held``: one event, then nothing until the client hangs up.
    Any other model: ``max_tokens`` events, then ``[DONE]``."""
    conn = h11.Connection(h11.SERVER)
    try:
        while True:
            body = bytearray()
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    conn.receive_data(data)
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    return
            request = json.loads(body)
            await stream.send_all(
                conn.send(
                    h11.Response(
                        status_code=200,
                        headers=[
                            ("Content-Type", "text/event-stream"),
                            ("Transfer-Encoding", "chunked"),
                        ],
                    )
                )
            )
            if request.get("model") == "held":
                await stream.send_all(conn.send(h11.Data(data=EVENT)))
                while await stream.receive_some(65536):
                    pass
                return
            for _ in range(int(request.get("max_tokens", 200))):
                await stream.send_all(conn.send(h11.Data(data=EVENT)))
            await stream.send_all(conn.send(h11.Data(data=DONE)))
            await stream.send_all(conn.send(h11.EndOfMessage()))
            if conn.our_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()
    except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
        return
    finally:
        await trio.aclose_forcefully(stream)


async def serve_upstream() -> None:
    raise_fd_limit()
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, _upstream_connection, listeners)
        print(f"listening on http://127.0.0.1:{port}", flush=True)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                break
        nursery.cancel_scope.cancel()


# processes


def start_upstream() -> ServerProcess:
    return spawn([sys.executable, os.path.abspath(__file__), "--serve-upstream"])


def start_node(data_dir: Path, model_concurrency: int) -> ServerProcess:
    """The node as shipped: ``python -m quart_mesh serve`` on a free port."""
    env = os.environ | {
        "MESH_MODEL_CONCURRENCY": str(model_concurrency),
        "MESH_RATE_LIMITS": "off",  # throughput is measured, not the per-participant limit
    }
    return spawn(
        [sys.executable, "-m", "quart_mesh", "serve", "--port", "0", "--data-dir", str(data_dir)],
        env,
    )


# the client


class RawHttp:
    """One keep-alive HTTP/1.1 connection reading streamed (chunked) answers:
    just enough HTTP for a load generator that must not be the bottleneck."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    @classmethod
    async def connect(cls, host: str, port: int) -> RawHttp:
        return cls(await trio.open_tcp_stream(host, port))

    async def _fill(self) -> None:
        data = await self.stream.receive_some(65536)
        if not data:
            raise ConnectionError("closed by the server")
        self.buffer += data

    async def start(self, request: bytes) -> None:
        """Send *request* and read the answer's head (a 200, chunked)."""
        await self.stream.send_all(request)
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            await self._fill()
        head = bytes(self.buffer[:end]).lower()
        del self.buffer[: end + 4]
        if not head.startswith(b"http/1.1 200") or b"transfer-encoding: chunked" not in head:
            raise RuntimeError(f"unexpected answer: {head.decode()} {bytes(self.buffer[:300])!r}")

    async def chunk(self) -> bytes:
        """The next chunk of the body; ``b""`` at its end."""
        while (eol := self.buffer.find(b"\r\n")) < 0:
            await self._fill()
        size = int(bytes(self.buffer[:eol]).split(b";")[0], 16)
        end = eol + 2 + size + 2  # the last chunk (size 0) is followed by an empty line
        while len(self.buffer) < end:
            await self._fill()
        data = bytes(self.buffer[eol + 2 : eol + 2 + size])
        del self.buffer[:end]
        return data

    async def stream_events(self, request: bytes) -> tuple[float, float, int, int]:
        """One streamed answer: (seconds to its first event, seconds in all,
        events, HTTP chunks)."""
        t0 = time.perf_counter()
        await self.start(request)
        events, chunks, first, last, tail = 0, 0, 0.0, b"", b""
        while data := await self.chunk():
            chunks += 1
            # an event may be split across chunks: count the "\n\n" that ends each
            events += data.count(b"\n\n") + (last == b"\n" and data[:1] == b"\n")
            if events and not first:
                first = time.perf_counter() - t0
            last, tail = data[-1:], (tail + data)[-len(DONE) :]
        if tail != DONE:
            raise RuntimeError(f"the stream did not end with [DONE]: {tail!r}")
        return first, time.perf_counter() - t0, events, chunks

    async def aclose(self) -> None:
        await self.stream.aclose()


def chat_request(path: str, model: str, events: int, token: str | None) -> bytes:
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "Count to two hundred."}],
            "stream": True,
            "max_tokens": events,
        }
    ).encode()
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\n{auth}Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def measure(
    url: str,
    request: bytes,
    events: int,
    concurrency: int,
    seconds: float,
    node: ServerProcess,
    warmup: float = 0.3,
) -> dict[str, float]:
    """*concurrency* connections each streaming answers back to back."""
    host, port = url.removeprefix("http://").split(":")
    streams = received = chunks = 0
    first: list[float] = []
    whole: list[float] = []
    counting = False

    async def worker() -> None:
        nonlocal streams, received, chunks
        client = await RawHttp.connect(host, int(port))
        try:
            while True:
                to_first, total, n, parts = await client.stream_events(request)
                if n != events + 1:
                    raise RuntimeError(f"{n} events, expected {events} and [DONE]")
                if counting:
                    streams, received, chunks = streams + 1, received + n - 1, chunks + parts
                    first.append(to_first)
                    whole.append(total)
        finally:
            await client.aclose()

    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
        await trio.sleep(warmup)
        counting = True
        cpu0, t0 = node.cpu_seconds(), time.perf_counter()
        await trio.sleep(seconds)
        done, got, parts = streams, received, chunks
        elapsed, cpu = time.perf_counter() - t0, node.cpu_seconds() - cpu0
        nursery.cancel_scope.cancel()
    return {
        "streams": done / elapsed,
        "events": got / elapsed,
        "first_p50": percentile(first, 50) * 1e3,
        "first_p99": percentile(first, 99) * 1e3,
        "whole_p50": percentile(whole, 50) * 1e3,
        "chunks": parts / done if done else float("nan"),
        "node_cpu_ms": cpu / done * 1e3 if done else float("nan"),
    }


async def held_streams_rss(node: ServerProcess, request: bytes, count: int) -> dict[str, float]:
    """Open *count* proxied streams that the upstream holds after one event;
    the node's resident memory growth per stream, and the first event's time
    (the rest of the stream has not been sent: nothing is buffered)."""
    host, port = node.host_port
    clients: list[RawHttp] = []
    first: list[float] = []
    limiter = trio.CapacityLimiter(20)

    async def open_one() -> None:
        async with limiter:
            client = await RawHttp.connect(host, port)
            clients.append(client)
            t0 = time.perf_counter()
            await client.start(request)
            while b"\n\n" not in await client.chunk():
                pass
            first.append(time.perf_counter() - t0)

    async def open_all(n: int) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(open_one)

    await open_all(10)  # warm the path up, then measure from a settled baseline
    for client in clients:
        await client.aclose()
    clients.clear()
    await trio.sleep(0.5)
    before = node.rss_bytes()
    await open_all(count)
    await trio.sleep(0.5)
    after = node.rss_bytes()
    for client in clients:
        await client.aclose()
    return {"kib": (after - before) / count / 1024, "first_p50": percentile(first, 50) * 1e3}


async def one_run(args: argparse.Namespace) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        upstream = start_upstream()
        try:
            node = start_node(Path(tmp), args.model_concurrency)
        except BaseException:
            upstream.stop()
            raise
        try:
            mesh = await setup_mesh(node.url, 2, 0)
            admin, member = mesh["senders"]
            headers = {"Authorization": f"Bearer {admin}"}
            async with httpx.AsyncClient(base_url=node.url, headers=headers, timeout=30) as http:
                for name, upstream_model in (("bench", "fast"), ("bench-held", "held")):
                    model = {"name": name, "baseUrl": upstream.url + "/v1"}
                    r = await http.post(
                        "/api/models", json=model | {"upstreamModel": upstream_model}
                    )
                    assert r.status_code == 201, r.text
            direct = chat_request("/v1/chat/completions", "fast", args.events, None)
            proxied = chat_request("/api/models/v1/chat/completions", "bench", args.events, member)
            for c in args.concurrency:
                rows[f"direct {c}"] = await measure(
                    upstream.url, direct, args.events, c, args.seconds, node
                )
                rows[f"proxy {c}"] = await measure(
                    node.url, proxied, args.events, c, args.seconds, node
                )
            if args.held:
                held = chat_request("/api/models/v1/chat/completions", "bench-held", 1, member)
                rows["held"] = await held_streams_rss(node, held, args.held)
        finally:
            node.stop()
            upstream.stop()
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200, help="events per stream")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--held", type=int, default=100, help="streams held open for the memory figure (0: skip)"
    )
    parser.add_argument(
        "--model-concurrency",
        type=int,
        default=128,
        help="the node's MESH_MODEL_CONCURRENCY (above --held and every --concurrency)",
    )
    args = parser.parse_args()
    raise_fd_limit()
    runs = [await one_run(args) for _ in range(args.runs)]

    def med(key: str, field: str) -> float:
        return median([run[key][field] for run in runs])

    print(
        f"\nmodel proxy: streams of {args.events} events of {len(EVENT)} bytes, "
        f"median of {args.runs} runs of {args.seconds:g} s "
        f"(MESH_MODEL_CONCURRENCY={args.model_concurrency})"
    )
    print(
        f"{'path':<8}{'streams':>8}{'streams/s':>11}{'events/s':>11}{'first p50 ms':>14}"
        f"{'first p99 ms':>14}{'stream p50 ms':>15}{'chunks/stream':>15}"
        f"{'node CPU ms/stream':>20}"
    )
    for c in args.concurrency:
        for path in ("direct", "proxy"):
            key = f"{path} {c}"
            cpu = f"{med(key, 'node_cpu_ms'):>20.2f}" if path == "proxy" else f"{'':>20}"
            print(
                f"{path:<8}{c:>8}{med(key, 'streams'):>11.1f}{med(key, 'events'):>11.0f}"
                f"{med(key, 'first_p50'):>14.2f}{med(key, 'first_p99'):>14.2f}"
                f"{med(key, 'whole_p50'):>15.2f}{med(key, 'chunks'):>15.1f}{cpu}"
            )
    for c in args.concurrency:
        ratio = med(f"proxy {c}", "streams") / med(f"direct {c}", "streams")
        p50 = med(f"proxy {c}", "first_p50") - med(f"direct {c}", "first_p50")
        p99 = med(f"proxy {c}", "first_p99") - med(f"direct {c}", "first_p99")
        print(
            f"proxy / direct, {c} concurrent: {ratio:.2f}x throughput; "
            f"first event +{p50:.2f} ms (p50), +{p99:.2f} ms (p99)"
        )
    if args.held:
        print(
            f"{args.held} streams held open by the upstream after one event: "
            f"node RSS +{med('held', 'kib'):.1f} KiB per stream; "
            f"first event p50 {med('held', 'first_p50'):.2f} ms"
        )
    print(f"reproduce: {command_line()}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve-upstream"]:
        trio.run(serve_upstream)
    else:
        trio.run(main)
