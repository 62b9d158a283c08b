"""Stopping a served node on Ctrl+C or SIGTERM.

:func:`wait_for_signal` returns when the process receives one of the signals
it waits for; given to :func:`~quart_mesh.serve` as its shutdown trigger, it
turns Ctrl+C and ``kill`` (SIGTERM, as systemd and Docker stop a service)
into the node's graceful stop::

    async def main() -> None:
        await serve(create_app(Settings()), shutdown_trigger=wait_for_signal)

    trio.run(main)  # Ctrl+C: WebSocket clients get 1001, the process exits 0

Only while it waits are the signals its own; before and after, Python's
(and trio's) defaults apply: a second Ctrl+C while the node stops raises
``KeyboardInterrupt`` (see ``docs/embedding.md``).
"""

from __future__ import annotations

import logging
import signal

import trio

__all__ = ["wait_for_signal"]

log = logging.getLogger("quart_mesh")


async def wait_for_signal(*signums: int) -> int:
    """Wait until the process receives one of *signums* (by default SIGINT
    and SIGTERM) and return its number; logs ``received SIGTERM, shutting
    down`` (at INFO, logger ``quart_mesh``).

    Must run in trio's main thread (it uses
    :func:`trio.open_signal_receiver`). The signals are caught from the call
    until it returns: none is lost between the two, and none that arrives
    after it returns is caught (the next Ctrl+C raises ``KeyboardInterrupt``
    as usual).

    Cancellation: safe; the signals' previous handlers are restored.

    Raises:
        RuntimeError: not in the main thread.
        ValueError: a number is not a signal.
    """
    wanted = signums or (signal.SIGINT, signal.SIGTERM)
    with trio.open_signal_receiver(*wanted) as received:
        async for signum in received:
            log.info("received %s, shutting down", signal.Signals(signum).name)
            return signum
    raise AssertionError("a signal receiver does not end")  # pragma: no cover
