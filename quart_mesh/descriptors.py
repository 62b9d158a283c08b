"""Open files: the process's descriptor limit, a cheap count of what is
open, and the reserve that keeps the node's own files out of its clients' reach.

Every connection costs a file descriptor, and so does everything the node
opens for itself: the store's files, uploads, the sockets of federation and
webhook calls, the pipes of managed bots. Left alone, clients take them all,
``accept`` fails with ``EMFILE`` ten times a second, and the node's own
writes fail with it. So:

- at start :func:`raise_open_file_limit` raises the soft ``RLIMIT_NOFILE``
  to the hard limit (the soft one is often 1024, or 256 on some systems,
  while the hard one allows far more) and logs it once; the soft limit it
  found is remembered, and :func:`restore_open_file_limit` gives it back to
  a child process (a managed bot) before it runs, since programs that use
  ``select()`` break above 1024;
- :class:`Reserve` keeps the share of the limit above ``max_fd_share``
  (0.9) for the node: a connection accepted past it is answered at once
  with 503 ``overloaded`` (WebSocket: close 1013) and closed, health probes
  excepted; past the middle of the reserve the server stops accepting until
  connections close, so the kernel, not ``EMFILE``, holds what waits; while
  the fault lasts, connections still waiting for their first request head
  get a short head timeout, and a pause closes those that waited longest,
  so idle connections cannot keep the node from accepting (``server.py``);
- either (refusing, or ``accept`` failing for want of descriptors) is the
  :data:`~quart_mesh.faults.DESCRIPTORS` fault: logged once when it starts,
  summarised while it lasts and logged when it ends (:mod:`quart_mesh.faults`).

Counting is cheap: the server counts its connections itself, and the rest
(what is open besides them) is recounted from ``/proc/self/fd`` at most once
a second, and so is the soft limit (an operator may raise it with
``prlimit`` while the node runs) (``docs/decisions/0079-descriptor-limits.md``).
"""

from __future__ import annotations

import errno
import logging
import math
import os
import resource
import time
from collections.abc import Callable
from typing import Final

import trio

from .faults import DESCRIPTORS, Faults

__all__ = [
    "ACCEPT_CAPACITY_ERRNOS",
    "ACCEPT_RETRY",
    "Reserve",
    "count_open_fds",
    "open_file_limit",
    "raise_open_file_limit",
    "restore_open_file_limit",
]

log = logging.getLogger("quart_mesh")

#: what ``accept`` fails with when the process or the system is out of
#: descriptors or buffers (the same set as ``trio.serve_listeners``)
ACCEPT_CAPACITY_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
#: seconds to wait after such a failure before accepting again (as trio does)
ACCEPT_RETRY: Final = 0.1
#: the other descriptors are recounted at most this often, seconds
RECOUNT_EVERY: Final = 1.0
#: the fault ends once this long has passed without a refusal or a failed accept
QUIET_FOR: Final = 1.0
#: a soft limit to aim for when the hard one is unlimited and the system's
#: own ceiling cannot be read (macOS: ``OPEN_MAX``)
_UNLIMITED_TARGET: Final = 10240
#: where the process's open descriptors are listed (Linux, then BSD/macOS)
_FD_FOLDERS: Final = ("/proc/self/fd", "/dev/fd")

#: what an unlimited soft limit counts as
_NO_LIMIT: Final = 1 << 30
#: the soft limit found before :func:`raise_open_file_limit` raised it, for
#: the ``--workers`` processes (which find it raised already) to give back to
#: their own children
ORIGINAL_LIMIT_ENV: Final = "QUART_MESH_ORIGINAL_NOFILE"

#: the soft limit to give child processes back (``None``: leave theirs alone)
_original_soft: int | None = None
#: the last count of open descriptors, for when they cannot be listed
_last_count: int | None = None

_HINT: Final = (
    "raise the open-file limit (systemd: LimitNOFILE=, a shell: ulimit -n) or add capacity;"
    " docs/operations.md, Open files"
)


def open_file_limit() -> int:
    """The process's soft ``RLIMIT_NOFILE`` (a large number if unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return _NO_LIMIT if soft == resource.RLIM_INFINITY else soft


def count_open_fds() -> int | None:
    """The descriptors this process has open, or ``None`` where the system
    does not list them. A listing costs about a microsecond per descriptor.

    The listing needs a descriptor itself: when none is left (``EMFILE``)
    every one below the soft limit is open, so that is the count (or the
    last count, if higher); when the system has none (``ENFILE``) or no
    memory, the last count. So the count (and ``mesh_open_fds``) does not
    vanish exactly when descriptors run out."""
    global _last_count
    for folder in _FD_FOLDERS:
        try:
            # the listing itself holds one descriptor while it runs
            _last_count = len(os.listdir(folder)) - 1
        except OSError as error:
            if error.errno == errno.EMFILE:
                _last_count = max(_last_count or 0, open_file_limit())
                return _last_count
            if error.errno in ACCEPT_CAPACITY_ERRNOS and _last_count is not None:
                return _last_count
            continue
        return _last_count
    return None


def _ceiling() -> int:
    """How high the soft limit may go when the hard one is unlimited."""
    try:
        with open("/proc/sys/fs/nr_open") as file:
            return int(file.read())
    except (OSError, ValueError):
        return _UNLIMITED_TARGET


def raise_open_file_limit() -> None:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit, and log it once
    (``open files: soft limit raised from A to B``), or log why it could not.
    Nothing is logged (but at debug level) when it is at the hard limit
    already: a second call, or a worker whose parent raised it."""
    global _original_soft
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _ceiling() if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= target:
        log.debug("open files: the soft limit is %s, the hard one %s", soft, hard)
        if _original_soft is None:
            # a worker: its parent raised it, and says from what
            try:
                inherited = int(os.environ.get(ORIGINAL_LIMIT_ENV, ""))
            except ValueError:
                return
            if 0 < inherited < soft:
                _original_soft = inherited
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError) as error:
        log.warning(
            "open files: could not raise the soft limit from %d to %d (%s); it stays at %d",
            soft,
            target,
            error,
            soft,
        )
        return
    _original_soft = soft
    os.environ[ORIGINAL_LIMIT_ENV] = str(soft)  # for --workers: they find it raised
    log.info("open files: soft limit raised from %d to %d", soft, target)


def restore_open_file_limit() -> None:
    """Give this process back the soft open-file limit found before
    :func:`raise_open_file_limit` raised it (nothing if it did not). Meant
    as the ``preexec_fn`` of a child process (a managed bot): it runs in the
    child between ``fork`` and ``exec``, so it only makes the one system
    call, and it never fails (a child with the raised limit still runs)."""
    if _original_soft is None:
        return
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY or soft > _original_soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (_original_soft, hard))
    except (OSError, ValueError):
        pass


class Reserve:
    """The server's connections against the open-file limit.

    The accept loop calls :meth:`opened` for each connection it accepts
    (which says whether to refuse it), :meth:`closed` when it is closed,
    :meth:`wait_for_room` before each accept and :meth:`accept_failed` when
    ``accept`` runs out of descriptors; :meth:`watch` runs beside it to
    recount and to end the fault once things are quiet.

    Args:
        faults: where the :data:`~quart_mesh.faults.DESCRIPTORS` fault is reported.
        share: ``max_fd_share``: past this share of the limit, connections
            are refused; 1.0 keeps no reserve (the kernel's limit alone).
        limit: the open-file limit, a number or what reads it (default: the
            soft ``RLIMIT_NOFILE``, read again at each recount).
        count: counts the open descriptors (``None``: cannot).
        clock: seconds, monotonic.
    """

    def __init__(
        self,
        faults: Faults,
        share: float,
        *,
        limit: int | Callable[[], int] = open_file_limit,
        count: Callable[[], int | None] = count_open_fds,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._faults = faults
        self._count = count
        self._clock = clock
        self._share = share
        if callable(limit):
            self._read_limit = limit
        else:
            fixed = limit
            self._read_limit = lambda: fixed
        #: the open-file limit, as last read
        self.limit = 0
        #: connections accepted past this many open descriptors are refused
        self.refuse_above: float = math.inf
        #: at this many open descriptors the server stops accepting for a while
        self.pause_at: float = math.inf
        #: connections the server has open now
        self.connections = 0
        #: open descriptors that are not connections, as last counted
        self._others = 0
        self._counted_at = -math.inf
        self._trouble_at = -math.inf
        self._room = trio.Event()
        self._recount()

    def _set_limit(self, limit: int) -> None:
        if limit == self.limit:
            return
        self.limit = limit
        if self._share < 1:
            self.refuse_above = math.floor(self._share * limit)
            self.pause_at = self.refuse_above + max(1, (limit - self.refuse_above) // 2)

    def _recount(self) -> None:
        self._set_limit(self._read_limit())
        counted = self._count()
        if counted is not None:
            self._others = max(0, counted - self.connections)
        self._counted_at = self._clock()

    def open_fds(self) -> int:
        """Open descriptors now, estimated: the connections counted exactly,
        the others as of the last recount (at most a second old)."""
        if self._clock() - self._counted_at >= RECOUNT_EVERY:
            self._recount()
        return self._others + self.connections

    def opened(self) -> bool:
        """A connection was accepted: True if it is to be refused (the
        open descriptors are past the share)."""
        self.connections += 1
        fds = self.open_fds()
        if fds > self.refuse_above:
            self._trouble(
                f"{fds} files open of a limit of {self.limit}, past max_fd_share"
                f" ({self.refuse_above:.0f}): new connections are refused with 503"
            )
            return True
        self._maybe_clear(fds)
        return False

    def closed(self) -> None:
        """A connection the server accepted is closed."""
        self.connections -= 1
        self._room.set()

    def accept_failed(self, error: OSError) -> None:
        """``accept`` failed for want of descriptors or buffers."""
        name = errno.errorcode.get(error.errno or 0, str(error.errno))
        self._trouble(f"accept failed with {name} ({os.strerror(error.errno or 0)})")

    @property
    def pressed(self) -> bool:
        """The :data:`~quart_mesh.faults.DESCRIPTORS` fault is on: connections
        were refused, accepting paused or ``accept`` failed, less than
        :data:`QUIET_FOR` ago or while the count is still past the share."""
        return self._faults.is_active(DESCRIPTORS)

    async def wait_for_room(self, relieve: Callable[[], object] | None = None) -> None:
        """Return once the open descriptors are below the middle of the
        reserve (at once, usually): past it, connections wait in the
        kernel's queue rather than take the node's last descriptors.

        While it waits, *relieve* is called (at once, then every
        :data:`ACCEPT_RETRY` seconds or as a connection closes): the server
        closes connections still waiting for their first request head, so
        that accepting resumes soon."""
        if self.open_fds() < self.pause_at:
            return
        self._trouble(
            f"{self.open_fds()} files open of a limit of {self.limit}: accepting is paused"
            " until connections close"
        )
        while self.open_fds() >= self.pause_at:
            self._room = trio.Event()
            if relieve is not None:
                relieve()
            with trio.move_on_after(ACCEPT_RETRY):
                await self._room.wait()

    async def watch(self) -> None:
        """Recount every second and end the fault once it has been quiet
        for :data:`QUIET_FOR` (no new connection may come to end it)."""
        while True:
            await trio.sleep(RECOUNT_EVERY)
            self._recount()
            self._maybe_clear(self.open_fds())

    def _trouble(self, cause: str) -> None:
        self._trouble_at = self._clock()
        self._faults.failed(DESCRIPTORS, cause, hint=_HINT)

    def _maybe_clear(self, fds: int) -> None:
        if not self._faults.is_active(DESCRIPTORS):
            return
        if fds <= self.refuse_above and self._clock() - self._trouble_at >= QUIET_FOR:
            self._faults.cleared(DESCRIPTORS)
