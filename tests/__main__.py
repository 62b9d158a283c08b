"""The whole suite on both stores at once: ``python -m tests [pytest args]``.

The SQLite run and the PostgreSQL run (``--store postgresql``) are two
pytest processes side by side, each with its own temporary folder; most of
a test's time is spent waiting on sockets, subprocesses and the browser, so
on two cores the pair takes little longer than the longer one alone.
Each run's output is written to a file and printed whole once it ends (the
first to end first), so the two never interleave; the exit status is the
first non-zero one of the two (0 if both passed).

The tests that touch no store (``store_free``) run once, in the
PostgreSQL run (``--store-free-on=postgresql``), and the web client's
(``client_only``) once, in the SQLite run, but for the share of its files
``tests/conftest.py`` gives the PostgreSQL one (``--clients-on=split``,
``CLIENT_EIGHTHS_ON_POSTGRESQL``): the two runs take about as long.

Arguments go to both runs (``python -m tests -k search``). Give ``--store``
to run one store only, in the foreground, as ``python -m pytest`` would.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

STORES = ("sqlite", "postgresql")


def main(argv: list[str]) -> int:
    if any(a == "--store" or a.startswith("--store=") for a in argv):
        return subprocess.call([sys.executable, "-m", "pytest", *argv])
    with tempfile.TemporaryDirectory(prefix="quart-mesh-tests-") as scratch:
        root = Path(scratch)
        runs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
        try:
            for store in STORES:
                log = root / f"{store}.log"
                # the tests that touch no store go to the PostgreSQL run: the
                # SQLite run has the web client's (client_only), the longer
                command = [
                    sys.executable,
                    "-m",
                    "pytest",
                    f"--store={store}",
                    "--store-free-on=postgresql",
                    "--clients-on=split",
                ]
                # the cache is written at the end of a run: one writer only
                if store != STORES[0]:
                    command += ["-p", "no:cacheprovider"]
                command += [f"--basetemp={root / store}", *argv]
                with log.open("wb") as out:
                    process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
                runs[store] = (process, log)
                print(f"+ {' '.join(command)}  (output: when it ends)", flush=True)
            started = time.monotonic()
            statuses: dict[str, int] = {}
            while len(statuses) < len(runs):
                for store, (process, log) in runs.items():
                    if store in statuses or process.poll() is None:
                        continue
                    statuses[store] = process.returncode
                    minutes = (time.monotonic() - started) / 60
                    print(
                        f"\n===== the {store} run: status {process.returncode}, "
                        f"{minutes:.1f} min =====",
                        flush=True,
                    )
                    sys.stdout.buffer.write(log.read_bytes())
                    sys.stdout.flush()
                time.sleep(0.5)
        except KeyboardInterrupt:
            for process, _ in runs.values():
                process.terminate()
            for process, _ in runs.values():
                process.wait()
            return 130
    summary = ", ".join(f"{store} {status}" for store, status in statuses.items())
    print(f"\n===== both stores: {summary} =====", flush=True)
    return next((s for s in statuses.values() if s != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
