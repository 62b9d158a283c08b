"""``create_app(settings)``: the Quart-Trio application around one :class:`Node`.

The app's lifespan runs the node: ``before_serving`` starts ``Node.run`` in
the app's nursery (so the store is open and migrated before the first
request), ``after_serving`` cancels it. Every error leaves as JSON
``{"error", "code"}``; an unexpected one is logged with a request id and
answered 500 without internals.
"""

from __future__ import annotations

import logging
import math
import secrets
from typing import Any

import trio
from quart import Response, g, jsonify
from quart_trio import QuartTrio
from quart_trio.wrappers import TrioRequest
from werkzeug.exceptions import HTTPException

from . import web
from .api import BLUEPRINTS
from .api.apps import APPS_PREFIX
from .api.models import PROXY_PREFIX
from .api.uploads import UPLOAD_PATH, upload_body_limit
from .asgi import drain_request_bodies
from .config import Settings
from .errors import MeshError, RateLimited, error_body
from .federation.relay import MAX_RELAY_BYTES, RELAY_PATH
from .node import Node

__all__ = ["MeshApp", "create_app"]

log = logging.getLogger(__name__)

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


def _request_class(settings: Settings) -> type[TrioRequest]:
    """Requests whose body limit is ``max_body_bytes``, except on the paths
    below: the model proxy takes chat histories up to
    ``max_completion_body_bytes``, apps their source up to
    ``max_app_body_bytes``, uploads stream files of up to ``max_upload_bytes``
    to disk, and the federation relay takes batches up to ``MAX_RELAY_BYTES``."""
    #: (path, whether it is a prefix, body limit), first match wins
    body_limits = (
        (PROXY_PREFIX, True, settings.max_completion_body_bytes),
        (APPS_PREFIX, True, settings.limits.max_app_body_bytes),
        (UPLOAD_PATH, False, upload_body_limit(settings.limits)),
        (RELAY_PATH, False, MAX_RELAY_BYTES),
    )

    class MeshRequest(TrioRequest):
        def __init__(self, method: str, scheme: str, path: str, *args: Any, **kwargs: Any):
            for where, prefix, limit in body_limits:
                if path.startswith(where) if prefix else path == where:
                    kwargs["max_content_length"] = limit
                    break
            super().__init__(method, scheme, path, *args, **kwargs)

    return MeshRequest


class MeshApp(QuartTrio):
    """A QuartTrio app that carries its :class:`Node`."""

    node: Node


def create_app(settings: Settings | None = None, *, node: Node | None = None) -> MeshApp:
    """Build the app. Pass *node* to share one you built (and may use directly)."""
    settings = settings or Settings.from_env()
    app = MeshApp(__name__)
    app.node = node or Node(settings)
    app.asgi_app = drain_request_bodies(app.asgi_app, lambda: app.nursery)  # type: ignore[method-assign,assignment]
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

    @app.before_serving
    async def _start_node() -> None:
        scopes.append(trio.CancelScope())
        await app.nursery.start(_run_in_scope, app.node, scopes[-1])

    @app.after_serving
    async def _stop_node() -> None:
        while scopes:
            scopes.pop().cancel()

    @app.before_request
    async def _request_id() -> None:
        g.request_id = secrets.token_hex(6)

    @app.errorhandler(MeshError)
    async def _mesh_error(error: MeshError) -> Response:
        response = jsonify(error.to_json())
        response.status_code = error.status
        if isinstance(error, RateLimited):
            # whole seconds, rounded up: a client that waits that long is let in
            response.headers["Retry-After"] = str(max(1, math.ceil(error.retry_after)))
        return response

    @app.errorhandler(HTTPException)
    async def _http_error(error: HTTPException) -> Response:
        status = error.code or 500
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
        request_id = g.get("request_id", "-")
        log.error("unhandled error in request %s", request_id, exc_info=error)
        response = jsonify(
            error_body(f"internal error (request id {request_id})", "internal_error")
        )
        response.status_code = 500
        return response

    return app


async def _run_in_scope(
    node: Node, scope: trio.CancelScope, *, task_status: trio.TaskStatus[None]
) -> None:
    with scope:
        await node.run(task_status=task_status)
