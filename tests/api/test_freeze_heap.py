"""``create_app(freeze_heap=True)`` (the stock-hypercorn app) moves the
startup heap out of the garbage collector's way once the node is loaded;
by default nothing is frozen (an embedding program's heap is its own)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from quart_mesh import Settings, create_app


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
async def test_the_heap_is_frozen_once_the_node_is_loaded(settings: Settings) -> None:
    app = create_app(settings, freeze_heap=True)
    assert gc.get_freeze_count() == 0
    async with app.test_app():
        assert gc.get_freeze_count() > 0
        r = await app.test_client().get("/api/health")
        assert r.status_code == 200


@pytest.mark.usefixtures("unfrozen")
async def test_nothing_is_frozen_by_default(settings: Settings) -> None:
    app = create_app(settings)
    async with app.test_app():
        assert gc.get_freeze_count() == 0
