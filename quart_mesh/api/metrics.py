"""``GET /metrics``: the node's metrics in the Prometheus text format.

Off unless ``MESH_METRICS_TOKEN`` is set (then an unknown endpoint, 404, as
before); when set, a scrape must carry ``Authorization: Bearer <token>``
(401 otherwise), so metrics never leak to the public side of the port
(decision 0044). Prometheus: ``authorization: {credentials: ...}`` in the
scrape config.

Counters and histograms of requests are kept as they happen
(:class:`HttpMetrics`); everything else is read from the node's parts when
scraped (:class:`NodeCollector`), so the send path pays nothing for it. With
``--workers N`` each scrape is answered by the worker that takes the
connection and shows that worker's own figures (docs/operations.md).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from quart import Blueprint, Response, current_app

from ..descriptors import count_open_fds, open_file_limit
from ..errors import NotFound, Unauthorized
from ..faults import KINDS
from ._common import bearer_token

if TYPE_CHECKING:
    from ..node import Node

__all__ = ["HttpMetrics", "NodeCollector", "bp", "metrics_of"]

bp = Blueprint("metrics", __name__)

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: request latency buckets, seconds
_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class HttpMetrics:
    """The app's registry, with the request counter and latency histogram."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "mesh_http_requests",
            "HTTP requests answered, by method, URL rule and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "mesh_http_request_duration_seconds",
            "Time from a request's start to its answer, by method and URL rule",
            ["method", "route"],
            buckets=_LATENCY,
            registry=self.registry,
        )

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
    body = generate_latest(metrics_of().registry)
    return Response(body, content_type=CONTENT_TYPE_LATEST)
