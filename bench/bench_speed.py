"""Speed of the node beside same-run baselines, with a native client (Node.js
``ws`` and ``http``, bench/native/load.mjs) in several processes:

1. ``ws_sends``   WebSocket ``send_message`` committed and echoed, 16 senders x 4 in flight
2. ``rest_sends`` ``POST /api/rooms/:id/messages``, 16 keep-alive senders
3. ``get``        ``GET /api/mesh/settings`` (node, bare Quart-Trio, raw ASGI on hypercorn-trio)
4. ``health``     ``GET /api/health`` (node, bare Quart-Trio)
5. ``fanout1``    100 receivers in one room, one publisher with 20 sends in flight
6. ``fanout4``    100 receivers, 4 senders x 8 in flight
7. ``latency``    send -> deliver p50/p99/p99.9, 100 receivers, a paced (open-loop) sender
                  at 25, 50 and 90 % of the node's own maximum (``fanout4``, same run),
                  its sends spread round-robin over the same 4 connections

Baselines, each in its own process and measured in every run: ``node-nostore``
(the node without the store), ``websockets`` (the websockets library's
``broadcast()`` server), ``quart-bare`` and ``asgi-raw`` (the HTTP ceilings).

    python bench/bench_speed.py [--seconds 3] [--runs 3] [--only fanout4 ...]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    ROOT,
    ServerProcess,
    command_line,
    median,
    raise_fd_limit,
    setup_mesh,
    start_server,
)

LOAD = ROOT / "bench" / "native" / "load.mjs"
WS_FROM: list[str] = []  # where the client found ws (find_node)

WORKLOADS = ["ws_sends", "rest_sends", "get", "health", "fanout1", "fanout4", "latency"]
#: which servers each workload runs on (the node first: its maximum sets the latency rates)
SERVERS = {
    "ws_sends": ["node", "node-nostore", "websockets"],
    "rest_sends": ["node", "node-nostore", "quart-bare"],
    "get": ["node", "quart-bare", "asgi-raw"],
    "health": ["node", "quart-bare"],
    "fanout1": ["node", "websockets"],
    "fanout4": ["node", "websockets"],
    "latency": ["node", "websockets"],
}
LATENCY_LOADS = (0.25, 0.5, 0.9)
SENDERS = 16
RECEIVERS = 100


# -- the native client -------------------------------------------------------


def find_node() -> str | None:
    """The ``node`` binary, if it can load ``ws`` (bench/native/node_modules,
    NODE_PATH, or Debian's node-ws); else None."""
    node = shutil.which("node") or ("/usr/bin/node" if os.path.exists("/usr/bin/node") else None)
    if node is None:
        return None
    check = subprocess.run(
        [node, str(LOAD), '{"kind":"check"}'], capture_output=True, text=True, timeout=30
    )
    if check.returncode != 0 or '"ok":true' not in check.stdout:
        return None
    WS_FROM.append(json.loads(check.stdout)["ws"])
    return node


@dataclass
class Outcome:
    """What the client processes of one measurement saw, summed."""

    seconds: float
    sent: int = 0
    acked: int = 0
    deliveries: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    client_cpu: float = 0.0  # seconds, all client processes
    client_cpu_max: float = 0.0  # seconds, the busiest one
    processes: int = 0
    server_cpu: float = 0.0  # seconds, over the measured window
    hists: dict[str, dict[int, int]] = field(default_factory=dict)

    def quantile(self, kind: str, q: float) -> float:
        """Milliseconds (from the merged 1 % buckets)."""
        hist = self.hists.get(kind, {})
        total = sum(hist.values())
        if not total:
            return math.nan
        rank = min(total - 1, int(q * total))
        seen = 0
        for key in sorted(hist):
            seen += hist[key]
            if seen > rank:
                return math.exp(key / 100) / 1000
        return math.nan

    @property
    def client_cores(self) -> float:
        return self.client_cpu / self.seconds

    @property
    def client_cores_max(self) -> float:
        return self.client_cpu_max / self.seconds


def run_clients(
    node: str, configs: list[dict[str, Any]], server: ServerProcess, warmup: float, seconds: float
) -> Outcome:
    """Start one client process per config, wait until all are connected,
    start them together, measure *seconds* after *warmup* (server CPU over
    the same window), and sum their results."""
    procs = [
        subprocess.Popen(
            [node, str(LOAD), json.dumps({**config, "duration": seconds})],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for config in configs
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if '"ready"' not in line:
                raise RuntimeError(f"client failed to start: {line.strip()}")
        t0 = time.monotonic() + warmup
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps({"t0": t0 * 1000}) + "\n")
            proc.stdin.flush()
        time.sleep(max(0.0, t0 - time.monotonic()))
        cpu0 = server.cpu_seconds()
        time.sleep(max(0.0, t0 + seconds - time.monotonic()))
        server_cpu = server.cpu_seconds() - cpu0
        results = []
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            result = json.loads(line) if line else {"fatal": "no result"}
            if "fatal" in result:
                raise RuntimeError(f"client failed: {result['fatal']}")
            results.append(result)
            proc.wait(30)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    out = Outcome(seconds=max(r["elapsedMs"] for r in results) / 1000, server_cpu=server_cpu)
    for r in results:
        out.sent += r["sent"]
        out.acked += r["acked"]
        out.deliveries += r["deliveries"]
        out.errors += r["errors"]
        out.error_samples += r["errorSamples"]
        out.client_cpu += r["cpuMs"] / 1000
        out.client_cpu_max = max(out.client_cpu_max, r["cpuMs"] / 1000)
        out.processes += 1
        for kind in ("echo", "deliver", "request"):
            hist = out.hists.setdefault(kind, {})
            for key, n in r[kind]["hist"].items():
                hist[int(key)] = hist.get(int(key), 0) + n
    return out


def split(items: list[Any], parts: int) -> list[list[Any]]:
    return [items[i::parts] for i in range(parts) if items[i::parts]]


# -- servers and their meshes ------------------------------------------------


@dataclass
class Target:
    """A running server and the mesh the clients use on it."""

    kind: str
    server: ServerProcess
    fanout_room: str = "r"
    sends_room: str = "r"
    senders: list[str] = field(default_factory=lambda: ["x"] * SENDERS)
    receivers: list[str] = field(default_factory=lambda: ["x"] * RECEIVERS)


async def _node_mesh(url: str) -> tuple[str, str, list[str], list[str]]:
    """Room ``bench``: 16 members and 100 guests (fan-out); room ``sends``:
    the 16 members only (sends, so that nobody else receives them)."""
    mesh = await setup_mesh(url, SENDERS, RECEIVERS)
    senders = mesh["senders"]
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        owner = {"Authorization": f"Bearer {senders[0]}"}
        room = (await http.post("/api/rooms", json={"name": "sends"}, headers=owner)).json()
        for token in senders[1:]:
            r = await http.post(
                f"/api/rooms/{room['roomId']}/join", headers={"Authorization": f"Bearer {token}"}
            )
            r.raise_for_status()
    return mesh["room"], room["roomId"], senders, mesh["receivers"]


def start_target(kind: str, data_dir: Path) -> Target:
    server = start_server(kind, data_dir)
    target = Target(kind, server)
    if kind.startswith("node"):
        try:
            fanout, sends, senders, receivers = trio.run(_node_mesh, server.url)
        except BaseException:
            server.stop()
            raise
        target.fanout_room, target.sends_room = fanout, sends
        target.senders, target.receivers = senders, receivers
    return target


# -- the workloads -----------------------------------------------------------


def ws_config(target: Target, prefix: str, **fields: Any) -> dict[str, Any]:
    return {"kind": "ws", "url": target.server.url, "path": "/ws", "idPrefix": prefix, **fields}


def workload_configs(
    name: str, target: Target, args: argparse.Namespace, rate: float = 0
) -> list[dict[str, Any]]:
    """The client processes' configs of workload *name* on *target*."""
    url = target.server.url
    tag = f"{name[:2]}{int(time.time() * 1000) % 10**8}"  # fresh clientIds each time
    if name == "ws_sends":
        return [
            ws_config(target, f"{tag}p{i}", room=target.sends_room, senders=part, window=4)
            for i, part in enumerate(split(target.senders, args.ws_procs))
        ]
    if name in ("fanout1", "fanout4", "latency"):
        senders = target.senders[:1] if name == "fanout1" else target.senders[:4]
        window = {"fanout1": 20, "fanout4": 8, "latency": 0}[name]
        room = target.fanout_room
        # the senders in a process of their own; the receivers spread over the others
        configs = [
            ws_config(target, f"{tag}s", room=room, senders=senders, window=window, rate=rate)
        ]
        configs += [
            ws_config(target, f"{tag}r{i}", room=room, receivers=part)
            for i, part in enumerate(split(target.receivers, args.receiver_procs))
        ]
        return configs
    if name == "rest_sends":
        # the same POST on every server: quart-bare's route reads and parses
        # the body and answers 201 without a store (the stack's POST ceiling)
        return [
            {
                "kind": "http",
                "url": url,
                "method": "POST",
                "path": f"/api/rooms/{target.sends_room}/messages",
                "tokens": target.senders,
                "body": {"content": "rest"},
                "connections": SENDERS,
            }
        ]
    path = {"get": "/api/mesh/settings", "health": "/api/health"}[name]
    return [{"kind": "http", "url": url, "path": path, "connections": SENDERS}]


@dataclass
class Figure:
    """One measurement of one workload on one server."""

    rate: float  # the workload's main figure per second
    per_op_us: float  # server CPU per unit of the main figure
    messages: float  # messages/s (sends acked), where it applies
    outcome: Outcome


def measure(
    node: str, name: str, target: Target, args: argparse.Namespace, rate: float = 0
) -> Figure:
    configs = workload_configs(name, target, args, rate)
    out = run_clients(node, configs, target.server, args.warmup, args.seconds)
    main = out.deliveries if name in ("fanout1", "fanout4", "latency") else out.acked
    return Figure(
        rate=main / out.seconds,
        per_op_us=out.server_cpu / main * 1e6 if main else math.nan,
        messages=out.acked / out.seconds,
        outcome=out,
    )


# -- the driver ---------------------------------------------------------------


Results = dict[tuple[str, str], list[Figure]]  # (workload, server) -> one Figure per run


def run_all(
    node: str, args: argparse.Namespace, workloads: list[str]
) -> tuple[Results, list[float]]:
    """Every run: each server in turn (fresh data folder), the workloads
    that use it; the node first, so its maximum sets the latency rates."""
    results: Results = {}
    node_max: list[float] = []
    kinds: list[str] = []
    for name in workloads:
        for kind in SERVERS[name]:
            if kind not in kinds:
                kinds.append(kind)
    kinds.sort(key=lambda k: k != "node")
    for run in range(args.runs):
        run_max = math.nan
        for kind in kinds:
            with tempfile.TemporaryDirectory() as tmp:
                target = start_target(kind, Path(tmp))
                try:
                    for name in workloads:
                        if kind not in SERVERS[name]:
                            continue
                        if name == "latency":
                            if math.isnan(run_max):
                                continue
                            for load in LATENCY_LOADS:
                                figure = measure(node, name, target, args, rate=load * run_max)
                                results.setdefault((f"latency{load}", kind), []).append(figure)
                            continue
                        figure = measure(node, name, target, args)
                        results.setdefault((name, kind), []).append(figure)
                        if name == "fanout4" and kind == "node":
                            run_max = figure.messages
                            node_max.append(run_max)
                        print(
                            f"  run {run + 1}/{args.runs} {name:<10} {kind:<13}"
                            f" {figure.rate:>10.0f}/s  client {figure.outcome.client_cores:.2f}"
                            f" cores, errors {figure.outcome.errors}",
                            file=sys.stderr,
                            flush=True,
                        )
                finally:
                    target.server.stop()
    return results, node_max


def med(values: Iterable[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return median(values) if values else math.nan


def ratio(
    results: Results, name: str, kind: str, base: str, key: Callable[[Figure], float]
) -> float:
    """Median over runs of node's figure / *base*'s figure in the same run."""
    mine, theirs = results.get((name, kind), []), results.get((name, base), [])
    return med(key(a) / key(b) for a, b in zip(mine, theirs, strict=False) if key(b))


UNITS = {
    "ws_sends": ("sends/s", "µs/send", "echo"),
    "rest_sends": ("sends/s", "µs/send", "request"),
    "get": ("requests/s", "µs/request", "request"),
    "health": ("requests/s", "µs/request", "request"),
    "fanout1": ("deliveries/s", "µs/delivery", "deliver"),
    "fanout4": ("deliveries/s", "µs/delivery", "deliver"),
}
TITLES = {
    "ws_sends": "WebSocket send_message committed and echoed, 16 senders x 4 in flight",
    "rest_sends": "REST POST /api/rooms/:id/messages, 16 keep-alive senders "
    "(quart-bare: a route that reads and parses the body and answers 201, no store)",
    "get": "GET /api/mesh/settings, 16 keep-alive connections",
    "health": "GET /api/health, 16 keep-alive connections (quart-bare: a constant JSON)",
    "fanout1": "fan-out: 100 receivers, one publisher with 20 sends in flight",
    "fanout4": "fan-out: 100 receivers, 4 senders x 8 in flight",
}


def fmt(value: float, digits: int = 0) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.{digits}f}"


def print_tables(results: Results, node_max: list[float], args: argparse.Namespace) -> None:
    for name in [w for w in WORKLOADS if w != "latency"]:
        kinds = [k for k in SERVERS[name] if (name, k) in results]
        if not kinds:
            continue
        unit, per_op, hist = UNITS[name]
        print(f"\n### {name}: {TITLES[name]}\n")
        extra = " | messages/s" if name.startswith("fanout") else ""
        print(
            f"| server | {unit}{extra} | node ÷ this | server CPU {per_op} | "
            f"{hist} p50 / p99 ms | client cores (procs, busiest) | errors |"
        )
        print("|---|---|---|---|---|---|---|" + ("---|" if extra else ""))
        for kind in kinds:
            figs = results[(name, kind)]
            cells = [kind, fmt(med(f.rate for f in figs))]
            if extra:
                cells.append(fmt(med(f.messages for f in figs)))
            r = 1.0 if kind == "node" else ratio(results, name, "node", kind, lambda f: f.rate)
            cells.append(f"{r:.2f}x")
            cells.append(fmt(med(f.per_op_us for f in figs), 1))
            p50 = med(f.outcome.quantile(hist, 0.5) for f in figs)
            p99 = med(f.outcome.quantile(hist, 0.99) for f in figs)
            cells.append(f"{fmt(p50, 1)} / {fmt(p99, 1)}")
            cores = med(f.outcome.client_cores for f in figs)
            busiest = med(f.outcome.client_cores_max for f in figs)
            cells.append(f"{cores:.2f} ({figs[0].outcome.processes}, {busiest:.2f})")
            cells.append(str(sum(f.outcome.errors for f in figs)))
            print("| " + " | ".join(cells) + " |")
    if node_max and any(k[0].startswith("latency") for k in results):
        print(
            "\n### latency: send -> deliver, 100 receivers, one paced sender over 4 connections;"
            " rates are 25/50/90 % of the node's maximum (fanout4 messages/s, per run; median"
            f" {med(node_max):,.0f})\n"
        )
        print(
            "| load | messages/s | server | p50 ms | p99 ms | p99.9 ms | delivered / expected"
            " | server CPU µs/delivery | client cores |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for load in LATENCY_LOADS:
            for kind in SERVERS["latency"]:
                figs = results.get((f"latency{load}", kind), [])
                if not figs:
                    continue
                rates = [load * m for m in node_max]
                expected = med(
                    f.rate / (r * RECEIVERS) for f, r in zip(figs, rates, strict=False) if r
                )
                cells = [
                    f"{load:.0%}",
                    fmt(med(rates)),
                    kind,
                    fmt(med(f.outcome.quantile("deliver", 0.5) for f in figs), 1),
                    fmt(med(f.outcome.quantile("deliver", 0.99) for f in figs), 1),
                    fmt(med(f.outcome.quantile("deliver", 0.999) for f in figs), 1),
                    f"{expected:.2f}",
                    fmt(med(f.per_op_us for f in figs), 1),
                    f"{med(f.outcome.client_cores for f in figs):.2f}",
                ]
                print("| " + " | ".join(cells) + " |")
    samples = [s for figs in results.values() for f in figs for s in f.outcome.error_samples]
    if samples:
        print("\nerrors seen (first few):")
        for sample in samples[:5]:
            print(f"  {sample}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=3.0, help="measured seconds per figure")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds of load before measuring")
    p.add_argument("--runs", type=int, default=3, help="interleaved runs (medians are printed)")
    p.add_argument("--only", nargs="+", choices=WORKLOADS, help="these workloads only")
    p.add_argument("--ws-procs", type=int, default=2, help="client processes for ws_sends")
    p.add_argument(
        "--receiver-procs", type=int, default=2, help="client processes for the 100 receivers"
    )
    return p


def main() -> None:
    args = parser().parse_args()
    raise_fd_limit()
    node = find_node()
    if node is None:
        sys.exit(
            "bench_speed.py needs Node.js and its ws package: `npm install` in bench/native, "
            "or `apt-get install nodejs node-ws`"
        )
    workloads = args.only or WORKLOADS
    if "latency" in workloads and "fanout4" not in workloads:
        workloads = [*workloads, "fanout4"]  # the latency rates come from it
    workloads = [w for w in WORKLOADS if w in workloads]
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    started = time.monotonic()
    results, node_max = run_all(node, args, workloads)
    load_after = Path("/proc/loadavg").read_text().split()[:3]
    print(
        f"\n## bench_speed: medians of {args.runs} runs of {args.seconds:g} s "
        f"(after {args.warmup:g} s warm-up), {time.monotonic() - started:.0f} s in all"
    )
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    print(
        f"client: Node.js {version} with ws ({WS_FROM[-1]}), bench/native/load.mjs, in its own"
        " processes;"
        " 'client cores' is their CPU per second of wall time (all processes, and the busiest one)"
    )
    print(
        f"load average before {' '.join(load_before)}, after {' '.join(load_after)}"
        f" ({os.cpu_count()} cores)"
    )
    print_tables(results, node_max, args)
    print(f"\nreproduce: {command_line()}")


if __name__ == "__main__":
    main()
