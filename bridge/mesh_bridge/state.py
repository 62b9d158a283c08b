"""``--state FILE``: the last handled cursor, kept across bridge restarts.

The file is JSON, ``{"mesh": "<websocket url>", "cursor": "<cursor>"}``,
written to a temporary file beside it and renamed over it, so a crash leaves
either the old or the new cursor, never half a file.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import trio

from mesh_bridge.errors import StateFileError

log = logging.getLogger("mesh_bridge")


def load_cursor(path: Path, mesh_url: str) -> str | None:
    """The cursor saved in *path* for *mesh_url*; ``None`` if the file does
    not exist yet or was saved for another node.

    Raises:
        StateFileError: the file cannot be read or is not a state file (the
            bridge will not guess: delete the file to start from now).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateFileError(f"cannot read the state file {path}: {exc}") from exc
    try:
        data = json.loads(text)
        cursor = data["cursor"]
        mesh = data["mesh"]
        if not (isinstance(cursor, str) and cursor.isdigit() and len(cursor) <= 18):
            raise ValueError(f"bad cursor {cursor!r}")
    except (ValueError, KeyError, TypeError) as exc:
        raise StateFileError(
            f"{path} is not a mesh-bridge state file ({exc}); delete it to start from now"
        ) from exc
    if mesh != mesh_url:
        log.warning(
            "state file %s was saved for %s, not %s: starting from now", path, mesh, mesh_url
        )
        return None
    return cursor


def _write(path: Path, mesh_url: str, cursor: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump({"mesh": mesh_url, "cursor": cursor}, f)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


async def save_cursor(path: Path, mesh_url: str, cursor: str) -> None:
    """Write *cursor* to *path* atomically (in a worker thread).

    Raises:
        StateFileError: the file cannot be written.
    """
    try:
        await trio.to_thread.run_sync(_write, path, mesh_url, cursor)
    except OSError as exc:
        raise StateFileError(f"cannot write the state file {path}: {exc}") from exc
