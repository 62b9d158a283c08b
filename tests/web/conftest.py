"""Fixtures of the browser tests: a node served in-process on a loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from quart_mesh import MeshApp, Settings, create_app, serve
from tests.helpers import Mesh

__all__ = ["Served", "serve_node"]


@dataclass
class Served:
    url: str
    app: MeshApp
    settings: Settings
    mesh: Mesh


@pytest.fixture
async def serve_node(
    tmp_path: Path, nursery: trio.Nursery
) -> AsyncIterator[Callable[..., Awaitable[Served]]]:
    """Start a node (``Settings`` fields as keyword arguments) on 127.0.0.1."""
    async with AsyncExitStack() as stack:
        count = 0

        async def start(**settings: Any) -> Served:
            nonlocal count
            count += 1
            config = Settings(data_dir=tmp_path / f"node-{count}", **settings)
            app = create_app(config)
            url: str = await nursery.start(
                lambda task_status: serve(app, port=0, task_status=task_status)
            )
            http = await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=15))
            return Served(url, app, config, Mesh(http))

        yield start
