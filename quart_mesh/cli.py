"""The ``quart-mesh`` command: ``quart-mesh serve [options]``, and the
operator's ``quart-mesh backup FILE``, ``quart-mesh restore FILE`` and
``quart-mesh check``.

Options override ``MESH_*`` environment variables, which override defaults.
SIGINT and SIGTERM shut the server down gracefully
(:func:`~quart_mesh.signals.wait_for_signal`); a second SIGINT while it
stops interrupts the stop.

Exit statuses: 0 after a shutdown asked for by a signal; 2, bad settings
(``--workers 2`` or more on SQLite included), a store a newer release
migrated (``StoreFromNewerRelease``) or a damaged SQLite store
(``StoreCorrupt``: it would fail again the same way); 1, the node cannot serve: the
system refused it something (an ``OSError``, such as the port being taken)
before it listened; 70 (EX_SOFTWARE), any other failure, and any failure at
all once it listened: a part of the node failed, and the traceback is logged;
130, a second Ctrl+C (SIGINT) interrupted the graceful stop.

``check`` exits 0 when nothing it looked at failed (warnings allowed), 1
when something did, 2 on bad options (``integrity.py``).

``--workers N`` (``MESH_WORKERS``) above 1 runs a parent that binds the
socket and supervises N node processes (:mod:`quart_mesh.workers`, which
gives the parent's exit statuses); 1, the default, serves in this process.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path

import trio

from . import chores
from ._version import __version__
from .app import create_app
from .backup import BackupError, backup, restore
from .config import Settings, parse_log_format, parse_port, parse_public_url, parse_workers
from .errors import ConfigError
from .integrity import Report, check
from .logs import configure_logging
from .metrics_folder import use_worker_files
from .server import serve
from .signals import wait_for_signal
from .workers import Worker, supervise

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
    srv.add_argument(
        "--log-format",
        type=_arg(parse_log_format),
        help="text, or json for a JSON object a line (MESH_LOG_FORMAT, default text)",
    )
    srv.add_argument(
        "--workers",
        type=_arg(parse_workers),
        help="node processes sharing the port; more than 1 needs PostgreSQL "
        "(MESH_WORKERS, default 1)",
    )
    srv.add_argument(
        "--uploads-dir",
        type=Path,
        help="folder of uploaded files, shared by every host of the mesh "
        "(MESH_UPLOADS_DIR, default <data-dir>/uploads)",
    )
    # set by the parent of --workers for each worker (quart_mesh.workers)
    srv.add_argument("--worker", type=_worker_spec, help=argparse.SUPPRESS)
    bak = commands.add_parser(
        "backup",
        help="write a backup of a node's data (SQLite store, secrets, uploads) to a file,"
        " while it runs or not",
    )
    bak.add_argument(
        "output",
        help="the backup file to write (.tar.gz; must not exist), or - for standard output",
    )
    res = commands.add_parser(
        "restore", help="restore a backup into an empty data folder (the node stopped)"
    )
    res.add_argument("backup", help="a file written by quart-mesh backup, or - for standard input")
    chk = commands.add_parser(
        "check",
        help="check a node's data (store integrity, migrations, secrets, uploads, the newest"
        " backup), node running or not",
    )
    for sub in (bak, res, chk):
        sub.add_argument(
            "--data-dir", type=Path, help="data folder (MESH_DATA_DIR, default ./mesh-data)"
        )
        sub.add_argument(
            "--uploads-dir",
            type=Path,
            help="folder of uploaded files (MESH_UPLOADS_DIR, default <data-dir>/uploads)",
        )
    for sub in (bak, chk):
        sub.add_argument(
            "--database-url",
            help="SQLAlchemy URL (MESH_DATABASE_URL, default SQLite in data folder)",
        )
    bak.add_argument(
        "--allow-missing-uploads",
        action="store_true",
        help="back up even if files of uploads the store names are gone (listed in the manifest)",
    )
    chk.add_argument("--json", action="store_true", help="as a JSON object")
    _chore_parsers(commands)
    return parser


def _chore_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``user``, ``tokens`` and ``status``: the operator's chores."""
    user = commands.add_parser(
        "user",
        help="create a user or an admin, reset a password, unlock logins (node running or not)",
    )
    user_commands = user.add_subparsers(dest="chore", required=True)
    create = user_commands.add_parser(
        "create", help="create a human participant (a member, or with --admin an admin)"
    )
    create.add_argument("name")
    create.add_argument("--admin", action="store_true", help="give it the role admin")
    reset = user_commands.add_parser(
        "reset-password", help="set a new password; signs the participant out everywhere"
    )
    reset.add_argument("name")
    reset.add_argument(
        "--keep-tokens",
        action="store_true",
        help="keep its tokens (and open sessions) valid",
    )
    unlock = user_commands.add_parser(
        "unlock",
        help="forget a name's failed logins: its logins are no longer slowed down or refused",
    )
    unlock.add_argument("name")
    for sub in (create, reset):
        sub.add_argument(
            "--password-stdin",
            action="store_true",
            help="read the password from the first line of standard input"
            " (else it is asked twice on the terminal)",
        )
    tokens = commands.add_parser(
        "tokens", help="list or revoke a participant's tokens (node running or not)"
    )
    token_commands = tokens.add_subparsers(dest="chore", required=True)
    listing = token_commands.add_parser("list", help="the tokens that have not expired")
    listing.add_argument("name")
    listing.add_argument("--json", action="store_true", help="as a JSON array")
    revoke = token_commands.add_parser(
        "revoke", help="revoke one token (its id, from tokens list), or --all"
    )
    revoke.add_argument("name")
    revoke.add_argument("token_id", nargs="?", metavar="TOKEN_ID")
    revoke.add_argument(
        "--all",
        action="store_true",
        help="every token, also those issued before the node listed them",
    )
    status = commands.add_parser(
        "status", help="whether the mesh is set up, its owner, participants, store"
    )
    status.add_argument("--json", action="store_true", help="as a JSON object")
    for sub in (create, reset, unlock, listing, revoke, status):
        sub.add_argument(
            "--data-dir", type=Path, help="data folder (MESH_DATA_DIR, default ./mesh-data)"
        )
        sub.add_argument(
            "--database-url",
            help="SQLAlchemy URL (MESH_DATABASE_URL, default SQLite in data folder)",
        )


def _backup_command(args: argparse.Namespace) -> int:
    """``backup`` and ``restore``: 0 done, 1 it cannot be done (said why), 2 bad settings."""
    try:
        settings = Settings.from_env().with_overrides(
            data_dir=args.data_dir,
            uploads_dir=args.uploads_dir,
            database_url=getattr(args, "database_url", None),
        )
        if args.command == "backup":
            output = None if args.output == "-" else Path(args.output)
            done = backup(settings, output, allow_missing_uploads=args.allow_missing_uploads)
            if done.missing_uploads:
                print(
                    f"quart-mesh backup: {done.missing_uploads} uploads the store names were"
                    " missing and are not in the backup (its manifest lists them)",
                    file=sys.stderr,
                )
            if done.unrecorded:
                print(
                    f"quart-mesh backup: the backup is written but not recorded in"
                    f" {settings.data_dir} (quart-mesh check will not know it): {done.unrecorded}",
                    file=sys.stderr,
                )
            if output is not None:  # on standard output, the backup is all there is
                print(
                    f"backed up {settings.data_dir} to {done.path}"
                    f" ({done.uploads} uploads, {done.bytes} bytes, sha256 {done.sha256})"
                )
        else:
            source = None if args.backup == "-" else Path(args.backup)
            done = restore(source, settings)
            print(
                f"restored {done.path or 'standard input'} into {settings.data_dir}"
                f" ({done.uploads} uploads)"
            )
    except ConfigError as exc:
        print(f"quart-mesh: {exc}", file=sys.stderr)
        return 2
    except BackupError as exc:
        print(f"quart-mesh {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


def _check_command(args: argparse.Namespace) -> int:
    """``check``: 0 all is well (warnings allowed), 1 something is not (said
    what), 2 bad settings."""
    try:
        settings = Settings.from_env().with_overrides(
            data_dir=args.data_dir, uploads_dir=args.uploads_dir, database_url=args.database_url
        )
    except ConfigError as exc:
        print(f"quart-mesh: {exc}", file=sys.stderr)
        return 2
    report = check(settings)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(_render_report(settings, report))
    if not report.ok:
        failed = [f for f in report.findings if f.status == "fail"]
        print(f"quart-mesh check: {failed[0].name}: {failed[0].message}", file=sys.stderr)
        return 1
    return 0


def _render_report(settings: Settings, report: Report) -> str:
    lines = [f"quart-mesh check: {settings.data_dir} ({report.store})"]
    lines += [f"  {f.status:<4}  {f.name}: {f.message}" for f in report.findings]
    warnings = sum(1 for f in report.findings if f.status == "warn")
    failures = sum(1 for f in report.findings if f.status == "fail")
    noted = f"{warnings} warning" + ("" if warnings == 1 else "s")
    if failures:
        lines.append(f"NOT WELL: {failures} failed, {noted}")
    else:
        lines.append("all is well" + (f" ({noted})" if warnings else ""))
    return "\n".join(lines)


def _worker_spec(value: str) -> Worker:
    try:
        return Worker.parse(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a worker spec: {value!r}") from None


def _arg(fn: Callable[[str], object]) -> Callable[[str], object]:
    """Turn a ``ConfigError`` into argparse's usage error."""

    def parse(value: str) -> object:
        try:
            return fn(value)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


class _Listening:
    """``serve``'s task status in :func:`run_server`: once the node listens,
    note its URL and, as a worker, tell the parent (in *nursery*)."""

    def __init__(
        self, nursery: trio.Nursery, listening: list[str] | None, worker: Worker | None
    ) -> None:
        self._nursery = nursery
        self._listening = listening
        self._worker = worker

    def started(self, value: str | None = None) -> None:
        assert value is not None  # serve reports its URL
        if self._listening is not None:
            self._listening.append(value)
        if self._worker is not None:
            self._nursery.start_soon(self._worker.ready, value)


async def run_server(
    settings: Settings, listening: list[str] | None = None, worker: Worker | None = None
) -> None:
    """Serve until a signal; *listening* gets the URL once the node listens.

    As a *worker* of ``--workers``, accept on the sockets the parent bound,
    tell it once serving, and stop on a signal or when the parent is gone.

    ``serve`` runs in this task, trio's main task, so that a second Ctrl+C
    while the node stops interrupts the stop (``KeyboardInterrupt``).
    """
    app = create_app(settings, freeze_heap=True)
    async with trio.open_nursery() as nursery:
        await serve(
            app,
            host=settings.host,
            port=settings.port,
            listeners=worker.listeners() if worker is not None else None,
            shutdown_trigger=(
                partial(worker.wait_for_stop, wait_for_signal)
                if worker is not None
                else wait_for_signal
            ),
            task_status=_Listening(nursery, listening, worker),
        )
    if worker is not None:
        log.info("worker %d (pid %d) stopped", worker.number, os.getpid())
    else:
        log.info("stopped")


#: a token's id (``security.new_token_id``; earlier releases' may begin with "-")
_TOKEN_ID = re.compile(r"[A-Za-z0-9_-]{16}")


def _token_id_left_over(args: argparse.Namespace, extra: list[str]) -> list[str]:
    """``tokens revoke NAME [TOKEN_ID]``: argparse leaves TOKEN_ID over when an
    option comes between it and NAME (``alice --data-dir d ID``: it gives the
    optional positional nothing as soon as NAME is read), or when the id
    begins with ``-`` (ids issued by earlier releases may: it reads one as an
    unknown option). One such word left over, after ``--`` or shaped as an
    id (so that a misspelt option is still an error), is the id; what is
    still left over is an error."""
    after_dashes = extra[0] == "--"
    rest = extra[1:] if after_dashes else extra
    if args.token_id is None and len(rest) == 1 and (after_dashes or _TOKEN_ID.fullmatch(rest[0])):
        args.token_id = rest[0]
        return []
    return extra


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra and (args.command, getattr(args, "chore", None)) == ("tokens", "revoke"):
        extra = _token_id_left_over(args, extra)
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command in ("backup", "restore"):
        return _backup_command(args)
    if args.command == "check":
        return _check_command(args)
    if args.command in ("user", "tokens", "status"):
        return chores.main(args)
    worker: Worker | None = args.worker
    try:
        settings = Settings.from_env().with_overrides(
            host=args.host,
            port=args.port,
            data_dir=args.data_dir,
            public_url=args.public_url,
            database_url=args.database_url,
            log_level=args.log_level.upper() if args.log_level else None,
            log_format=args.log_format,
            workers=args.workers,
            uploads_dir=args.uploads_dir,
        )
        settings.check_workers_store()
    except ConfigError as exc:
        print(f"quart-mesh: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    if settings.workers > 1 and worker is None:
        try:
            return trio.run(supervise, settings, argv)
        except KeyboardInterrupt:
            return 130
    if worker is not None:
        # before any metric is made: /metrics merges every worker's files
        use_worker_files(worker.number)
    listening: list[str] = []
    try:
        trio.run(run_server, settings, listening, worker)
    except Exception as exc:
        leaves = list(_leaves(exc))
        if not listening and all(isinstance(leaf, OSError) for leaf in leaves):
            # e.g. the port is taken: before it served, nothing to restart
            log.error("cannot serve: %s", leaves[0])
            return 1
        if not listening and all(isinstance(leaf, ConfigError) for leaf in leaves):
            # e.g. a store a newer release migrated: found only once it is opened
            log.error("cannot serve: %s", leaves[0])
            return 2
        # a part of the node failed: say so, and let whatever runs it start it again
        log.critical("the node stopped because one of its parts failed", exc_info=exc)
        return EX_SOFTWARE
    except BaseException as exc:
        # a second Ctrl+C while the node stops (alone, or in a group)
        if any(isinstance(leaf, KeyboardInterrupt) for leaf in _leaves(exc)):
            return 130
        raise
    return 0


def _leaves(error: BaseException) -> Iterator[BaseException]:
    """The exceptions inside (nested) exception groups, or *error* itself."""
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error
