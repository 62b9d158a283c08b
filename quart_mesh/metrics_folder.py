"""The workers' metric files: how ``GET /metrics`` sees the whole node under
``quart-mesh serve --workers N`` (``docs/operations.md``, "Metrics").

prometheus-client's multiprocess mode: each worker keeps its counters,
histograms and gauges in files of one folder (memory-mapped, written on
every change), and a scrape, answered by any worker, merges every worker's
files (``MultiProcessCollector``). This module keeps that folder:

* The parent (:class:`MetricsFolder`, only when ``MESH_METRICS_TOKEN`` is
  set) creates a private folder of its own in the temporary directory
  (mode 0700, a fresh one, so empty at start), hands it to its workers in
  ``PROMETHEUS_MULTIPROC_DIR``, and removes it when it exits. Folders left
  by a parent that was killed (``SIGKILL``) are removed by the next parent
  to start: each parent holds a lock (``flock``) on its folder's ``lock``
  file as long as it runs, and a folder whose lock can be taken has no
  parent any more.
* A worker (:func:`use_worker_files`) names its files after its *number*
  (1 to N), not its pid, so the worker the parent starts again in its place
  takes the same files over: its counters go on from where the one before
  stopped (a scrape never sees a count go backwards while the node runs),
  and the folder holds a few files per worker however often they restart.
  Two processes never share a number: the parent starts a worker again only
  after the one before has exited.
* When a worker exits, the parent drops its live gauges
  (:meth:`MetricsFolder.retire`, the library's ``mark_process_dead``), so
  its sessions and queues stop counting at once; its counters stay.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import values
from prometheus_client.multiprocess import mark_process_dead

__all__ = ["ENV", "MetricsFolder", "WorkerFiles", "use_worker_files", "worker_files"]

log = logging.getLogger("quart_mesh.metrics")

#: the variable prometheus-client reads the folder from (set by the parent)
ENV = "PROMETHEUS_MULTIPROC_DIR"
#: how the parents' folders are named in the temporary directory
PREFIX = "quart-mesh-metrics-"
#: the file a parent holds locked while it runs
LOCK = "lock"


class MetricsFolder:
    """The parent's folder of its workers' metric files (:meth:`create`)."""

    def __init__(self, path: Path, lock_fd: int) -> None:
        self.path = path
        self._lock_fd: int | None = lock_fd

    @classmethod
    def create(cls, root: Path | None = None) -> MetricsFolder:
        """A new, empty folder in *root* (the temporary directory), after
        removing those whose parent is gone.

        It is made under a hidden name, locked, then renamed: a folder
        under its final name is always locked while its parent lives.
        """
        root = Path(tempfile.gettempdir()) if root is None else root
        sweep(root)
        staging = Path(tempfile.mkdtemp(prefix="." + PREFIX, dir=root))
        try:
            fd = os.open(staging / LOCK, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        fcntl.flock(fd, fcntl.LOCK_EX)
        path = root / (PREFIX + staging.name.removeprefix("." + PREFIX))
        try:
            staging.rename(path)
        except BaseException:
            os.close(fd)
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return cls(path, fd)

    def env(self) -> dict[str, str]:
        """What a worker's environment gets."""
        return {ENV: str(self.path)}

    def retire(self, number: int) -> None:
        """Worker *number* has exited: drop its live gauges (its counters
        and histograms stay, and the next worker *number* goes on with them)."""
        mark_process_dead(str(number), str(self.path))  # type: ignore[no-untyped-call]

    def remove(self) -> None:
        """The parent is done: remove the folder (and drop the lock)."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
            os.close(fd)


def sweep(root: Path) -> list[Path]:
    """Remove the folders in *root* whose parent is gone (their lock is
    free); this user's only. Returns those removed."""
    removed = []
    for path in sorted(root.glob(PREFIX + "*")):
        try:
            if not path.is_dir() or path.is_symlink() or path.stat().st_uid != os.getuid():
                continue
            fd = os.open(path / LOCK, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:  # gone meanwhile, or not one of ours
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # its parent runs
                continue
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            os.close(fd)
    if removed:
        names = ", ".join(str(path) for path in removed)
        log.info("removed the metric files of workers whose parent is gone: %s", names)
    return removed


@dataclass(frozen=True)
class WorkerFiles:
    """This process is worker *number* and keeps its metrics in *path*."""

    number: int
    path: Path


_worker: WorkerFiles | None = None


def use_worker_files(number: int) -> WorkerFiles | None:
    """In worker *number* of ``--workers``, before any metric is made: keep
    every metric made from now on in the parent's folder (``ENV``), in files
    named after *number*. ``None``, and nothing changes, without the folder
    (metrics are off)."""
    global _worker
    folder = os.environ.get(ENV)
    if not folder:
        return None
    identifier = str(number)
    values.ValueClass = values.MultiProcessValue(lambda: identifier)  # type: ignore[no-untyped-call]
    _worker = WorkerFiles(number, Path(folder))
    return _worker


def worker_files() -> WorkerFiles | None:
    """This worker's files (:func:`use_worker_files`); ``None`` in a single
    process (``serve`` alone, an embedded node, tests)."""
    return _worker
