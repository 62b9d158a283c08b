"""``DiskSpace``: the floor's rules, and free space measured at most every
``MAX_AGE`` seconds (an injected clock) on the real filesystem of a folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from quart_mesh.disk import MAX_AGE, DiskSpace, default_floor
from quart_mesh.errors import InsufficientStorage
from tests.small_disk import fill, free_bytes, small_disk

pytestmark = pytest.mark.store_free

MIB = 1024 * 1024
GIB = 1024 * MIB


def test_the_default_floor_is_two_percent_within_its_bounds() -> None:
    assert default_floor(10 * GIB) == int(10 * GIB * 0.02)
    assert default_floor(1024 * GIB) == GIB  # at most 1 GiB
    assert default_floor(1 * GIB) == 64 * MIB  # at least 64 MiB
    assert default_floor(40 * MIB) == 20 * MIB  # never more than half the disk


def test_the_settings_floor_bytes_share_or_none(tmp_path: Path) -> None:
    total = DiskSpace(tmp_path, 0).total()
    assert DiskSpace(tmp_path, 0).floor() == 0
    assert DiskSpace(tmp_path, 0).below_floor() is False
    assert DiskSpace(tmp_path, 12345).floor() == 12345
    assert DiskSpace(tmp_path, 0.5).floor() == int(total * 0.5)
    assert DiskSpace(tmp_path, None).floor() == default_floor(total)


def test_free_space_is_measured_at_most_every_max_age_and_refuses_below_the_floor(
    tmp_path: Path,
) -> None:
    now = 0.0
    with small_disk(tmp_path / "disk", 16) as folder:
        disk = DiskSpace(folder, 8 * MIB, clock=lambda: now)
        assert disk.free() == free_bytes(folder)
        disk.require_room("uploads")
        ballast = fill(folder, leave=4 * MIB)
        assert disk.below_floor() is False  # the measure is reused...
        now += MAX_AGE
        assert disk.below_floor() is True  # ...for MAX_AGE at most
        with pytest.raises(InsufficientStorage) as refused:
            disk.require_room("uploads")
        assert refused.value.status == 507
        assert refused.value.code == "insufficient_storage"
        assert "uploads are refused" in refused.value.message
        assert disk.to_json()["floor"] == 8 * MIB
        ballast.unlink()
        now += MAX_AGE
        assert disk.below_floor() is False


def test_room_promised_to_writes_in_progress_is_not_promised_twice(tmp_path: Path) -> None:
    """A write is refused unless free space less the floor and what writes
    in progress still need leaves its size; what a write has written is no
    longer owed; the promise ends with the write."""
    with small_disk(tmp_path / "disk", 16) as folder:
        disk = DiskSpace(folder, 4 * MIB)
        room = free_bytes(folder) - 4 * MIB
        with pytest.raises(InsufficientStorage, match="less than this needs"):
            disk.require_room("uploads", room + 1)
        with disk.reserve("uploads", room // 2 + 1) as first:
            assert disk.promised == room // 2 + 1
            with pytest.raises(InsufficientStorage), disk.reserve("uploads", room // 2 + 1):
                pass
            assert disk.promised == room // 2 + 1  # the refused one promised nothing
            first.wrote(MIB)
            assert disk.promised == room // 2 + 1 - MIB
        assert disk.promised == 0
        with disk.reserve("uploads", room // 2 + 1):
            pass


def test_a_write_is_refused_once_space_taken_meanwhile_leaves_it_short(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", 16) as folder:
        disk = DiskSpace(folder, 4 * MIB)
        with disk.reserve("uploads", 4 * MIB) as reservation:
            reservation.check(MIB)  # room for all it was promised
            ballast = fill(folder, leave=4 * MIB + MIB)  # something else takes it
            with pytest.raises(InsufficientStorage) as refused:
                reservation.check(MIB)
            assert refused.value.status == 507
            ballast.unlink()
            reservation.check(MIB)


def test_a_folder_that_cannot_be_measured_is_reported_and_refuses(tmp_path: Path) -> None:
    """statvfs fails (the folder or its mount gone): readiness's problem is
    ``disk_unreadable``, the statistics say why, and writes are refused with
    507, not an OSError (a 500); with no floor nothing is refused."""
    gone = tmp_path / "gone"
    gone.mkdir()
    disk = DiskSpace(gone, 8 * MIB, label="uploads folder")
    assert disk.problem() is None
    gone.rmdir()
    disk._measured_at = -float("inf")
    code, message = disk.problem() or ("", "")
    assert code == "disk_unreadable"
    assert "uploads folder" in message
    assert "No such file or directory" in message
    with pytest.raises(InsufficientStorage) as refused:
        disk.require_room("uploads", 10)
    assert (refused.value.status, refused.value.code) == (507, "insufficient_storage")
    assert "cannot measure" in refused.value.message
    assert disk.to_json() == {
        "free": None,
        "total": None,
        "floor": None,
        "error": "No such file or directory",
    }
    DiskSpace(gone, 0).require_room("uploads", 10)  # no floor: not asked


def test_below_the_floor_names_the_folder(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", 16) as folder:
        disk = DiskSpace(folder, 8 * MIB, label="uploads folder")
        ballast = fill(folder, leave=4 * MIB)
        code, message = disk.problem() or ("", "")
        assert code == "disk_low"
        assert "uploads folder" in message
        with pytest.raises(InsufficientStorage, match="in its uploads folder"):
            disk.require_room("uploads")
        ballast.unlink()
