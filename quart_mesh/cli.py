"""The ``quart-mesh`` command: ``quart-mesh serve [options]``.

Options override ``MESH_*`` environment variables, which override defaults.
SIGINT and SIGTERM shut the server down gracefully.

Exit statuses: 0 after a shutdown asked for by a signal; 2, bad settings;
1, the node cannot serve: the system refused it something (an ``OSError``,
such as the port being taken) before it listened; 70 (EX_SOFTWARE), any
other failure, and any failure at all once it listened: a part of the node
failed, and the traceback is logged.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path

import trio

from ._version import __version__
from .app import configure_logging, create_app
from .config import Settings, parse_port, parse_public_url
from .errors import ConfigError
from .server import serve

__all__ = ["main"]

log = logging.getLogger("quart_mesh")

#: the exit status when a part of the node failed (sysexits.h: internal software error)
EX_SOFTWARE = 70


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="quart-mesh", description="Run a quart-mesh node.")
    parser.add_argument("--version", action="version", version=f"quart-mesh {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    srv = commands.add_parser("serve", help="serve a node (hypercorn, trio worker)")
    srv.add_argument("--host", help="address to bind (MESH_HOST, default 127.0.0.1)")
    srv.add_argument("--port", type=_arg(parse_port), help="port (MESH_PORT, default 8000)")
    srv.add_argument(
        "--data-dir", type=Path, help="data folder (MESH_DATA_DIR, default ./mesh-data)"
    )
    srv.add_argument(
        "--public-url",
        type=_arg(parse_public_url),
        help="address clients use (MESH_PUBLIC_URL, default the bound address)",
    )
    srv.add_argument(
        "--database-url", help="SQLAlchemy URL (MESH_DATABASE_URL, default SQLite in data folder)"
    )
    srv.add_argument("--log-level", help="DEBUG, INFO, WARNING... (MESH_LOG_LEVEL, default INFO)")
    return parser


def _arg(fn: Callable[[str], object]) -> Callable[[str], object]:
    """Turn a ``ConfigError`` into argparse's usage error."""

    def parse(value: str) -> object:
        try:
            return fn(value)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


async def _wait_for_signal() -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("received %s, shutting down", signal.Signals(signum).name)
            return


async def run_server(settings: Settings, listening: list[str] | None = None) -> None:
    """Serve until a signal; *listening* gets the URL once the node listens."""
    app = create_app(settings)
    async with trio.open_nursery() as nursery:
        url: str = await nursery.start(
            partial(
                serve,
                app,
                host=settings.host,
                port=settings.port,
                shutdown_trigger=_wait_for_signal,
            )
        )
        if listening is not None:
            listening.append(url)
    log.info("stopped")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = Settings.from_env().with_overrides(
            host=args.host,
            port=args.port,
            data_dir=args.data_dir,
            public_url=args.public_url,
            database_url=args.database_url,
            log_level=args.log_level.upper() if args.log_level else None,
        )
    except ConfigError as exc:
        print(f"quart-mesh: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    listening: list[str] = []
    try:
        trio.run(run_server, settings, listening)
    except KeyboardInterrupt:  # a second Ctrl+C while draining
        return 130
    except Exception as exc:
        leaves = list(_leaves(exc))
        if not listening and all(isinstance(leaf, OSError) for leaf in leaves):
            # e.g. the port is taken: before it served, nothing to restart
            log.error("cannot serve: %s", leaves[0])
            return 1
        # a part of the node failed: say so, and let whatever runs it start it again
        log.critical("the node stopped because one of its parts failed", exc_info=exc)
        return EX_SOFTWARE
    return 0


def _leaves(error: BaseException) -> Iterator[BaseException]:
    """The exceptions inside (nested) exception groups, or *error* itself."""
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error
