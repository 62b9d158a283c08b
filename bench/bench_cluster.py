"""Scale-out on PostgreSQL: WebSocket sends, fan-out and cross-process
delivery latency against 1, 2 and 4 ``quart-mesh serve`` processes sharing
one PostgreSQL database, beside one process on SQLite measured in the same
run (the baseline of every ratio).

    python bench/bench_cluster.py [--processes 1,2,4] [--seconds 2] [--runs 3]
                                  [--senders 8] [--receivers 100] [--clients 2]

Each configuration is a fresh mesh: a new data folder (shared by its
processes, like the secrets an operator would share) and, on PostgreSQL, a
new database in one throwaway cluster started for the run (``tests/stores.py``).
Every process is ``python -m quart_mesh serve --port 0`` on its own loopback
port, so the load generator spreads connections over them explicitly
(``serve --workers N`` shares one port and lets the kernel choose).

Three measurements per configuration and run:

- **send**: ``--senders`` WebSocket senders, round-robin over the processes,
  one room, ``--window`` sends in flight each; a send counts when its own
  ``message`` event comes back (committed, then delivered through the bus),
  and its latency is send → that echo.
- **fan-out**: ``--receivers`` guests round-robin over the processes, a few
  senders (``--fanout-senders``) posting as fast as they are acknowledged;
  deliveries/s counted at the receivers.
- **cross-process latency**: one sender on process A, one receiver on
  process B (the same process when there is only one), ``--rate`` messages/s;
  p50/p99 of send → receive (both ends read one monotonic clock).

The load comes from ``--clients`` separate client processes (the lean raw
WebSocket client of ``_common.py``), each reporting its own CPU; the server
side's CPU is read from ``/proc`` for every node process and, on PostgreSQL,
for every process of the database server, and divided by operations done.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common
import httpx
import trio
from _common import (
    ROOT,
    RawWs,
    ServerProcess,
    authenticate,
    command_line,
    median,
    percentile,
    raise_fd_limit,
    setup_mesh,
    spawn,
)

sys.path.insert(0, str(ROOT))

TICKS = os.sysconf("SC_CLK_TCK")
#: the nodes' metrics token (the bench reads their write batches' sizes)
METRICS_TOKEN = "bench-metrics-token-0123456789"

# --------------------------------------------------------------------------
# the client process: ``bench_cluster.py --client``, a job as JSON on stdin


def _stamp(frame: bytes) -> float | None:
    """The send time a bench message carries first in its content."""
    i = frame.find(b'"content":"')
    if i < 0:
        return None
    i += 11
    j = frame.find(b" ", i)
    try:
        return float(frame[i:j])
    except ValueError:
        return None


async def _client(job: dict[str, Any]) -> dict[str, Any]:
    """Connect and authenticate every connection of *job*, say ``ready``,
    wait for ``go``, then load the servers for warmup + seconds and return
    what was counted in the measured window."""
    mode, room, window = job["mode"], job["room"], job["window"]
    rate = job.get("rate")
    measuring = False
    ops = 0
    errors: list[str] = []
    latencies: list[float] = []

    async def connect(host: str, port: int, token: str) -> RawWs:
        ws = await RawWs.connect(host, port)
        await authenticate(ws, token)
        return ws

    senders = [await connect(h, p, t) for h, p, t in job["senders"]]
    receivers = [await connect(h, p, t) for h, p, t in job["receivers"]]
    print("ready", flush=True)
    await trio.to_thread.run_sync(sys.stdin.readline)

    async def send(ws: RawWs, index: int) -> None:
        nonlocal ops
        marker = f"s{os.getpid()}x{index}"
        mine = f" {marker}".encode()
        outstanding = trio.Semaphore(window)
        period = None if not rate else len(senders) / rate

        async def acks() -> None:
            nonlocal ops
            while True:
                for frame in await ws.receive_batch():
                    if b'"type":"message"' in frame:
                        if mine in frame:
                            if mode == "send" and measuring:
                                ops += 1
                                if (t := _stamp(frame)) is not None:
                                    latencies.append(time.monotonic() - t)
                            outstanding.release()
                    elif b'"type":"error"' in frame:
                        if len(errors) < 20:
                            errors.append(frame.decode(errors="replace")[:300])
                        if b'"send_message"' in frame:
                            outstanding.release()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(acks)
            next_at = trio.current_time()
            while True:
                await outstanding.acquire()
                if period is not None:
                    next_at += period
                    await trio.sleep_until(next_at)
                content = f"{time.monotonic():.6f} {marker}"
                await ws.send_text(
                    json.dumps({"type": "send_message", "roomId": room, "content": content})
                )

    async def receive(ws: RawWs) -> None:
        nonlocal ops
        while True:
            for frame in await ws.receive_batch():
                if b'"type":"message"' not in frame or not measuring:
                    continue
                ops += 1
                if mode == "latency" and (t := _stamp(frame)) is not None:
                    latencies.append(time.monotonic() - t)

    async with trio.open_nursery() as nursery:
        for ws in receivers:
            nursery.start_soon(receive, ws)
        for i, ws in enumerate(senders):
            nursery.start_soon(send, ws, i)
        await trio.sleep(job["warmup"])
        measuring, cpu0, t0 = True, time.process_time(), time.monotonic()
        await trio.sleep(job["seconds"])
        measuring = False
        done, cpu, elapsed = ops, time.process_time() - cpu0, time.monotonic() - t0
        nursery.cancel_scope.cancel()
    return {
        "ops": done,
        "elapsed": elapsed,
        "cpu": cpu,
        "latencies": latencies,
        "errors": errors,
    }


def client_main() -> None:
    raise_fd_limit()
    job = json.loads(sys.stdin.readline())
    result = trio.run(_client, job)
    print(json.dumps(result), flush=True)


# --------------------------------------------------------------------------
# the conductor


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of *pid*; 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def postgres_pids(data: Path) -> list[int]:
    """The postmaster of the cluster in *data* and every child it has now."""
    try:
        master = int((data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return []
    pids = [master]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
            if ppid == master:
                pids.append(int(entry))
    return pids


@dataclass
class Mesh:
    servers: list[ServerProcess]
    pg_data: Path | None

    def cpu(self) -> tuple[float, float]:
        """CPU seconds so far: the node processes', the database's. The
        database's backends live as long as the nodes' pooled connections
        (all of a measurement), so summing them before and after is fair."""
        node = sum(s.cpu_seconds() for s in self.servers)
        pg = sum(proc_cpu(p) for p in postgres_pids(self.pg_data)) if self.pg_data else 0.0
        return node, pg

    def batches(self) -> tuple[float, float]:
        """Write batches committed so far and the units in them, over every
        process (``mesh_store_batch_units`` of each one's ``/metrics``)."""
        count = units = 0.0
        for server in self.servers:
            text = httpx.get(
                f"{server.url}/metrics",
                headers={"Authorization": f"Bearer {METRICS_TOKEN}"},
                timeout=30,
            ).text
            for line in text.splitlines():
                if line.startswith("mesh_store_batch_units_count"):
                    count += float(line.split()[-1])
                elif line.startswith("mesh_store_batch_units_sum"):
                    units += float(line.split()[-1])
        return count, units

    def stop(self) -> None:
        for server in self.servers:
            server.process.terminate()
        for server in self.servers:
            try:
                server.process.wait(15)
            except subprocess.TimeoutExpired:
                server.process.kill()


def start_mesh(count: int, data_dir: Path, database_url: str | None, pg_data: Path | None) -> Mesh:
    """*count* node processes on *data_dir*: the first alone (it migrates the
    store and writes the secrets), then the others together."""
    env = {
        **os.environ,
        "MESH_RATE_LIMITS": "off",  # the benchmarks measure throughput
        "MESH_SUBSCRIBER_BUFFER": "4096",
        "MESH_LOG_LEVEL": "INFO",  # the "listening on" line is logged at INFO
        "PYTHONUNBUFFERED": "1",
        "MESH_METRICS_TOKEN": METRICS_TOKEN,  # units per commit, from /metrics
    }
    if database_url:
        env["MESH_DATABASE_URL"] = database_url
    args = [sys.executable, "-m", "quart_mesh", "serve", "--port", "0"]
    args += ["--data-dir", str(data_dir)]
    servers = [spawn(args, env)]
    try:
        if count > 1:
            with ThreadPoolExecutor(count - 1) as pool:
                servers += list(pool.map(lambda _: spawn(args, env), range(count - 1)))
    except BaseException:
        Mesh(servers, None).stop()
        raise
    return Mesh(servers, pg_data)


def start_client(job: dict[str, Any]) -> subprocess.Popen[str]:
    """A load-generator process of this script, given *job*."""
    return _common.start_client(_common.python_client(__file__), job)


async def run_clients(
    jobs: list[dict[str, Any]], mesh: Mesh, warmup: float, seconds: float
) -> dict[str, Any]:
    """Run one client process per job; the servers' CPU over the same window."""
    procs = [start_client({**job, "warmup": warmup, "seconds": seconds}) for job in jobs]
    try:
        for proc in procs:
            assert proc.stdout is not None
            line = await trio.to_thread.run_sync(proc.stdout.readline)
            if line.strip() != "ready":
                raise RuntimeError(f"client did not start: {line!r}")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        await trio.sleep(warmup)
        # the scrapes are outside the CPU window (a process's first request
        # also builds its routing tables: tens of ms)
        commits0, units0 = await trio.to_thread.run_sync(mesh.batches)
        (node0, pg0), t0 = mesh.cpu(), time.monotonic()
        await trio.sleep(seconds)
        (node1, pg1), elapsed = mesh.cpu(), time.monotonic() - t0
        commits1, units1 = await trio.to_thread.run_sync(mesh.batches)
        results = []
        for proc in procs:
            assert proc.stdout is not None
            out = await trio.to_thread.run_sync(proc.stdout.read)
            await trio.to_thread.run_sync(proc.wait)
            results.append(json.loads(out))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    ops = sum(r["ops"] for r in results)
    latencies = [x for r in results for x in r["latencies"]]
    errors = [e for r in results for e in r["errors"]]
    return {
        "rate": ops / median([r["elapsed"] for r in results]),
        "p50": percentile(latencies, 50) * 1e3,
        "p99": percentile(latencies, 99) * 1e3,
        "node_us": (node1 - node0) / ops * 1e6 if ops else float("nan"),
        "pg_us": (pg1 - pg0) / ops * 1e6 if ops else float("nan"),
        "cores": (node1 - node0 + pg1 - pg0) / elapsed,
        "units": (units1 - units0) / (commits1 - commits0) if commits1 > commits0 else 0.0,
        "client_cpu": sum(r["cpu"] for r in results) / seconds,
        "errors": errors,
    }


def spread(items: list[Any], buckets: int) -> list[list[Any]]:
    return [items[i::buckets] for i in range(buckets)]


async def measure_once(
    store: str, count: int, args: argparse.Namespace, cluster: Any
) -> dict[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        data_dir = Path(tmp) / "mesh-data"
        url = cluster.url_for(data_dir) if store == "postgresql" else None
        pg_data = cluster.folder / "data" if store == "postgresql" else None
        mesh = start_mesh(count, data_dir, url, pg_data)
        try:
            endpoints = [s.host_port for s in mesh.servers]
            senders = max(args.senders, args.fanout_senders, 1)
            guests = max(args.receivers, 1)
            setup = await setup_mesh(mesh.servers[0].url, senders, guests)
            room = setup["room"]
            # every process's first HTTP request (it builds the routing
            # tables), made now rather than during a measurement
            await trio.to_thread.run_sync(mesh.batches)

            def at(i: int, token: str) -> list[Any]:
                host, port = endpoints[i % count]
                return [host, port, token]

            base = {"room": room, "window": args.window}
            clients = max(1, args.clients)
            # (a) sends: K senders round-robin over the processes
            send_conns = [at(i, t) for i, t in enumerate(setup["senders"][: args.senders])]
            jobs = [
                {**base, "mode": "send", "senders": part, "receivers": []}
                for part in spread(send_conns, clients)
                if part
            ]
            results = {"send": await run_clients(jobs, mesh, args.warmup, args.seconds)}
            # (b) fan-out: R receivers round-robin, a few senders
            fan_senders = [at(i, t) for i, t in enumerate(setup["senders"][: args.fanout_senders])]
            fan_receivers = [at(i, t) for i, t in enumerate(setup["receivers"][: args.receivers])]
            jobs = [
                {
                    **base,
                    "window": args.fanout_window,
                    "mode": "fanout",
                    "senders": s,
                    "receivers": r,
                }
                for s, r in zip(
                    spread(fan_senders, clients), spread(fan_receivers, clients), strict=True
                )
            ]
            results["fanout"] = await run_clients(jobs, mesh, args.warmup, args.seconds)
            # (c) cross-process latency: sender on process A, receiver on B
            job = {
                **base,
                "mode": "latency",
                "rate": args.rate,
                "window": 1000,  # paced by the rate, not by acknowledgements
                "senders": [at(0, setup["senders"][0])],
                "receivers": [at(1, setup["receivers"][0])],
            }
            results["latency"] = await run_clients([job], mesh, args.warmup, args.latency_seconds)
            return results
        finally:
            mesh.stop()


def fmt(value: float, spec: str) -> str:
    return "-" if value != value else format(value, spec)


def targets(results: dict[str, list[dict[str, dict[str, Any]]]]) -> None:
    """Issue 34's targets, each a ratio of two figures of the same run (the
    median over runs of each run's ratio), and the per-operation costs the
    projection in ``docs/benchmarks.md`` is made from."""
    pg = sorted(
        (int(name.rsplit("x", 1)[1]), name) for name in results if name.startswith("postgres")
    )
    if not pg or pg[0][0] != 1:
        return
    one = pg[0][1]
    runs = min(len(r) for r in results.values())

    def per_run(a: str, b: str, f: Callable[[dict[str, Any]], float]) -> float:
        found = []
        for i in range(runs):
            below = f(results[b][i])
            if below:
                found.append(f(results[a][i]) / below)
        return median(found) if found else float("nan")

    def cpu(run: dict[str, Any]) -> float:
        return float(run["send"]["node_us"] + run["send"]["pg_us"])

    def sends(run: dict[str, Any]) -> float:
        return float(run["send"]["rate"])

    def per_core(run: dict[str, Any]) -> float:
        cores = run["fanout"]["cores"]
        return float(run["fanout"]["rate"] / cores) if cores else 0.0

    print("\n(d) issue 34's targets (each the median over runs of a ratio within a run)")
    rows: list[tuple[str, float, str, bool]] = []
    for n, name in pg[1:]:
        limit = 1.25 if n == 2 else 1.5
        value = per_run(name, one, cpu)
        rows.append((f"node+PG CPU per send, x{n} / x1", value, f"<= {limit}", value <= limit))
    if "sqlite x1" in results:
        value = per_run(one, "sqlite x1", sends)
        rows.append(("sends/s, PostgreSQL x1 / SQLite x1", value, ">= 0.5", value >= 0.5))
    for n, name in pg[1:]:
        value = per_run(name, one, sends)
        rows.append((f"sends/s, x{n} / x1", value, ">= 1.0", value >= 1.0))
    for n, name in pg[1:]:
        value = per_run(name, one, per_core)
        rows.append((f"deliveries/s per busy core, x{n} / x1", value, ">= 0.8", value >= 0.8))
    for _, name in pg:
        p50 = median([r["latency"]["p50"] for r in results[name]])
        p99 = median([r["latency"]["p99"] for r in results[name]])
        rows.append((f"{name}: A->B p50 ms", p50, "<= 5", p50 <= 5))
        rows.append((f"{name}: A->B p99 ms", p99, "<= 30", p99 <= 30))
    for what, value, target, met in rows:
        print(f"  {what:<42}{value:>8.2f}  target {target:<8}{'met' if met else 'NOT met'}")
    # node CPU per send against the number of processes: a straight line
    # w + n*f (w: the writing process's share, f: each process following it)
    xs = [float(n) for n, _ in pg]
    ys = [median([r["send"]["node_us"] for r in results[name]]) for _, name in pg]
    if len(xs) > 1:
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        f = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
            (x - mx) ** 2 for x in xs
        )
        w = my - f * mx
        pg_cpu = median([r["send"]["pg_us"] for r in results[one]])
        deliver = median([r["fanout"]["node_us"] for r in results[one]])
        print(
            f"  model inputs: node CPU per send = {w:.0f} + {f:.0f} x processes µs; "
            f"PostgreSQL {pg_cpu:.0f} µs per send (x1); node {deliver:.0f} µs per delivery (x1)"
        )


def report(results: dict[str, list[dict[str, dict[str, Any]]]], args: argparse.Namespace) -> None:
    def med(config: str, test: str, key: str) -> float:
        return median([run[test][key] for run in results[config] if test in run])

    configs = list(results)
    base = configs[0]

    def ratio(config: str, test: str, key: str) -> str:
        b = med(base, test, key)
        return "-" if not b or b != b else f"{med(config, test, key) / b:.2f}x"

    print(
        f"\ncluster: {os.cpu_count()} cores, median of {args.runs} runs of {args.seconds:g} s "
        f"(after {args.warmup:g} s warm-up); load from {args.clients} client processes; "
        f"ratios against {base}"
    )
    print(
        f"\n(a) WebSocket sends: {args.senders} senders x {args.window} in flight, one room;"
        " a send counts when its own message event comes back"
    )
    head = (
        f"{'config':<14}{'sends/s':>9}{'ratio':>7}{'p50 ms':>8}{'ratio':>7}{'p99 ms':>8}"
        f"{'ratio':>7}{'node µs/op':>11}{'PG µs/op':>10}{'cores busy':>11}{'client cores':>13}"
        f"{'units/commit':>13}"
    )

    def rows(test: str, unit_rate: str) -> None:
        print(head.replace("sends/s", unit_rate))
        for c in configs:
            print(
                f"{c:<14}{fmt(med(c, test, 'rate'), '.0f'):>9}{ratio(c, test, 'rate'):>7}"
                f"{fmt(med(c, test, 'p50'), '.1f'):>8}{ratio(c, test, 'p50'):>7}"
                f"{fmt(med(c, test, 'p99'), '.1f'):>8}{ratio(c, test, 'p99'):>7}"
                f"{fmt(med(c, test, 'node_us'), '.0f'):>11}"
                f"{fmt(med(c, test, 'pg_us'), '.0f'):>10}"
                f"{fmt(med(c, test, 'cores'), '.2f'):>11}"
                f"{fmt(med(c, test, 'client_cpu'), '.2f'):>13}"
                f"{fmt(med(c, test, 'units'), '.1f'):>13}"
            )

    rows("send", "sends/s")
    print(
        f"\n(b) fan-out: {args.receivers} receivers, {args.fanout_senders} senders x "
        f"{args.fanout_window} in flight, one room; deliveries counted at the receivers"
        " (latency columns: none measured here)"
    )
    rows("fanout", "deliv/s")
    print(
        f"\n(c) delivery latency, send on process A -> event on process B "
        f"(A = B with one process): {args.rate:g} messages/s for {args.latency_seconds:g} s"
    )
    print(f"{'config':<14}{'p50 ms':>8}{'ratio':>7}{'p99 ms':>8}{'ratio':>7}{'received/s':>11}")
    for c in configs:
        print(
            f"{c:<14}{fmt(med(c, 'latency', 'p50'), '.1f'):>8}{ratio(c, 'latency', 'p50'):>7}"
            f"{fmt(med(c, 'latency', 'p99'), '.1f'):>8}{ratio(c, 'latency', 'p99'):>7}"
            f"{fmt(med(c, 'latency', 'rate'), '.0f'):>11}"
        )
    print(
        "\nnode µs/op, PG µs/op: CPU of the node processes / of the PostgreSQL server per send"
        " or delivery; cores busy: both together per second; client cores: the load"
        " generators' CPU per second; units/commit: writes (sends and others) per"
        " committed transaction, over all processes"
    )
    targets(results)
    errors = {
        (c, test): e
        for c in configs
        for run in results[c]
        for test, r in run.items()
        if (e := r.get("errors"))
    }
    for (c, test), e in errors.items():
        print(f"errors in {c} {test} (first of them): {e[:3]}")
    print(f"reproduce: {command_line()}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", default="1,2,4", help="PostgreSQL process counts")
    parser.add_argument("--senders", type=int, default=8)
    parser.add_argument("--window", type=int, default=4, help="sends in flight per sender")
    parser.add_argument("--receivers", type=int, default=100)
    parser.add_argument("--fanout-senders", type=int, default=4)
    parser.add_argument("--fanout-window", type=int, default=8)
    parser.add_argument("--rate", type=float, default=50.0, help="messages/s for (c)")
    parser.add_argument("--latency-seconds", type=float, default=4.0, help="duration of (c)")
    parser.add_argument("--clients", type=int, default=2, help="load-generator processes")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--no-postgres", action="store_true", help="only the SQLite baseline (no PostgreSQL)"
    )
    args = parser.parse_args()
    raise_fd_limit()
    counts = [int(n) for n in args.processes.split(",") if n.strip()]
    configs: list[tuple[str, str, int]] = [("sqlite x1", "sqlite", 1)]
    from tests.stores import postgres_cluster

    started = time.monotonic()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average before the run (1, 5, 15 min): {load}", flush=True)
    # started in a thread: it migrates its template with a Trio run of its own
    clusters = postgres_cluster()
    cluster = await trio.to_thread.run_sync(clusters.__enter__)
    try:
        if cluster is None and not args.no_postgres:
            print("PostgreSQL is not installed: only the SQLite baseline is measured")
        if cluster is not None and not args.no_postgres:
            configs += [(f"postgres x{n}", "postgresql", n) for n in counts]
        results: dict[str, list[dict[str, dict[str, Any]]]] = {name: [] for name, _, _ in configs}
        # runs interleave the configurations, so slow drift of a shared
        # machine's load spreads over all of them instead of one
        for run in range(args.runs):
            for name, store, count in configs:
                t = time.monotonic()
                try:
                    results[name].append(await measure_once(store, count, args, cluster))
                except Exception as error:  # a failing configuration is reported, not hidden
                    print(f"run {run + 1} {name}: FAILED: {error!r}", flush=True)
                    continue
                r = results[name][-1]
                print(
                    f"run {run + 1} {name}: {r['send']['rate']:.0f} sends/s, "
                    f"{r['fanout']['rate']:.0f} deliveries/s, latency p50 "
                    f"{r['latency']['p50']:.1f} ms ({time.monotonic() - t:.0f} s)",
                    flush=True,
                )
    finally:
        await trio.to_thread.run_sync(clusters.__exit__, None, None, None)
    results = {name: runs for name, runs in results.items() if runs}
    if not results:
        raise SystemExit("every configuration failed")
    report(results, args)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"total {time.monotonic() - started:.0f} s; load average at the end {load}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--client"]:
        client_main()
    else:
        trio.run(main)
