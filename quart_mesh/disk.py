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

Free space comes from ``os.statvfs`` (a system call that costs microseconds)
and is reused for :data:`MAX_AGE` seconds, so readiness sees space go and
come back within that time (``docs/decisions/0076-health-and-the-disk-floor.md``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from .errors import InsufficientStorage

__all__ = ["MAX_AGE", "DiskSpace", "default_floor"]

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
    """The free space of *folder*'s filesystem against the floor.

    Args:
        folder: the data folder (it must exist once the node is open).
        floor_setting: ``Settings.disk_floor``: None for the default, an int
            for bytes, a float for a share of the filesystem, 0 for no floor.
        clock: seconds (monotonic), for the reuse of a measure.
    """

    def __init__(
        self,
        folder: Path,
        floor_setting: int | float | None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.folder = folder
        self.floor_setting = floor_setting
        self._clock = clock
        self._measured_at = -float("inf")
        self._free = 0
        self._total = 0

    def _measure(self) -> tuple[int, int]:
        """Free and total bytes, measured at most every :data:`MAX_AGE` seconds."""
        now = self._clock()
        if now - self._measured_at >= MAX_AGE:
            stats = os.statvfs(self.folder)
            self._free = stats.f_bavail * stats.f_frsize
            self._total = stats.f_blocks * stats.f_frsize
            self._measured_at = now
        return self._free, self._total

    def free(self) -> int:
        """Bytes free for the node (an unprivileged writer) in the data folder."""
        return self._measure()[0]

    def total(self) -> int:
        """The size of the data folder's filesystem, in bytes."""
        return self._measure()[1]

    def floor(self) -> int:
        """The free bytes the node keeps (0: no floor)."""
        setting = self.floor_setting
        if setting is None:
            return default_floor(self.total())
        if isinstance(setting, float):
            return int(self.total() * setting)
        return setting

    def below_floor(self) -> bool:
        """Whether free space is below the floor (never with no floor)."""
        floor = self.floor()
        return floor > 0 and self.free() < floor

    def require_room(self, what: str) -> None:
        """Refuse *what* (``"uploads"``, ``"app sources"``) while free space
        is below the floor.

        Raises:
            InsufficientStorage: free space is below the floor (507).
        """
        if self.below_floor():
            raise InsufficientStorage(
                f"the node is low on disk space ({_size(self.free())} free, it keeps"
                f" {_size(self.floor())}): {what} are refused until space is freed",
            )

    def to_json(self) -> dict[str, int]:
        """``{free, total, floor}`` in bytes (the console's admin statistics)."""
        return {"free": self.free(), "total": self.total(), "floor": self.floor()}


def _size(count: int) -> str:
    """*count* bytes for people: ``"12.3 MiB"``."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
