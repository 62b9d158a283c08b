"""``create_app(settings)``: the Quart-Trio application around one :class:`Node`.

:func:`~quart_mesh.server.serve` opens the app's node and runs it in the same
nursery as the listeners (one tree: a component that fails takes the server
down). Served any other way (Quart's test client, a stock ASGI server through
:mod:`quart_mesh.asgi`), the app's lifespan opens and runs the node in the
app's nursery instead; under a stock server (``exit_on_failure``) a node that
stops while serving ends the process with status 70, because the server
would swallow the error and go on serving without it. Every error leaves as
JSON ``{"error", "code"}``; an unexpected one is logged with a request id and
answered 500 without internals.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import math
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, NoReturn

import trio
from quart import Response, g, jsonify, request, websocket
from quart.ctx import RequestContext
from quart.globals import request_ctx
from quart.routing import QuartRule
from quart.typing import ResponseReturnValue
from quart.wrappers import BaseRequestWebsocket
from quart_trio import QuartTrio
from quart_trio.wrappers import TrioRequest
from werkzeug.exceptions import HTTPException, MethodNotAllowed
from werkzeug.routing.exceptions import WebsocketMismatch

from . import web
from .a2a_server import with_a2a
from .api import BLUEPRINTS
from .api._common import client_address
from .api.apps import APPS_PREFIX
from .api.metrics import HttpMetrics, NodeCollector
from .api.models import PROXY_PREFIX
from .api.path_methods import PathMethods
from .api.uploads import UPLOAD_PATH, upload_body_limit
from .asgi_guards import drain_request_bodies
from .config import Settings
from .errors import MeshError, Overloaded, RateLimited, error_body
from .federation.inbound import MAX_RELAY_BYTES, RELAY_PATH
from .logs import configure_logging, flush_logging, log_request, request_id_from
from .mcp_server import McpEndpoint
from .node import Node, open_node

__all__ = ["MeshApp", "configure_logging", "create_app", "freeze_startup_heap", "largest_body"]

log = logging.getLogger(__name__)

#: seconds a process whose node was cancelled from outside while serving is
#: given to end by itself before it is ended (see _run_in_scope)
EXIT_GRACE = 5.0

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    411: "length_required",
    413: "too_large",
    414: "uri_too_long",
    415: "unsupported_media_type",
    431: "headers_too_large",
}


def _body_limits(settings: Settings) -> tuple[dict[str, int], dict[str, int]]:
    """The body limits above ``max_body_bytes``: by path, and by path prefix."""
    by_path = {
        UPLOAD_PATH: upload_body_limit(settings.limits),
        RELAY_PATH: MAX_RELAY_BYTES,
    }
    by_prefix = {
        PROXY_PREFIX: settings.max_completion_body_bytes,
        APPS_PREFIX: settings.limits.max_app_body_bytes,
    }
    return by_path, by_prefix


def largest_body(settings: Settings) -> int:
    """The largest request body the node accepts on any path (an upload's,
    ``max_upload_bytes`` plus its multipart framing, unless set lower than
    another limit)."""
    by_path, by_prefix = _body_limits(settings)
    return max(settings.limits.max_body_bytes, *by_path.values(), *by_prefix.values())


def _request_class(settings: Settings) -> type[TrioRequest]:
    """Requests whose body limit is ``max_body_bytes``, except on the paths
    below: the model proxy takes chat histories up to
    ``max_completion_body_bytes``, apps their source up to
    ``max_app_body_bytes``, uploads stream files of up to ``max_upload_bytes``
    to disk, and the federation relay takes batches up to ``MAX_RELAY_BYTES``."""
    by_path, by_prefix = _body_limits(settings)
    prefixes = tuple(by_prefix)
    # no path lies under a prefix: whichever is checked first, one limit applies
    assert not any(path.startswith(prefixes) for path in by_path)

    class MeshRequest(TrioRequest):
        def __init__(self, method: str, scheme: str, path: str, *args: Any, **kwargs: Any):
            limit = by_path.get(path)
            if limit is None and path.startswith(prefixes):
                limit = next(v for p, v in by_prefix.items() if path.startswith(p))
            if limit is not None:
                kwargs["max_content_length"] = limit
            super().__init__(method, scheme, path, *args, **kwargs)

    return MeshRequest


class _Rule(QuartRule):
    """Quart's rule, its URL builders (what ``url_for`` calls) compiled when
    first used rather than as the rule is added. werkzeug compiles two
    Python functions a rule, and the node adds some 130 rules an app (at
    ~0.6 ms each, most of an app's making); the node builds no URLs from
    them. Matching is not changed."""

    def _compile_builder(self, append_unknown: bool = True) -> Callable[..., tuple[str, str]]:
        compile_builder = super()._compile_builder
        compiled: list[Callable[..., tuple[str, str]]] = []

        # (the rule positional-only, as werkzeug's ".self": a URL value may be
        # called "rule")
        def build(rule: _Rule, /, **values: Any) -> tuple[str, str]:
            if not compiled:
                compiled.append(compile_builder(append_unknown))
            return compiled[0](rule, **values)

        return build


class MeshApp(QuartTrio):
    """A QuartTrio app that carries its :class:`Node` (once it is open)."""

    url_rule_class = _Rule  # type: ignore[assignment]  # (as quart sets QuartRule)

    settings: Settings
    _node: Node | None = None
    #: the lifespan's shutdown has begun (the node's end is expected from now)
    stopping = False

    @property
    def node(self) -> Node:
        """The node: set while the app is served (or was given one).

        Raises:
            RuntimeError: the node is not open.
        """
        if self._node is None:
            raise RuntimeError("the node is not open: serve the app (or pass an open node)")
        return self._node

    @property
    def has_node(self) -> bool:
        return self._node is not None

    @functools.cached_property
    def path_methods(self) -> PathMethods:
        """Each path's methods: its most concrete template's
        (:mod:`quart_mesh.api.path_methods`). Built at the first request,
        when every route is registered."""
        return PathMethods.of(self.url_map)

    def raise_routing_exception(self, request: BaseRequestWebsocket) -> NoReturn:
        error = request.routing_exception
        if isinstance(error, MethodNotAllowed):
            # werkzeug's list gathers the methods of every template the path matches
            error.valid_methods = self.path_methods.allowed(request.path) or error.valid_methods
        super().raise_routing_exception(request)

    async def dispatch_request(
        self, request_context: RequestContext | None = None
    ) -> ResponseReturnValue:
        request_ = (request_context or request_ctx).request
        rule = request_.url_rule
        if request_.routing_exception is None and rule is not None:
            # the method of a less concrete template than the path's own
            allowed = self.path_methods.elsewhere(rule, request_.path)
            if allowed is not None:
                raise MethodNotAllowed(valid_methods=allowed)
        return await super().dispatch_request(request_context)

    async def make_default_options_response(self) -> Response:
        """The automatic ``OPTIONS``: ``Allow`` lists the path's own methods."""
        allowed = self.path_methods.allowed(request.path) or []
        return self.response_class("", headers={"Allow": ", ".join(allowed)})

    async def startup(self) -> None:
        self.stopping = False
        await super().startup()

    async def shutdown(self) -> None:
        self.stopping = True
        await super().shutdown()

    @contextlib.asynccontextmanager
    async def node_opened(self) -> AsyncIterator[Node]:
        """The app's node: the one it was given, or one opened for the block."""
        if self._node is not None:
            yield self._node
            return
        async with open_node(self.settings) as node:
            self._node = node
            self.extensions["quart_mesh.node"] = node
            try:
                yield node
            finally:
                self._node = None
                del self.extensions["quart_mesh.node"]


def freeze_startup_heap() -> None:
    """Collect garbage once, then exempt every object still alive from
    later collections (``gc.freeze``).

    The node's startup heap (modules, SQLAlchemy, the loaded mesh) is large
    and lives for the process; without this, each full collection, which
    request allocations trigger every so often, walks all of it. Objects
    frozen here are still freed by reference counting; only cycles among
    them that form later are never collected.
    """
    gc.collect()
    gc.freeze()


def create_app(
    settings: Settings | None = None,
    *,
    node: Node | None = None,
    websocket_route: bool = False,
    exit_on_failure: bool = False,
    freeze_heap: bool = False,
) -> MeshApp:
    """Build the app. Pass an open *node* (``open_node``) to share one you
    use directly; otherwise the app opens its own when served.

    Args:
        websocket_route: serve ``/ws`` through a Quart websocket route, for
            servers that do not put the node's own transport in front (a
            stock ASGI server); otherwise WebSocket requests that reach the
            app are refused.
        exit_on_failure: when the node, run by the app's lifespan, stops
            while serving (a part failed), log it and end the process with
            status 70 (``os.EX_SOFTWARE``) after the node is closed.
        freeze_heap: once the node is open and loaded, move everything
            alive into the garbage collector's permanent generation
            (:func:`freeze_startup_heap`), so that its collections, which
            requests trigger, no longer walk the node's startup heap. For a
            process that is the server; not for a program that embeds the
            app (it would freeze that program's objects too).
    """
    if node is not None:
        settings = node.settings
    settings = settings or Settings.from_env()
    app = MeshApp(__name__)
    app.settings = settings
    if node is not None:
        app._node = node
        app.extensions["quart_mesh.node"] = node
    http_metrics = HttpMetrics(NodeCollector(lambda: app.node if app.has_node else None))
    app.extensions["quart_mesh.metrics"] = http_metrics
    #: ``/mcp``: the official MCP SDK's server in front of the app, its
    #: sessions run beside the node (below)
    mcp = McpEndpoint(settings, lambda: app.node)
    mcp.observe = http_metrics.observe
    app.extensions["quart_mesh.mcp"] = mcp
    app.asgi_app = drain_request_bodies(  # type: ignore[method-assign,assignment]
        mcp.wrap(with_a2a(app.asgi_app, lambda: app.node, observe=http_metrics.observe)),
        lambda: app.nursery,
        websockets=websocket_route,
    )
    app.config.update(
        MAX_CONTENT_LENGTH=settings.limits.max_body_bytes,
        BODY_TIMEOUT=30,
        BACKGROUND_TASK_SHUTDOWN_TIMEOUT=settings.graceful_timeout,
        JSON_SORT_KEYS=False,
    )
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.json.ensure_ascii = False  # type: ignore[attr-defined]
    for bp in BLUEPRINTS:
        app.register_blueprint(bp)
    app.register_blueprint(web.bp)
    app.request_class = _request_class(settings)

    scopes: list[trio.CancelScope] = []
    mcp_scope: list[trio.CancelScope] = []

    @app.before_serving
    async def _start_node() -> None:
        # serve() runs the node in its own tree; only other hosts (the test
        # client) need the lifespan to open and run it
        if app.has_node and app.node.running:
            return
        scopes.append(trio.CancelScope())
        try:
            await app.nursery.start(_run_in_scope, app, scopes[-1], exit_on_failure)
        except Exception as error:
            if exit_on_failure:  # say why before the server's own traceback
                log.error("cannot start the node: %s", error)
            raise

    @app.before_serving
    async def _start_mcp() -> None:
        # in the lifespan's nursery, beside the node: a failure ends the app
        mcp_scope.append(trio.CancelScope())
        await app.nursery.start(_run_mcp, mcp, mcp_scope[-1])

    if (mirror := http_metrics.mirror) is not None:  # a worker of --workers (api/metrics.py)
        mirror_scope = trio.CancelScope()

        @app.before_serving
        async def _mirror_metrics() -> None:
            app.nursery.start_soon(_run_mirror, http_metrics, mirror_scope)

        @app.after_serving
        async def _stop_mirror() -> None:
            mirror_scope.cancel()
            mirror.sync()  # a last copy, before _stop_node stops the node

    if freeze_heap:

        @app.before_serving
        async def _freeze_heap() -> None:  # after _start_node: the node is loaded
            freeze_startup_heap()

    @app.after_serving
    async def _stop_node() -> None:
        if scopes and app.has_node:
            app.node.realtime.shut_down()
        while scopes:
            scopes.pop().cancel()
        while mcp_scope:
            mcp_scope.pop().cancel()

    if websocket_route:

        @app.websocket("/ws")
        async def _websocket() -> None:
            # the object itself, not the context-bound proxy: the session's
            # writer task may be started from another task's context (a
            # commit's delivery wakes it), where the proxy is unbound
            await app.node.realtime.serve_asgi_websocket(
                websocket._get_current_object()  # type: ignore[attr-defined]
            )

    @app.errorhandler(MeshError)
    async def _mesh_error(error: MeshError) -> Response:
        response = jsonify(error.to_json())
        response.status_code = error.status
        if isinstance(error, (RateLimited, Overloaded)):
            # whole seconds, rounded up: a client that waits that long is let in
            response.headers["Retry-After"] = str(max(1, math.ceil(error.retry_after)))
        return response

    @app.errorhandler(HTTPException)
    async def _http_error(error: HTTPException) -> Response:
        # plain HTTP to the websocket route: an unknown path, as behind serve()
        status = 404 if isinstance(error, WebsocketMismatch) else error.code or 500
        code = _HTTP_CODES.get(status, "http_error")
        message = {
            404: "no such endpoint",
            405: "method not allowed on this endpoint",
            413: "the request body is too large",
        }.get(status, error.description or error.name)
        response = jsonify(error_body(message, code))
        response.status_code = status
        if status == 413:
            # the rest of the body is still on the wire: close rather than leave the
            # keep-alive connection stuck behind it (hypercorn would not read it)
            response.headers["Connection"] = "close"
        if status == 405 and (allowed := getattr(error, "valid_methods", None)):
            response.headers["Allow"] = ", ".join(allowed)
        return response

    @app.errorhandler(Exception)
    async def _unexpected(error: Exception) -> Response:
        request_id = _request_id()
        log.error("unhandled error in request %s", request_id, exc_info=error)
        response = jsonify(
            {
                **error_body(f"internal error (request id {request_id})", "internal_error"),
                "requestId": request_id,
            }
        )
        response.status_code = 500
        return response

    @app.before_request
    async def _begin() -> None:
        g.started = time.perf_counter()
        g.request_id = request_id_from(request.headers.get("X-Request-Id"))

    @app.after_request
    async def _access(response: Response) -> Response:
        request_id = _request_id()
        response.headers["X-Request-Id"] = request_id
        rule = request.url_rule
        route = rule.rule if rule is not None else "-"
        actor = g.get("actor")
        seconds = time.perf_counter() - g.get("started", time.perf_counter())
        log_request(
            request.method,
            route,
            response.status_code,
            seconds,
            actor.participant_id if actor is not None else None,
            request_id,
            _client(app),
        )
        http_metrics.observe(request.method, route, response.status_code, seconds)
        return response

    return app


async def _run_mirror(metrics: HttpMetrics, scope: trio.CancelScope) -> None:
    with scope:
        await metrics.keep_mirrored()


def _client(app: MeshApp) -> str | None:
    """This request's client address (behind trusted proxies, the forwarded one)."""
    return client_address() if app.has_node else request.remote_addr


def _request_id() -> str:
    """This request's id (made by ``_begin``; made now if that did not run)."""
    request_id: str | None = g.get("request_id")
    if request_id is None:
        request_id = g.request_id = request_id_from(None)
    return request_id


class _Started:
    """A task status that remembers whether ``started()`` was called."""

    def __init__(self, task_status: trio.TaskStatus[None]) -> None:
        self._task_status = task_status
        self.called = False

    def started(self, value: None = None) -> None:
        self.called = True
        self._task_status.started(value)


async def _run_in_scope(
    app: MeshApp,
    scope: trio.CancelScope,
    exit_on_failure: bool,
    *,
    task_status: trio.TaskStatus[None],
) -> None:
    """Open and run the app's node until *scope* is cancelled (the app stops).

    Failing before it started, the error goes to whoever started it (the
    lifespan's startup fails). With *exit_on_failure*, stopping afterwards
    for any other reason ends the process with status 70, once the node is
    closed: at once when a part failed; after ``EXIT_GRACE`` seconds when
    the node was cancelled from outside (the app's nursery died around it,
    which hypercorn would swallow; or the server is going down, and then the
    process ends first, with the server's own error). Without it, the error
    propagates into the app's nursery.
    """
    started = _Started(task_status)
    try:
        with scope:
            async with app.node_opened() as node:
                await node.run(task_status=started)
    except BaseException as error:
        if exit_on_failure and started.called and not (scope.cancel_called or app.stopping):
            if _cancelled(error):
                _exit_later(EXIT_GRACE)
            else:
                _exit("the node stopped because one of its parts failed", error)
        raise


async def _run_mcp(
    mcp: McpEndpoint, scope: trio.CancelScope, *, task_status: trio.TaskStatus[None]
) -> None:
    """Run the MCP endpoint's sessions until *scope* is cancelled (the app stops)."""
    with scope:
        await mcp.run(task_status=task_status)


def _cancelled(error: BaseException) -> bool:
    if isinstance(error, BaseExceptionGroup):
        return error.split(trio.Cancelled)[1] is None
    return isinstance(error, trio.Cancelled)


def _exit(why: str, error: BaseException | None = None) -> None:
    """Log why the node stopped, flush the logs and end the process (status 70)."""
    log.critical(
        "%s; exiting with status %d for whatever runs this server to start it again",
        why,
        os.EX_SOFTWARE,
        exc_info=error,
    )
    flush_logging()  # the writer thread's queue (never raises)
    logging.shutdown()  # flushes every handler
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(os.EX_SOFTWARE)


def _exit_later(seconds: float) -> None:
    """End the process with status 70 in *seconds*, unless it ends before."""
    log.error(
        "the node was stopped while serving, without a shutdown (the app's lifespan "
        "failed, or the server is going down); the process ends in %g s if it goes on",
        seconds,
    )

    def watchdog() -> None:
        time.sleep(seconds)
        _exit("the process went on serving without its node")

    # a daemon thread: it dies with a process that ends by itself
    threading.Thread(target=watchdog, name="quart-mesh exit", daemon=True).start()
