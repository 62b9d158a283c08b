"""Serve a node beside your own tasks until Ctrl+C or SIGTERM (docs/embedding.md,
"Stopping: Ctrl+C, SIGTERM and cancellation").

Run it:  python docs/examples/serve_until_signal.py
(configured like ``quart-mesh serve``, by ``MESH_*`` variables: MESH_DATA_DIR,
MESH_PORT, MESH_DATABASE_URL...)

Ctrl+C, or ``kill <pid>`` (SIGTERM, as systemd and Docker stop a service):
WebSocket clients get close code 1001 ("server shutting down"), requests in
flight finish, managed bots stop, the store is closed, the process exits 0.
A second Ctrl+C while it stops interrupts the stop: exit status 130.
It is also a test: tests/e2e/test_shutdown.py runs it and sends it signals.
"""

from __future__ import annotations

import logging
import sys

import trio

from quart_mesh import Settings, create_app, serve, wait_for_signal


async def your_own_task() -> None:
    """Stands for your program's own work beside the node."""
    while True:
        await trio.sleep(60)
        print("still serving", flush=True)


async def main() -> None:
    settings = Settings.from_env()
    app = create_app(settings)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(your_own_task)
        # serve in this task (the body of main's nursery, trio's main task):
        # it returns once a signal has stopped the node gracefully, and a
        # second Ctrl+C while it stops reaches it as KeyboardInterrupt
        await serve(app, host=settings.host, port=settings.port, shutdown_trigger=wait_for_signal)
        nursery.cancel_scope.cancel()  # the node has stopped: so do your tasks
    print("stopped", flush=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    interrupted = False
    try:
        trio.run(main)
    except* KeyboardInterrupt:  # a second Ctrl+C while stopping
        interrupted = True
    sys.exit(130 if interrupted else 0)
