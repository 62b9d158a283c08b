"""The workers' metric files (``metrics_folder.py``) and the copy of a
worker's node figures into them (``api/metrics.py``'s ``NodeMirror``),
in one process: two workers, one killed and started again, and the scrape
each would answer. ``tests/e2e/test_workers.py`` runs the real thing.

Making a worker swaps prometheus-client's value class for the process;
``monkeypatch`` puts it back after each test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import values
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from quart_mesh import metrics_folder
from quart_mesh.api.metrics import HttpMetrics
from quart_mesh.metrics_folder import ENV, MetricsFolder, use_worker_files
from tests.e2e.test_metrics import Samples, parse, value


class Figures(Collector):
    """What a node's collector would read, set by the test."""

    def __init__(self) -> None:
        self.sessions = 0
        self.committed = 0
        self.fds = 0
        self.bots: dict[str, int] = {}
        self.disk_full = 0

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("mesh_websocket_sessions", "sessions", value=self.sessions)
        yield CounterMetricFamily("mesh_messages_committed", "committed", value=self.committed)
        yield GaugeMetricFamily("mesh_open_fds", "fds", value=self.fds)
        bots = GaugeMetricFamily("mesh_bots", "bots", labels=["status"])
        for status, count in self.bots.items():
            bots.add_metric([status], count)
        yield bots
        faults = GaugeMetricFamily("mesh_faults_active", "faults", labels=["kind"])
        faults.add_metric(["disk_full"], self.disk_full)
        yield faults


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MetricsFolder]:
    made = MetricsFolder.create(tmp_path)
    monkeypatch.setenv(ENV, str(made.path))
    monkeypatch.setattr(values, "ValueClass", values.ValueClass)
    monkeypatch.setattr(metrics_folder, "_worker", None)
    yield made
    made.remove()


ROUTE = "/api/rooms/<room_id>/messages"


class Worker:
    """One worker process's metrics, as ``cli`` and ``create_app`` make them;
    its value class (its files) is put in place for whatever it does."""

    def __init__(self, number: int) -> None:
        assert use_worker_files(number) is not None
        self._values = values.ValueClass
        self.figures = Figures()
        self.metrics = HttpMetrics(self.figures)

    def _as_this_process(self) -> None:
        values.ValueClass = self._values

    def observe(self, status: int, seconds: float, route: str = ROUTE) -> None:
        self._as_this_process()
        self.metrics.observe("POST", route, status, seconds)

    def copy(self) -> None:
        """What it does every MIRROR_SECONDS."""
        self._as_this_process()
        assert self.metrics.mirror is not None
        self.metrics.mirror.sync()

    def scrape(self) -> Samples:
        self._as_this_process()
        return parse(self.metrics.scrape().decode())


def test_a_scrape_of_any_worker_shows_the_whole_node(folder: MetricsFolder) -> None:
    first, second = Worker(1), Worker(2)
    one, two = first.figures, second.figures
    one.sessions, one.committed, one.fds, one.bots = 2, 5, 30, {"running": 1}
    two.sessions, two.committed, two.fds, two.disk_full = 3, 7, 40, 1
    first.observe(201, 0.003)
    second.observe(201, 0.2)
    second.observe(404, 0.001, route="/x")
    first.copy()
    second.copy()

    post = {"method": "POST", "route": ROUTE}
    for answering in (first, second):
        seen = answering.scrape()
        assert value(seen, "mesh_http_requests_total", **post, status="201") == 2
        assert value(seen, "mesh_http_requests_total", method="POST", route="/x", status="404")
        assert value(seen, "mesh_http_request_duration_seconds_count", **post) == 2
        assert value(seen, "mesh_http_request_duration_seconds_bucket", **post, le="0.005") == 1
        assert value(seen, "mesh_messages_committed_total") == 12
        assert value(seen, "mesh_websocket_sessions") == 5
        assert value(seen, "mesh_open_fds", worker="1") == 30
        assert value(seen, "mesh_open_fds", worker="2") == 40
        assert value(seen, "mesh_bots", status="running") == 1
        assert value(seen, "mesh_faults_active", kind="disk_full") == 1  # max, not sum

    # a label value that goes away reads 0; a count goes on from the last copy
    one.bots, one.committed = {}, 6
    seen = first.scrape()
    assert value(seen, "mesh_bots", status="running") == 0
    assert value(seen, "mesh_messages_committed_total") == 13

    # worker 1 is killed: its gauges go, its counts stay; the worker started
    # in its place goes on with its files, its own counts from 0
    names = sorted(os.listdir(folder.path))
    folder.retire(1)
    assert sorted(os.listdir(folder.path)) == [
        n for n in names if not n.endswith("_1.db") or not n.startswith("gauge_live")
    ]
    seen = second.scrape()
    assert value(seen, "mesh_websocket_sessions") == 3
    assert ("mesh_open_fds", (("worker", "1"),)) not in seen
    assert value(seen, "mesh_messages_committed_total") == 13
    assert value(seen, "mesh_http_requests_total", **post, status="201") == 2
    restarted = Worker(1)
    again = restarted.figures
    again.sessions, again.committed, again.fds = 1, 2, 20
    restarted.observe(201, 0.003)
    restarted.copy()
    for answering in (restarted, second):
        seen = answering.scrape()
        assert value(seen, "mesh_messages_committed_total") == 15
        assert value(seen, "mesh_http_requests_total", **post, status="201") == 3
        assert value(seen, "mesh_http_request_duration_seconds_count", **post) == 3
        assert value(seen, "mesh_websocket_sessions") == 4
        assert value(seen, "mesh_open_fds", worker="1") == 20
    # the files as before: none more for a worker started again
    assert sorted(os.listdir(folder.path)) == names


def test_a_folder_whose_parent_is_gone_is_removed(tmp_path: Path) -> None:
    # a parent killed outright: its folder stays behind, unlocked
    # (the module alone, without the package: quicker to start)
    script = (
        "import importlib.util, os, sys; from pathlib import Path;"
        "spec = importlib.util.spec_from_file_location('folder', sys.argv[1]);"
        "module = sys.modules['folder'] = importlib.util.module_from_spec(spec);"
        "spec.loader.exec_module(module);"
        "print(module.MetricsFolder.create(Path(sys.argv[2])).path, flush=True);"
        "os.kill(os.getpid(), 9)"
    )
    killed = subprocess.run(
        [sys.executable, "-c", script, metrics_folder.__file__, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    left = Path(killed.stdout.strip())
    assert left.is_dir()

    alive = MetricsFolder.create(tmp_path)
    try:
        assert not left.exists()
        assert alive.path.is_dir()
        assert (alive.path.stat().st_mode & 0o777) == 0o700
        assert os.listdir(alive.path) == ["lock"]
        # a running parent's folder is left alone
        other = MetricsFolder.create(tmp_path)
        assert alive.path.is_dir()
        other.remove()
    finally:
        alive.remove()
    assert not alive.path.exists()
    assert list(tmp_path.iterdir()) == []
