"""Serving a node with hypercorn's trio worker, programmatically.

Used by the CLI, by tests (port 0 on loopback) and by programs that embed a
node in their own Trio code (``docs/embedding.md``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from .app import MeshApp

__all__ = ["serve"]

log = logging.getLogger("quart_mesh")


def hypercorn_config(host: str, port: int, graceful_timeout: float) -> HypercornConfig:
    config = HypercornConfig()
    host_part = f"[{host}]" if ":" in host and not host.startswith("[") else host
    config.bind = [f"{host_part}:{port}"]
    config.graceful_timeout = graceful_timeout
    config.accesslog = None
    # hypercorn's own "Running on ..." lines are replaced by one line of ours;
    # its warnings and errors still reach the log.
    hlog = logging.getLogger("hypercorn.error")
    hlog.setLevel(max(hlog.getEffectiveLevel(), logging.WARNING))
    config.errorlog = hlog
    return config


async def serve(
    app: MeshApp,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve *app* until *shutdown_trigger* returns or the caller cancels.

    Reports the base URL it listens on (e.g. ``http://127.0.0.1:41873``)
    through ``task_status`` once the node is started and the socket is
    listening, so ``url = await nursery.start(serve, app, port=0)`` works.
    Without ``public_url`` in the settings, the node uses that URL as its
    public address.
    """
    config = hypercorn_config(host, port, app.node.settings.graceful_timeout)

    async def run(*, task_status: trio.TaskStatus[list[str]]) -> None:
        await hypercorn_serve(
            app,
            config,
            shutdown_trigger=shutdown_trigger,
            task_status=task_status,
        )

    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(run)
        url = binds[0]
        if app.node.public_url is None:
            app.node.public_url = url
        log.info("quart-mesh listening on %s (data in %s)", url, app.node.settings.data_dir)
        task_status.started(url)
