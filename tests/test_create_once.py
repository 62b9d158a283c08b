"""Secret files made once: processes (here threads) starting together on one
data folder all get the same secret and node key, never an empty file."""

from __future__ import annotations

import secrets
import threading
from pathlib import Path

import pytest

from quart_mesh.data_folder import create_once
from quart_mesh.identity import load_or_create_node_identity
from quart_mesh.security import load_or_create_secret

pytestmark = pytest.mark.store_free


def _all_at_once(count: int, fn: object) -> list[object]:
    barrier = threading.Barrier(count)
    results: list[object] = [None] * count

    def run(i: int) -> None:
        barrier.wait()
        results[i] = fn()  # type: ignore[operator]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_starting_together_agrees_on_one_text(tmp_path: Path) -> None:
    for attempt in range(20):
        path = tmp_path / f"try{attempt}" / "secret.key"
        texts = _all_at_once(8, lambda path=path: create_once(path, lambda: secrets.token_hex(32)))
        assert len(set(texts)) == 1
        assert path.read_text() == texts[0]
        assert path.stat().st_mode & 0o777 == 0o600
        assert [p.name for p in path.parent.iterdir()] == ["secret.key"]  # no leftovers


def test_the_secret_and_the_node_key_are_made_once(tmp_path: Path) -> None:
    secrets_seen = _all_at_once(6, lambda: load_or_create_secret(tmp_path))
    dids = _all_at_once(6, lambda: load_or_create_node_identity(tmp_path).did)
    assert len(set(secrets_seen)) == 1
    assert len(set(dids)) == 1
    assert load_or_create_secret(tmp_path) == secrets_seen[0]
