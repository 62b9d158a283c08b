"""``mesh-bridge``: the command line.

Exit status: 0 when stopped by SIGINT or SIGTERM, 1 when it cannot go on (the
node refused the token, the address is not a mesh node, the state file is
unusable), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import trio

from mesh_bridge import __version__
from mesh_bridge.bridge import Bridge
from mesh_bridge.config import (
    DEFAULT_MAX_REPLY_BYTES,
    DEFAULT_TIMEOUT,
    Config,
    Mode,
    http_url,
    websocket_url,
)
from mesh_bridge.errors import BridgeError
from mesh_bridge.exec_handler import ExecHandler
from mesh_bridge.handler import Handler, Outbox
from mesh_bridge.http_handler import HttpHandler
from mesh_bridge.pipe_handler import PipeHandler

log = logging.getLogger("mesh_bridge")

EXAMPLES = """\
examples:
  mesh-bridge --mesh ws://127.0.0.1:8000 --token "$TOKEN" --exec ./reply.sh
  mesh-bridge --mesh https://mesh.example.org --http http://127.0.0.1:5000/hook
  MESH_TOKEN=... mesh-bridge --mesh ws://127.0.0.1:8000 --pipe "python3 agent.py"

Exit status: 0 after SIGINT/SIGTERM, 1 if the node refuses the token (or the
address is not a mesh node, or the state file is unusable), 2 for bad usage.
See docs/bridge.md.
"""


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not positive")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mesh-bridge",
        description=(
            "Connect a script, an HTTP endpoint or a long-running process to a "
            "quart-mesh node as a bot: each message in the bot's rooms goes to "
            "the handler, and what the handler answers is posted back."
        ),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--mesh",
        required=True,
        metavar="URL",
        help="the node's address: ws://HOST:PORT (or wss://, http://, https://; /ws is added)",
    )
    parser.add_argument(
        "--token",
        metavar="TOKEN",
        help="the bot's token (default: the MESH_TOKEN environment variable)",
    )
    handlers = parser.add_mutually_exclusive_group(required=True)
    handlers.add_argument(
        "--exec",
        dest="exec_script",
        metavar="SCRIPT",
        help="run SCRIPT once per message (message in MESH_* variables); its stdout is the reply",
    )
    handlers.add_argument(
        "--http",
        dest="http_url",
        metavar="URL",
        help="POST each message as JSON to URL; the answer is the reply",
    )
    handlers.add_argument(
        "--pipe",
        dest="pipe_command",
        metavar="COMMAND",
        help="run COMMAND (sh -c) once; messages go to its stdin as JSON lines, "
        "each line it prints is a reply",
    )
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"time allowed per message for --exec and --http (default {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--state",
        type=Path,
        metavar="FILE",
        help="keep the last handled message's cursor in FILE, to resume after a restart",
    )
    parser.add_argument(
        "--include-bots",
        action="store_true",
        help="also handle messages from other bots (off by default, so bots cannot loop)",
    )
    parser.add_argument(
        "--max-reply-bytes",
        type=_positive_int,
        default=DEFAULT_MAX_REPLY_BYTES,
        metavar="N",
        help=f"cut replies to N UTF-8 bytes (default {DEFAULT_MAX_REPLY_BYTES}, "
        "the node's default message limit)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log detail on stderr (default INFO)",
    )
    parser.add_argument("--version", action="version", version=f"mesh-bridge {__version__}")
    return parser


def parse_config(
    argv: Sequence[str] | None = None, environ: dict[str, str] | None = None
) -> tuple[Config, str]:
    """The bridge's ``Config`` and log level from the command line; exits with
    status 2 and a usage message if they are wrong."""
    parser = build_parser()
    args = parser.parse_args(argv)
    environ = dict(os.environ) if environ is None else environ
    try:
        mesh_url = websocket_url(args.mesh)
    except ValueError as exc:
        parser.error(f"--mesh: {exc}")
    token = (args.token or environ.get("MESH_TOKEN") or "").strip()
    if not token:
        parser.error("no token: give --token or set MESH_TOKEN")
    mode: Mode
    if args.exec_script is not None:
        mode, target = "exec", args.exec_script
        script = Path(target)
        if not script.is_file():
            parser.error(f"--exec: {target!r} is not a file")
        target = str(script.resolve())
    elif args.http_url is not None:
        mode, target = "http", args.http_url
        try:
            http_url(target)
        except ValueError as exc:
            parser.error(f"--http: {exc}")
    else:
        mode, target = "pipe", args.pipe_command
        if not target.strip():
            parser.error("--pipe: the command is empty")
    config = Config(
        mesh_url=mesh_url,
        token=token,
        mode=mode,
        target=target,
        timeout=args.timeout,
        state_file=args.state,
        include_bots=args.include_bots,
        max_reply_bytes=args.max_reply_bytes,
    )
    return config, args.log_level


def make_handler(config: Config, outbox: Outbox) -> Handler:
    if config.mode == "exec":
        return ExecHandler(
            Path(config.target),
            outbox,
            timeout=config.timeout,
            max_reply_bytes=config.max_reply_bytes,
        )
    if config.mode == "http":
        return HttpHandler(
            config.target,
            outbox,
            timeout=config.timeout,
            max_reply_bytes=config.max_reply_bytes,
        )
    return PipeHandler(config.target, outbox, max_reply_bytes=config.max_reply_bytes)


async def run(config: Config) -> int:
    """Run the bridge until SIGINT/SIGTERM (returns 0) or a fatal error
    (logged; returns 1).

    The first signal stops gracefully: the handler is cancelled (a running
    script or the pipe process gets SIGTERM, then SIGKILL) and the WebSocket
    closed with 1000. A second signal cancels whatever is left at once.
    """
    outbox = Outbox()
    handler = make_handler(config, outbox)
    bridge = Bridge(config, handler, outbox)
    status = 0
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def stop_on_signal() -> None:
                async for signum in signals:
                    if bridge.stopping:
                        log.info("received %s again, stopping now", signal.Signals(signum).name)
                        nursery.cancel_scope.cancel()
                        return
                    log.info("received %s, stopping", signal.Signals(signum).name)
                    bridge.stop()

            nursery.start_soon(stop_on_signal)
            await nursery.start(handler.run)
            try:
                await bridge.run()
            except BridgeError as exc:
                log.error("%s", exc)
                status = 1
            nursery.cancel_scope.cancel()
    return status


def main(argv: Sequence[str] | None = None) -> NoReturn:
    config, level = parse_config(argv)
    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s mesh-bridge %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    log.setLevel(level)
    try:
        status = trio.run(run, config)
    except KeyboardInterrupt:  # before the signal handler was installed
        status = 0
    sys.exit(status)
