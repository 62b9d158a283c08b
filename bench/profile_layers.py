"""Where a request's CPU goes, by layer, on the node and its same-run baselines.

Runs one workload of ``bench_speed.py`` (the same Node.js clients) against
each server in turn while ``py-spy`` samples the server process, then
attributes every sample to the innermost frame that belongs to a layer
(the store, the node's handler and services, the node's transport, socket
system calls, Quart, hypercorn, trio) and prints the layers in microseconds
of server CPU per operation: the operation's CPU (as ``bench_speed.py``
measures it) split in the proportions of the samples.

    python bench/profile_layers.py get             # node, quart-bare, asgi-raw
    python bench/profile_layers.py rest_sends      # node, node-nostore, quart-bare
    python bench/profile_layers.py get --runs 3 --seconds 8

Needs ``py-spy`` (``pip install py-spy``) and permission to attach to a child
process (root, or ``kernel.yama.ptrace_scope`` 0). Samples see Python frames
only: the kernel's share of a system call is charged to the frame that made
it, and CPU spent outside any frame (the interpreter's start, the kernel's
loopback delivery) is spread in proportion.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_speed
from _common import median

#: (layer, substrings of a py-spy frame's file path), innermost match wins
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "store (SQLAlchemy, sqlite3, quart_mesh/store)",
        ("sqlalchemy/", "sqlite3", "quart_mesh/store/", "psycopg"),
    ),
    (
        "node: handler, services, broker",
        (
            "quart_mesh/api/",
            "quart_mesh/services/",
            "quart_mesh/records",
            "quart_mesh/wire",
            "quart_mesh/ids",
            "quart_mesh/identity",
            "quart_mesh/permissions",
            "quart_mesh/broker",
            "quart_mesh/security",
            "quart_mesh/events",
            "quart_mesh/realtime/",
            "bench/_servers.py",
        ),
    ),
    (
        "node: transport (server.py, asgi_guards, request class)",
        ("quart_mesh/server.py", "quart_mesh/asgi_guards", "quart_mesh/app.py"),
    ),
    ("socket system calls (trio/_socket.py)", ("trio/_socket.py",)),
    ("Quart, Werkzeug", ("quart/", "quart_trio/", "werkzeug/")),
    ("hypercorn, h11, wsproto", ("hypercorn/", "h11/", "wsproto/")),
    ("trio: scheduler, channels, cancel scopes, threads", ("trio/", "outcome/", "threading.py")),
]
OTHER = "other (json, the standard library outside these)"


def layer_of(frame: str) -> str | None:
    for name, patterns in LAYERS:
        if any(p in frame for p in patterns):
            return name
    return None


def attribute(raw: Path) -> dict[str, float]:
    """Fractions of the samples in *raw* (py-spy's ``raw`` format) by layer."""
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        layer = OTHER
        for frame in reversed(stack.split(";")):
            found = layer_of(frame)
            if found:
                layer = found
                break
        counts[layer] += int(n)
    total = sum(counts.values()) or 1
    return {name: count / total for name, count in counts.items()}


def profile(
    spy: str, node: str, kind: str, workload: str, args: argparse.Namespace
) -> tuple[float, dict[str, float]]:
    """One run of *workload* on a fresh *kind* server under py-spy: (CPU µs
    per operation, that CPU split by layer in µs)."""
    with tempfile.TemporaryDirectory() as tmp:
        target = bench_speed.start_target(kind, Path(tmp))
        raw = Path(tmp) / "profile.raw"
        try:
            sampler = subprocess.Popen(
                [
                    spy,
                    "record",
                    "--pid",
                    str(target.server.process.pid),
                    "--rate",
                    str(args.rate),
                    "--duration",
                    str(int(args.warmup + args.seconds + 2)),
                    "--format",
                    "raw",
                    "--output",
                    str(raw),
                    "--nonblocking",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            figure = bench_speed.measure(node, workload, target, args)
            sampler.wait()
        finally:
            target.server.stop()
        shares = attribute(raw) if raw.exists() else {}
    return figure.per_op_us, {name: share * figure.per_op_us for name, share in shares.items()}


def main() -> None:
    parser = bench_speed.parser()
    parser.description = __doc__.split("\n\n")[0] if __doc__ else None
    parser.add_argument("workload", choices=["rest_sends", "get", "health", "ws_sends", "fanout4"])
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        sys.exit("py-spy is needed: pip install py-spy")
    node = bench_speed.find_node()
    if node is None:
        sys.exit("Node.js with the ws package is needed (bench/README.md)")
    kinds = bench_speed.SERVERS[args.workload]
    per_op: dict[str, list[float]] = {k: [] for k in kinds}
    layers: dict[str, dict[str, list[float]]] = {k: collections.defaultdict(list) for k in kinds}
    for _ in range(args.runs):
        for kind in kinds:  # interleaved, as bench_speed.py does
            cpu, split = profile(spy, node, kind, args.workload, args)
            per_op[kind].append(cpu)
            for name in [*(n for n, _ in LAYERS), OTHER]:
                layers[kind][name].append(split.get(name, 0.0))
    print(f"\n{args.workload}: server CPU per operation by layer, µs (median of {args.runs} runs)")
    print("| layer | " + " | ".join(kinds) + " |")
    print("|---|" + "---:|" * len(kinds))
    for name in [*(n for n, _ in LAYERS), OTHER]:
        print(f"| {name} | " + " | ".join(f"{median(layers[k][name]):.0f}" for k in kinds) + " |")
    print("| **total** | " + " | ".join(f"**{median(per_op[k]):.0f}**" for k in kinds) + " |")
    print(
        f"\n    python bench/profile_layers.py {args.workload}"
        f" --runs {args.runs} --seconds {args.seconds:g}"
    )


if __name__ == "__main__":
    main()
