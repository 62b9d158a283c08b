"""The embedding example in docs/ runs as documented."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from tests import stores

EXAMPLE = Path(__file__).parent.parent / "docs" / "examples" / "embed.py"


@pytest.fixture
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("embed_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_serve_and_use(example: ModuleType, tmp_path: Path) -> None:
    assert await example.serve_and_use(tmp_path) == ["hello from the host program"]
    assert (tmp_path / "mesh.db").exists() == (stores.backend() == "sqlite")


async def test_node_without_http(example: ModuleType, tmp_path: Path) -> None:
    assert await example.node_without_http(tmp_path) == ["Town Square"]
    # the store is closed and reusable: a second run finds the mesh set up
    from quart_mesh import Settings, open_node

    async with open_node(Settings(data_dir=tmp_path)) as node:
        assert node.accounts.setup_status()["initialized"] is True


async def test_example_runs_as_a_script(tmp_path: Path) -> None:
    import sys

    import trio

    result = await trio.run_process(
        [sys.executable, str(EXAMPLE)], cwd=tmp_path, capture_stdout=True, check=True
    )
    assert b"hello from the host program" in result.stdout
