"""A small filesystem for a node's data folder, to fill up and empty again.

A tmpfs of a few megabytes mounted at a test's folder (needs root: CI runs
as root; elsewhere the test is skipped with the reason). :func:`fill` writes
a ballast file until only so much is free; deleting it gives the space back.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["fill", "free_bytes", "small_disk"]


@contextlib.contextmanager
def small_disk(folder: Path, megabytes: int) -> Iterator[Path]:
    """*folder* (created) as a tmpfs of *megabytes*, unmounted on the way out."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={megabytes}m,mode=0755", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        # lazily: a node's process that has not quite gone does not keep it mounted
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)


def free_bytes(folder: Path) -> int:
    """Bytes free for an unprivileged writer in *folder*'s filesystem."""
    stats = os.statvfs(folder)
    return stats.f_bavail * stats.f_frsize


def fill(folder: Path, *, leave: int = 0, name: str = "ballast") -> Path:
    """Write ``folder/name`` until at most *leave* bytes are free (or the
    filesystem refuses more); the ballast's path, to delete to give the
    space back."""
    ballast = folder / name
    chunk = b"\0" * (256 * 1024)
    with ballast.open("ab") as out:
        while (free := free_bytes(folder)) > leave:
            try:
                out.write(chunk[: max(1, min(len(chunk), free - leave))])
                out.flush()
            except OSError:  # full: as far as it goes
                break
    return ballast
