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
