"""``quart-mesh user|tokens|status``: the operator's chores from the shell.

Each command becomes one request of ``services/operator.py`` and is run
where the node's data is:

- SQLite, node stopped: in this process, which takes the data folder for
  the while (``open_node``; writes need only the store's writer, so the
  node's background work, managed bots and federation are not started);
- SQLite, node running (the folder is taken: ``DataFolderInUse``): by the
  running node, through its control socket (``control.py``), so that its
  caches and open sessions see the change at once;
- PostgreSQL: in this process, one more process of the mesh for the while;
  the change reaches the running ones through the cluster's bus.

Exit statuses: 0 done; 1 refused or failed (said why on stderr: unknown
participant, name taken, weak password, mesh not set up, store or node
unreachable); 2 bad settings or usage. Passwords are read from the terminal
(asked twice) or, with ``--password-stdin``, from standard input; never
from the command line.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import trio

from .config import Settings
from .control import CONTROL_SOCKET, ControlUnavailable, call
from .data_folder import DataFolderInUse
from .errors import ConfigError, MeshError
from .logs import configure_logging, flush_logging
from .node import open_node

__all__ = ["main"]

#: how long a chore may take, start to end (a busy store, a running node), seconds
CHORE_TIMEOUT = 120.0


class _Refused(Exception):
    """The command cannot be run as given (said why)."""


def main(args: argparse.Namespace) -> int:
    """Run the chore *args* name (``cli.py`` parsed them); the exit status."""
    command = f"quart-mesh {args.command}" + (f" {args.chore}" if "chore" in args else "")
    try:
        settings = Settings.from_env().with_overrides(
            data_dir=args.data_dir, database_url=args.database_url
        )
        request = _request(args, settings)
    except ConfigError as exc:
        print(f"quart-mesh: {exc}", file=sys.stderr)
        return 2
    except _Refused as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 1
    # the node's own warnings still show (a store it cannot reach...)
    configure_logging("WARNING", settings.log_format)
    try:
        answer, running = trio.run(_perform, settings, request)
    except (_Refused, ControlUnavailable, MeshError, OSError) as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 1
    except trio.TooSlowError:
        print(f"{command}: no answer within {CHORE_TIMEOUT:g} s", file=sys.stderr)
        return 1
    finally:
        flush_logging()
    if not answer.get("ok"):
        print(f"{command}: {answer.get('error', 'refused')}", file=sys.stderr)
        return 1
    print(_render(request, answer.get("result"), running, json_out=getattr(args, "json", False)))
    return 0


def _request(args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    if args.command == "status":
        return {"op": "setup_status"}
    if args.command == "tokens" and args.chore == "list":
        return {"op": "list_tokens", "name": args.name}
    if args.command == "tokens":
        if (args.token_id is None) == (not args.all):
            raise _Refused("name one token (TOKEN_ID, from: quart-mesh tokens list) or --all")
        if args.all:
            return {"op": "revoke_tokens", "name": args.name, "all": True}
        return {"op": "revoke_tokens", "name": args.name, "tokenId": args.token_id}
    if args.chore == "unlock":
        return {"op": "unlock_user", "name": args.name}
    if args.chore == "create":
        _require_store(settings)
        password = _password(args.password_stdin)
        role = "admin" if args.admin else "member"
        return {"op": "create_user", "name": args.name, "password": password, "role": role}
    _require_store(settings)
    password = _password(args.password_stdin)
    return {
        "op": "reset_password",
        "name": args.name,
        "password": password,
        "revokeTokens": not args.keep_tokens,
    }


def _password(from_stdin: bool) -> str:
    """The new password: the first line of standard input, or asked twice
    on the terminal."""
    if from_stdin:
        line = sys.stdin.readline()
        password = line.removesuffix("\n").removesuffix("\r")
        if not password:
            raise _Refused("no password on standard input (one line)")
        return password
    if not sys.stdin.isatty():
        raise _Refused("standard input is not a terminal: give the password with --password-stdin")
    password = getpass.getpass("New password: ")
    if getpass.getpass("The same again: ") != password:
        raise _Refused("the two passwords differ")
    return password


def _sqlite_file(settings: Settings) -> Path | None:
    url = sa.make_url(settings.resolved_database_url)
    if url.get_backend_name() != "sqlite" or not url.database:
        return None
    return Path(url.database)


def _require_store(settings: Settings) -> None:
    """Refuse before asking for a password when there is no store at all."""
    _require_folder(settings)
    store = _sqlite_file(settings)
    if store is not None and not store.exists():
        raise _Refused(
            f"no node's store in {settings.data_dir} (serve the node once and set it up,"
            " or give --data-dir)"
        )


def _require_folder(settings: Settings) -> None:
    """On PostgreSQL, the chores open the node's data folder (its secrets):
    refuse to make a new one (a node of its own) where there is none."""
    if _sqlite_file(settings) is None and not settings.data_dir.is_dir():
        raise _Refused(
            f"no node's data folder at {settings.data_dir}: give --data-dir "
            "(the folder of a node of this mesh)"
        )


async def _perform(settings: Settings, request: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The answer to *request*, and whether a running node gave it."""
    _require_folder(settings)
    store = _sqlite_file(settings)
    if store is not None and not store.exists():
        # nothing to open: say so without making a store (or a data folder)
        if request["op"] != "setup_status":
            raise _Refused(f"no node's store in {settings.data_dir} (or give --data-dir)")
        return {"ok": True, "result": _no_store(settings)}, False
    with trio.fail_after(CHORE_TIMEOUT):
        try:
            async with open_node(settings) as node, trio.open_nursery() as nursery:
                await nursery.start(node.run_core)
                answer = await node.operator.perform(request)
                nursery.cancel_scope.cancel()
            return answer, False
        except DataFolderInUse:
            # a node serves this folder: it runs the chore itself
            return await call(settings.data_dir / CONTROL_SOCKET, request), True


def _no_store(settings: Settings) -> dict[str, Any]:
    return {
        "initialized": False,
        "meshName": None,
        "owner": None,
        "visibility": None,
        "registrationMode": None,
        "participants": {"total": 0, "byKind": {}, "byRole": {}},
        "store": {"backend": "sqlite", "url": None},
        "dataDir": str(settings.data_dir.resolve()),
    }


def _render(request: dict[str, Any], result: Any, running: bool, *, json_out: bool) -> str:
    op = request["op"]
    if op == "setup_status":
        result = {**result, "nodeRunning": running if _is_sqlite(result) else None}
    if json_out:
        return json.dumps(result, indent=2, ensure_ascii=False)
    if op == "create_user":
        return f"created {result['role']} {result['name']} (participant {result['participantId']})"
    if op == "reset_password":
        if not result["signedOut"]:
            return f"new password for {result['name']} (its tokens are kept)"
        return (
            f"new password for {result['name']}; signed out everywhere"
            f" ({result['revokedTokens']} listed tokens revoked)"
        )
    if op == "unlock_user":
        return (
            f"unlocked {result['name']}: its failed logins are forgotten"
            f" ({result['cleared']} counters cleared)"
        )
    if op == "revoke_tokens":
        if result["all"]:
            return (
                f"signed {result['name']} out everywhere"
                f" ({result['revokedTokens']} listed tokens revoked, unlisted older ones too)"
            )
        return f"revoked {result['revokedTokens']} token of {result['name']}"
    if op == "list_tokens":
        return _token_table(request["name"], result)
    return _status_text(result)


def _is_sqlite(status: dict[str, Any]) -> bool:
    return bool(status.get("store", {}).get("backend") == "sqlite")


def _token_table(name: str, tokens: list[dict[str, Any]]) -> str:
    if not tokens:
        return f"{name} has no listed token that has not expired"
    rows = [("TOKEN ID", "KIND", "ISSUED", "EXPIRES", "STATE")]
    rows += [
        (
            t["tokenId"],
            t["kind"],
            t["issuedAt"],
            t["expiresAt"],
            "revoked" if t["revoked"] else "valid",
        )
        for t in tokens
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _status_text(status: dict[str, Any]) -> str:
    participants = status["participants"]
    lines = [
        f"set up:        {'yes' if status['initialized'] else 'no'}",
    ]
    if status["initialized"]:
        lines += [
            f"mesh name:     {status['meshName']}",
            f"owner:         {status['owner']}",
            f"visibility:    {status['visibility']}",
            f"registration:  {status['registrationMode']}",
        ]
    by_kind = ", ".join(f"{k} {n}" for k, n in participants["byKind"].items()) or "-"
    by_role = ", ".join(f"{k} {n}" for k, n in participants["byRole"].items()) or "-"
    store = status["store"]
    lines += [
        f"participants:  {participants['total']} (by kind: {by_kind}; by role: {by_role})",
        f"store:         {store['backend']} {store['url'] or '(none yet)'}",
        f"data folder:   {status['dataDir']}",
    ]
    running = status.get("nodeRunning")
    if running is not None:
        lines.append(f"node running:  {'yes' if running else 'no'}")
    return "\n".join(lines)
