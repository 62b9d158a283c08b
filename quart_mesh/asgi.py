"""The node as an ASGI app for a stock ASGI server (hypercorn's trio worker)::

    MESH_DATA_DIR=/var/lib/mesh hypercorn -k trio --bind 0.0.0.0:8000 \\
        'quart_mesh.asgi:create_asgi_app()'

``quart-mesh serve`` stays the default (its own listeners, with the node's
fast WebSocket transport on the same port). Here the server owns the
sockets — binds, TLS, unix sockets, its own config file — and the app serves
everything, ``/ws`` included, through a Quart websocket route that drives
the same protocol session (:mod:`quart_mesh.realtime.quart_ws` says what
differs). Settings come from the environment (``MESH_*``,
:meth:`Settings.from_env`).

The node runs under the ASGI lifespan: opened and started at startup (a
node that cannot start fails the startup, and the server exits), stopped at
shutdown. A node that stops while serving ends the process with status 70
once it is closed: hypercorn would otherwise log the lifespan's error and go
on serving without it (``create_app(exit_on_failure=True)``).

On SQLite the data folder is one process's (``data_folder.py``): a second
process, or a second worker (``--workers 2``), fails at startup. Several
workers need PostgreSQL. ``docs/operations.md`` covers both ways to run.
"""

from __future__ import annotations

from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, Scope

from .app import MeshApp, create_app
from .asgi_guards import ASGIApp
from .config import Settings
from .logs import configure_logging
from .server import claim_node

__all__ = ["create_asgi_app"]


def create_asgi_app(settings: Settings | None = None) -> MeshApp:
    """The app for a stock ASGI server: ``/ws`` through Quart, the node run
    by the lifespan, the process ended if the node fails.

    Without ``MESH_PUBLIC_URL`` the node takes its address (for managed bots,
    the registry heartbeat) from the first request it serves: the server's
    address on that connection.

    Raises:
        ConfigError: a ``MESH_*`` variable cannot be used.
    """
    settings = settings or Settings.from_env()
    configure_logging(settings.log_level, settings.log_format, leave_hypercorn=True)
    app = create_app(settings, websocket_route=True, exit_on_failure=True, freeze_heap=True)
    app.asgi_app = _learn_address(app, app.asgi_app)  # type: ignore[method-assign,assignment]

    @app.before_serving
    async def _claim() -> None:  # after the node has started: it knows whether it is set up
        # the server's binds are unknown here: the setup code is asked for
        # per request, when it came in on a non-loopback address
        await claim_node(app.node, public=None)

    return app


def _learn_address(app: MeshApp, asgi_app: ASGIApp) -> ASGIApp:
    """Bind the node's address from the first request's server address
    (an ASGI app is not told where the server listens)."""

    async def wrapped(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] in ("http", "websocket") and app.has_node:
            address = app.node.address
            if address.url is None and (server := scope.get("server")) is not None:
                host, port = server
                if ":" in host:
                    host = f"[{host}]"
                secure = scope["scheme"] in ("https", "wss")
                address.bind(f"{'https' if secure else 'http'}://{host}:{port}")
        await asgi_app(scope, receive, send)

    return wrapped
