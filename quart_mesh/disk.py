"""Free space in the data folder, and the floor below which the node adds no
files.

A full disk makes every write of the store fail. The node keeps a *floor* of
free space (``Settings.disk_floor``, ``MESH_DISK_FLOOR``): below it, what
would add files at a client's request (uploads, app sources) is refused with
507 ``insufficient_storage``, while messages and the store's own writes
(checkpoints, read positions) go on using the room kept for them, and
``/api/health/ready`` says ``disk_low``. The floor's default is 2% of the
filesystem, at least 64 MiB and at most 1 GiB, and never more than half the
filesystem (so a small test disk is not below the floor when empty).

A write must also fit above the floor: :meth:`DiskSpace.reserve` refuses a
write of *size* bytes unless free space less the floor and less what writes
in progress were promised (and have not written yet) leaves that much, and
holds the promise while the write runs; :meth:`Reservation.check` measures
again before each part of it is written. The uploads folder, when
``MESH_UPLOADS_DIR`` puts it on another filesystem, has a ``DiskSpace`` of
its own (``node.uploads_disk``).

Free space comes from ``os.statvfs`` (a system call that costs microseconds)
and is reused for :data:`MAX_AGE` seconds by readiness, so it sees space go
and come back within that time; a write's checks measure afresh. A folder
that cannot be measured (its mount gone) is ``disk_unreadable`` for
readiness and refuses writes with 507
(``docs/decisions/0076-health-and-the-disk-floor.md``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

from .errors import InsufficientStorage

__all__ = ["MAX_AGE", "DiskSpace", "Reservation", "default_floor"]

#: seconds a measure of free space is reused for
MAX_AGE: Final = 0.5

_MIB: Final = 1024 * 1024
#: the default floor: this share of the filesystem, within these bounds
_DEFAULT_SHARE: Final = 0.02
_DEFAULT_LEAST: Final = 64 * _MIB
_DEFAULT_MOST: Final = 1024 * _MIB


def default_floor(total: int) -> int:
    """The floor when none is configured, for a filesystem of *total* bytes:
    2% of it, at least 64 MiB and at most 1 GiB, and at most half of it."""
    floor = min(max(int(total * _DEFAULT_SHARE), _DEFAULT_LEAST), _DEFAULT_MOST)
    return min(floor, total // 2)


class DiskSpace:
    """The free space of *folder*'s filesystem against the floor, less what
    is promised to writes in progress.

    Args:
        folder: the folder measured (the data folder, or the uploads folder
            when it is elsewhere); it must exist once the node is open.
        floor_setting: ``Settings.disk_floor``: None for the default, an int
            for bytes, a float for a share of the filesystem, 0 for no floor.
        clock: seconds (monotonic), for the reuse of a measure.
        label: the folder for people (``"data folder"``, ``"uploads folder"``).
    """

    def __init__(
        self,
        folder: Path,
        floor_setting: int | float | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        label: str = "data folder",
    ) -> None:
        self.folder = folder
        self.floor_setting = floor_setting
        self.label = label
        self._clock = clock
        self._measured_at = -float("inf")
        self._free = 0
        self._total = 0
        #: the writes in progress that were promised room (:meth:`reserve`)
        self._reservations: set[Reservation] = set()

    def _measure(self, *, fresh: bool = False) -> tuple[int, int]:
        """Free and total bytes, measured at most every :data:`MAX_AGE`
        seconds unless *fresh*.

        Raises:
            OSError: the folder cannot be measured (gone, its mount lost).
        """
        now = self._clock()
        if fresh or now - self._measured_at >= MAX_AGE:
            stats = os.statvfs(self.folder)
            self._free = stats.f_bavail * stats.f_frsize
            self._total = stats.f_blocks * stats.f_frsize
            self._measured_at = now
        return self._free, self._total

    def free(self) -> int:
        """Bytes free for the node (an unprivileged writer) in the folder.

        Raises:
            OSError: the folder cannot be measured.
        """
        return self._measure()[0]

    def total(self) -> int:
        """The size of the folder's filesystem, in bytes.

        Raises:
            OSError: the folder cannot be measured.
        """
        return self._measure()[1]

    def floor(self) -> int:
        """The free bytes the node keeps (0: no floor).

        Raises:
            OSError: the folder cannot be measured (a default or share floor).
        """
        return self._floor(self._measure()[1])

    def _floor(self, total: int) -> int:
        setting = self.floor_setting
        if setting is None:
            return default_floor(total)
        if isinstance(setting, float):
            return int(total * setting)
        return setting

    @property
    def enforced(self) -> bool:
        """Whether there is a floor (``MESH_DISK_FLOOR`` is not 0)."""
        return self.floor_setting != 0

    @property
    def promised(self) -> int:
        """Bytes promised to writes in progress and not written yet."""
        return sum(reservation.outstanding for reservation in self._reservations)

    def below_floor(self) -> bool:
        """Whether free space is below the floor (never with no floor).

        Raises:
            OSError: the folder cannot be measured.
        """
        free, total = self._measure()
        floor = self._floor(total)
        return floor > 0 and free < floor

    def problem(self) -> tuple[str, str] | None:
        """Why this folder keeps the node from being ready: ``disk_low`` or
        ``disk_unreadable`` and a message; None when it does not."""
        try:
            low = self.below_floor()
        except OSError as error:
            return (
                "disk_unreadable",
                f"free space in the {self.label} cannot be measured ({_why(error)}):"
                " uploads and app sources are refused",
            )
        if low:
            return (
                "disk_low",
                f"free space in the {self.label} is below the floor (MESH_DISK_FLOOR):"
                " uploads and app sources are refused",
            )
        return None

    def require_room(self, what: str, size: int = 0) -> None:
        """Refuse *what* (``"uploads"``, ``"app sources"``) unless free space,
        less the floor and what is promised to writes in progress, leaves
        *size* bytes. Measured now (not a reused measure). Nothing is refused
        with no floor.

        Raises:
            InsufficientStorage: not enough room, or the folder cannot be
                measured (507).
        """
        if not self.enforced:
            return
        try:
            free, total = self._measure(fresh=True)
        except OSError as error:
            raise InsufficientStorage(
                f"the node cannot measure free space in its {self.label} ({_why(error)}):"
                f" {what} are refused"
            ) from None
        floor = self._floor(total)
        if floor > 0 and free < floor:
            raise InsufficientStorage(
                f"the node is low on disk space in its {self.label} ({_size(free)} free,"
                f" it keeps {_size(floor)}): {what} are refused until space is freed",
            )
        room = free - floor - self.promised
        if room < size:
            raise InsufficientStorage(
                f"the node has {_size(max(0, room))} of disk space to spare in its {self.label}"
                f" (above the {_size(floor)} it keeps and what uploads in progress need),"
                f" less than this needs ({_size(size)}): {what} are refused",
            )

    @contextlib.contextmanager
    def reserve(self, what: str, size: int) -> Iterator[Reservation]:
        """Promise *size* bytes to a write while it runs: refused unless
        :meth:`require_room` allows *size*; while it runs, other writes are
        judged as if its bytes not yet written were gone.

        Raises:
            InsufficientStorage: not enough room (507).
        """
        self.require_room(what, size)
        reservation = Reservation(self, what, size)
        self._reservations.add(reservation)
        try:
            yield reservation
        finally:
            self._reservations.discard(reservation)

    def to_json(self) -> dict[str, Any]:
        """``{free, total, floor, error}`` in bytes (the console's admin
        statistics); the numbers null and ``error`` said when the folder
        cannot be measured."""
        try:
            free, total = self._measure()
        except OSError as error:
            return {"free": None, "total": None, "floor": None, "error": _why(error)}
        return {"free": free, "total": total, "floor": self._floor(total), "error": None}


class Reservation:
    """Room promised to one write in progress (:meth:`DiskSpace.reserve`)."""

    def __init__(self, disk: DiskSpace, what: str, size: int) -> None:
        self._disk = disk
        self._what = what
        #: bytes promised
        self.size = size
        #: bytes written so far
        self.written = 0

    @property
    def outstanding(self) -> int:
        """Bytes promised and not written yet."""
        return max(0, self.size - self.written)

    def check(self, count: int) -> None:
        """Before writing *count* more bytes: refuse them if free space (now)
        less the floor and what all writes in progress still need leaves too
        little (space taken meanwhile by something else).

        Raises:
            InsufficientStorage: not enough room (507).
        """
        beyond = max(0, self.written + count - self.size)  # more than was promised
        self._disk.require_room(self._what, beyond)

    def wrote(self, count: int) -> None:
        """*count* more bytes are written."""
        self.written += count


def _why(error: OSError) -> str:
    """An OS error for people: ``No such file or directory``."""
    return error.strerror or type(error).__name__


def _size(count: int) -> str:
    """*count* bytes for people: ``"12.3 MiB"``."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
