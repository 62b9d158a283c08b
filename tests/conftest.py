"""Shared fixtures: settings in a temporary data folder, the app in-process,
and the real app served by hypercorn on a loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
import trio

from quart_mesh import MeshApp, Settings, create_app, serve
from tests.browser import require_browser
from tests.helpers import Mesh
from tests.upstream import Upstream

if TYPE_CHECKING:
    from quart.typing import TestClientProtocol


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "mesh-data")


@pytest.fixture
async def app(settings: Settings) -> AsyncIterator[MeshApp]:
    """The app with its lifespan running (the node started), in-process."""
    app = create_app(settings)
    async with app.test_app():
        yield app


@pytest.fixture
def client(app: MeshApp) -> TestClientProtocol:
    return app.test_client()


@pytest.fixture
async def base_url(settings: Settings, nursery: trio.Nursery) -> str:
    """A real node served by hypercorn's trio worker on 127.0.0.1, port 0."""
    app = create_app(settings)
    url: str = await nursery.start(lambda task_status: serve(app, port=0, task_status=task_status))
    return url


@pytest.fixture
async def http(base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        yield client


@pytest.fixture
def mesh(http: httpx.AsyncClient) -> Mesh:
    return Mesh(http)


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> Upstream:
    """A real OpenAI-compatible upstream on loopback (see tests/upstream.py)."""
    server = Upstream()
    await server.start(nursery)
    return server


@pytest.fixture
def browser_ready() -> None:
    """Chromium and Playwright are there (tests/browser.py), or the test is skipped."""
    require_browser()
