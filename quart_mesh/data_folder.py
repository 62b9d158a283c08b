"""One process per SQLite data folder: an exclusive lock on ``<data-dir>/node.lock``.

SQLite in WAL mode keeps two processes from writing at the same instant, but
not from both serving: each would keep its own caches, broker and sequence
of work, and managed bots would run twice. So a node on SQLite holds an
exclusive ``flock`` on ``node.lock`` in its data folder from before its store
is opened (or migrated) until it is closed; a second process on the same
folder — another ``quart-mesh serve``, a second hypercorn worker — fails at
start with :class:`DataFolderInUse`. The kernel drops the lock when the
process ends, however it ends, so a crash never leaves a stale lock behind
(the pid written in the file is only for the message).

A node on PostgreSQL takes no lock (its data folder need not be shared; the
store is elsewhere), and several processes may serve one database
(``docs/operations.md``, decision 0034).

:func:`create_once` writes the node's own secret files so that processes
starting together on one folder agree on a single one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import Settings

__all__ = [
    "LOCK_FILE",
    "DataFolderInUse",
    "DataFolderLock",
    "create_once",
    "lock_data_folder",
    "replace_durably",
]

LOCK_FILE = "node.lock"


class DataFolderInUse(OSError):
    """Another process serves this data folder (SQLite: one process only)."""


class DataFolderLock:
    """The held lock (or nothing, on PostgreSQL); :meth:`release` or leave
    its ``with`` block to drop it."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # drops the flock

    def __enter__(self) -> DataFolderLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def lock_data_folder(settings: Settings) -> DataFolderLock:
    """Take the data folder for this process (blocking I/O: run it in a thread).

    Creates the folder (mode 0700) if needed. Does nothing when the database
    is not SQLite.

    Raises:
        DataFolderInUse: another process holds it.
        OSError: the folder or the lock file cannot be used.
    """
    if not settings.resolved_database_url.startswith("sqlite"):
        return DataFolderLock(None)
    data_dir = settings.data_dir
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = data_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            raise DataFolderInUse(
                f"the data folder {data_dir.resolve()} is in use by another quart-mesh "
                f"process{holder}: a node runs in one process only (stop the other one)"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except BaseException:
        os.close(fd)
        raise
    return DataFolderLock(fd)


def _holder(fd: int) -> str:
    """`` (pid N)`` as the holder wrote it, or nothing."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(os.pread(fd, 32, 0).decode("ascii").strip())
        return f" (pid {pid})"
    return ""


def create_once(path: Path, make: Callable[[], str]) -> str:
    """The text of *path* (mode 0600), written from ``make()`` if the file does
    not exist yet. The text is written to a temporary file and linked into
    place, so a process starting at the same moment finds either no file or
    the whole one, never an empty or half-written file; the first link wins
    and every process returns its text."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(FileNotFoundError):
        return path.read_text()
    text = make()
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:  # mkstemp makes it 0600
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            return path.read_text()
        return text
    finally:
        os.unlink(temporary)


def replace_durably(temp: Path, final: Path) -> None:
    """Rename *temp* to *final* atomically, and make the rename itself
    durable (the folder is synced)."""
    os.replace(temp, final)
    fd = os.open(final.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
