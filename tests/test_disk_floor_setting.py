"""``MESH_DISK_FLOOR`` as read by ``quart_mesh.config.parse_disk_floor``: a
size comes to whole bytes, a share is written with ``%``, and a bare
fraction (``0.05``, meant as 5%) is refused rather than read as 0 bytes,
which would turn the floor off."""

from __future__ import annotations

import pytest

from quart_mesh.config import ConfigError, parse_disk_floor

pytestmark = pytest.mark.store_free


@pytest.mark.parametrize(
    ("value", "floor"),
    [
        ("0", 0),
        ("1048576", 1048576),
        ("500MB", 500_000_000),
        ("1GiB", 1024**3),
        ("1.5KiB", 1536),
        (" 2 kb ", 2000),
        ("5%", 0.05),
        ("2.5%", 0.025),
    ],
)
def test_sizes_and_shares(value: str, floor: float) -> None:
    assert parse_disk_floor(value, "MESH_DISK_FLOOR") == floor


def test_a_bare_fraction_is_refused_not_read_as_no_floor() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_disk_floor("0.05", "MESH_DISK_FLOOR")
    assert str(raised.value) == (
        "MESH_DISK_FLOOR must be a size in bytes or a share written with %: '0.05' would be"
        " a fraction of a byte (for a share, write 5%)"
    )


@pytest.mark.parametrize("value", ["100.5", "1.0001KB", "0.5b"])
def test_fractional_bytes_are_refused(value: str) -> None:
    with pytest.raises(ConfigError, match=r"whole number of bytes|fraction of a byte"):
        parse_disk_floor(value, "MESH_DISK_FLOOR")


@pytest.mark.parametrize("value", ["100%", "-5", "lots", "5 %%"])
def test_nonsense_is_refused(value: str) -> None:
    with pytest.raises(ConfigError):
        parse_disk_floor(value, "MESH_DISK_FLOOR")
