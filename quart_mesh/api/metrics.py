"""``GET /metrics``: the node's metrics in the Prometheus text format.

Off unless ``MESH_METRICS_TOKEN`` is set (then an unknown endpoint, 404, as
before); when set, a scrape must carry ``Authorization: Bearer <token>``
(401 otherwise), so metrics never leak to the public side of the port
(decision 0044). Prometheus: ``authorization: {credentials: ...}`` in the
scrape config.

Counters and histograms of requests are kept as they happen
(:class:`HttpMetrics`); everything else is read from the node's parts when
scraped (:class:`NodeCollector`), so the send path pays nothing for it.

With ``quart-mesh serve --workers N`` a scrape, answered by whichever worker
takes the connection, shows the whole node (``metrics_folder.py``): every
worker keeps its figures in files of the parent's folder (prometheus-client's
multiprocess mode), and the answering worker merges them all. The request
counters and the store's histograms are written there as they change; what
:class:`NodeCollector` reads is copied there by :class:`NodeMirror`, every
:data:`MIRROR_SECONDS` and before the worker answers a scrape. Counters and
histograms are summed over the workers; each gauge is combined as
:data:`GAUGE_MODES` says.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Final, Literal

import trio
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from quart import Blueprint, Response, current_app

from ..descriptors import count_open_fds, open_file_limit
from ..errors import NotFound, Unauthorized
from ..faults import KINDS
from ..metrics_folder import worker_files
from ._common import bearer_token

if TYPE_CHECKING:
    from ..node import Node

__all__ = [
    "GAUGE_MODES",
    "MIRROR_SECONDS",
    "HttpMetrics",
    "NodeCollector",
    "NodeMirror",
    "bp",
    "metrics_of",
]

bp = Blueprint("metrics", __name__)

#: how a gauge's values in the workers combine (``Gauge(multiprocess_mode=...)``)
Mode = Literal["livesum", "livemax", "livemin", "livemostrecent"]

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: request latency buckets, seconds
_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


#: seconds between two copies of a worker's :class:`NodeCollector` figures
#: to its files (``--workers``): how late another worker's gauges and
#: node counters may be in a scrape, and what a worker killed outright may
#: leave uncounted of them
MIRROR_SECONDS = 1.0

#: ``--workers``: how the workers' values of each gauge combine into the
#: node's (prometheus-client's ``multiprocess_mode``; ``live``: a worker's
#: values go when it exits). :data:`PER_WORKER` (and a gauge missing here):
#: not combined, one series per worker, labelled ``worker`` (its number, 1
#: to N).
PER_WORKER: Final = "worker"
GAUGE_MODES: dict[str, Mode | Literal["worker"]] = {
    # the node's connections and queues: each worker holds its own share
    "mesh_websocket_sessions": "livesum",
    "mesh_subscriptions": "livesum",
    "mesh_subscription_queued_events": "livesum",
    "mesh_store_write_queue": "livesum",
    # the bot supervisor runs in one worker (elected): the others say 0
    "mesh_bots": "livesum",
    # a process's own descriptors against its own limit
    "mesh_open_fds": PER_WORKER,
    "mesh_fd_limit": PER_WORKER,
    # one data folder, measured by each worker: the newest measurement
    "mesh_disk_free_bytes": "livemostrecent",
    "mesh_disk_floor_bytes": "livemostrecent",
    # federation links run in one worker (elected); max, not sum: while a
    # link moves to another worker, both may report it for a moment
    "mesh_relay_backlog": "livemax",
    "mesh_relay_consecutive_failures": "livemax",
    # a full disk or a store down is seen by every worker: one fault, not N
    "mesh_faults_active": "livemax",
}


class HttpMetrics:
    """The app's registry, with the request counter and latency histogram.

    *node* (:class:`NodeCollector`) is exported beside them. In a worker of
    ``--workers`` (:func:`~quart_mesh.metrics_folder.use_worker_files`) the
    registry merges every worker's files instead, and *node* is copied to
    this worker's by :attr:`mirror`.
    """

    def __init__(self, node: Collector | None = None) -> None:
        files = worker_files()
        self.registry = CollectorRegistry()
        #: in a worker, the metrics are kept in its files only: registering
        #: them too would export this worker's figures twice
        registry = self.registry if files is None else None
        self.requests = Counter(
            "mesh_http_requests",
            "HTTP requests answered, by method, URL rule and status",
            ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "mesh_http_request_duration_seconds",
            "Time from a request's start to its answer, by method and URL rule",
            ["method", "route"],
            buckets=_LATENCY,
            registry=registry,
        )
        #: ``--workers``: copies *node*'s figures to this worker's files
        self.mirror: NodeMirror | None = None
        if files is None:
            if node is not None:
                self.registry.register(node)
        else:
            MultiProcessCollector(self.registry, path=str(files.path))  # type: ignore[no-untyped-call]
            if node is not None:
                self.mirror = NodeMirror(node, files.number)

    def scrape(self) -> bytes:
        """The exposition (a worker copies its own figures first)."""
        if self.mirror is not None:
            self.mirror.sync()
        return generate_latest(self.registry)

    async def keep_mirrored(self) -> None:
        """``--workers``: copy the node's figures to this worker's files every
        :data:`MIRROR_SECONDS`, until cancelled. Returns at once in a single
        process."""
        mirror = self.mirror
        if mirror is None:
            return
        while True:
            mirror.sync()
            await trio.sleep(MIRROR_SECONDS)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        # a label's values must stay few: a client may send any method
        if method not in _METHODS:
            method = "other"
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)


class NodeCollector(Collector):
    """What the node's parts say when scraped: sessions, fan-out, the store,
    bots, federation links, webhooks (nothing while the app has no node)."""

    def __init__(self, node: Callable[[], Node | None]) -> None:
        self._node = node

    def collect(self) -> Iterator[Metric]:
        node = self._node()
        if node is None:
            return
        stats = node.broker.statistics()
        yield _gauge(
            "mesh_websocket_sessions", "WebSocket connections open now", node.realtime.sessions
        )
        yield _gauge(
            "mesh_subscriptions",
            "Live subscriptions (WebSocket sessions, long polls, webhook and managed bots)",
            stats.subscribers,
        )
        yield _gauge(
            "mesh_subscription_queued_events",
            "Events queued in subscriptions, not yet written to their clients",
            stats.queued,
        )
        yield _counter(
            "mesh_messages_committed",
            "Messages this process committed to the store",
            stats.messages_committed,
        )
        yield _counter(
            "mesh_events_published", "Events this process published to subscribers", stats.published
        )
        yield _counter(
            "mesh_deliveries",
            "Events handed to subscriptions (one per receiver of each event)",
            stats.delivered,
        )
        yield _counter(
            "mesh_subscriptions_dropped",
            "Subscriptions ended because their client fell too far behind (lagging)",
            stats.drops,
        )
        yield _gauge(
            "mesh_store_write_queue",
            "Writes waiting for the store's writer",
            node.db.queued,
        )
        yield from _descriptors()
        yield from _disk(node)
        yield from node.db.batch_units.collect()
        yield from node.db.commit_seconds.collect()
        bots = GaugeMetricFamily(
            "mesh_bots", "Managed bots this process runs, by status", labels=["status"]
        )
        by_status: dict[str, int] = {}
        for bot in node.supervisor.bots.values():
            by_status[bot.status] = by_status.get(bot.status, 0) + 1
        for status, count in sorted(by_status.items()):
            bots.add_metric([status], count)
        yield bots
        backlog = GaugeMetricFamily(
            "mesh_relay_backlog",
            "Federation: outbox positions a peer's link is behind the outbox head, at most"
            " this many events waiting for it (by connection id)",
            labels=["connection"],
        )
        failures = GaugeMetricFamily(
            "mesh_relay_consecutive_failures",
            "Federation: failed attempts of a link since it last succeeded (0 when healthy)",
            labels=["connection"],
        )
        for connection_id, link in sorted(node.relay.links.status.items()):
            backlog.add_metric([connection_id], link.behind)
            failures.add_metric([connection_id], link.failures)
        yield backlog
        yield failures
        webhooks = CounterMetricFamily(
            "mesh_webhook_failures",
            "Webhook deliveries that failed: an attempt to be retried, or an event"
            " the receiver refused (4xx)",
            labels=["kind"],
        )
        for kind, count in sorted(node.webhooks.failures.items()):
            webhooks.add_metric([kind], count)
        yield webhooks
        yield from _faults(node)


def _faults(node: Node) -> Iterator[Metric]:
    """The node's known faults (``faults.py``): those active now, and the
    failures counted, per kind."""
    active = dict.fromkeys(KINDS, 0)
    for fault in node.faults.active():
        active[fault.kind] = active.get(fault.kind, 0) + 1
    gauge = GaugeMetricFamily(
        "mesh_faults_active",
        "Known faults going on now, by kind (a peer or webhook receiver each counts)",
        labels=["kind"],
    )
    for kind, count in sorted(active.items()):
        gauge.add_metric([kind], count)
    yield gauge
    counter = CounterMetricFamily(
        "mesh_fault_failures",
        "Failures of known faults (the disk full, the store unavailable, a peer down...)"
        " since the process started, by kind",
        labels=["kind"],
    )
    for kind, count in sorted(node.faults.failures().items()):
        counter.add_metric([kind], count)
    yield counter


def _descriptors() -> Iterator[Metric]:
    """Open files, counted when scraped (``quart_mesh.descriptors``)."""
    fds = count_open_fds()
    if fds is not None:
        yield _gauge("mesh_open_fds", "File descriptors this process has open", fds)
    yield _gauge(
        "mesh_fd_limit", "The process's open-file limit (soft RLIMIT_NOFILE)", open_file_limit()
    )


def _disk(node: Node) -> Iterator[Metric]:
    """The data folder's free space and the floor it keeps (``disk.py``)."""
    try:
        free, floor = node.disk.free(), node.disk.floor()
    except OSError:  # the folder is gone: say nothing rather than fail the scrape
        return
    yield _gauge("mesh_disk_free_bytes", "Bytes free in the data folder's filesystem", free)
    yield _gauge(
        "mesh_disk_floor_bytes",
        "Free bytes the node keeps: below them uploads and app sources are refused (0: no floor)",
        floor,
    )


class NodeMirror:
    """A worker's :class:`NodeCollector` figures, copied into its metric files
    (``--workers``), where every worker's scrape finds them.

    Gauges are set as read, combined across workers as :data:`GAUGE_MODES`
    says; a label value read before and gone now (a bot's status, a peer's
    link) is set to 0, as the files cannot forget it. Counters grow by what
    they grew since the last copy, on top of what the worker this one took
    over from had counted (its files). Histograms (the store's) are in the
    files already, and left alone.
    """

    def __init__(self, collector: Collector, worker: int) -> None:
        self._collector = collector
        self._worker = str(worker)
        self._gauges: dict[str, Gauge] = {}
        self._counters: dict[str, Counter] = {}
        #: each gauge's label values set by the last copy
        self._set: dict[str, set[tuple[str, ...]]] = {}
        #: each counter's value at the last copy, by label values
        self._counted: dict[tuple[str, tuple[str, ...]], float] = {}

    def sync(self) -> None:
        for family in self._collector.collect():
            if family.type == "gauge":
                self._gauge(family)
            elif family.type == "counter":
                self._counter(family)

    def _gauge(self, family: Metric) -> None:
        mode = GAUGE_MODES.get(family.name, PER_WORKER)
        extra = (self._worker,) if mode == PER_WORKER else ()
        # one series per worker: a sum over one worker's values each
        combine: Mode = "livesum" if mode == PER_WORKER else mode
        now: set[tuple[str, ...]] = set()
        for sample in family.samples:
            gauge = self._gauges.get(family.name)
            if gauge is None:
                labels = [*sample.labels, *(["worker"] if extra else [])]
                gauge = self._gauges[family.name] = Gauge(
                    family.name,
                    family.documentation,
                    labels,
                    registry=None,
                    multiprocess_mode=combine,
                )
            key = (*sample.labels.values(), *extra)
            (gauge.labels(*key) if key else gauge).set(sample.value)
            now.add(key)
        for gone in self._set.get(family.name, set()) - now:
            if gone:  # (a gauge without labels is always read)
                self._gauges[family.name].labels(*gone).set(0)
        self._set[family.name] = now

    def _counter(self, family: Metric) -> None:
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            counter = self._counters.get(family.name)
            if counter is None:
                counter = self._counters[family.name] = Counter(
                    family.name, family.documentation, list(sample.labels), registry=None
                )
            key = tuple(sample.labels.values())
            child = counter.labels(*key) if key else counter
            before = self._counted.get((family.name, key), 0.0)
            # a count that went down was started again: all of it is new
            grown = sample.value - before if sample.value >= before else sample.value
            if grown:
                child.inc(grown)
            self._counted[(family.name, key)] = sample.value


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


def metrics_of() -> HttpMetrics:
    """The current app's :class:`HttpMetrics` (``create_app`` makes it)."""
    metrics: HttpMetrics = current_app.extensions["quart_mesh.metrics"]
    return metrics


@bp.get("/metrics")
async def metrics() -> Response:
    token: str | None = current_app.settings.metrics_token  # type: ignore[attr-defined]
    if not token:
        raise NotFound("no such endpoint", "not_found")
    given = bearer_token()
    if not given or not hmac.compare_digest(given.encode(), token.encode()):
        raise Unauthorized("a metrics scrape needs the metrics token", "unauthorized")
    return Response(metrics_of().scrape(), content_type=CONTENT_TYPE_LATEST)
