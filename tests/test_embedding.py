"""The embedding example in docs/ runs as documented."""

from __future__ import annotations

import importlib.util
import os
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


# its processes are given no MESH_* settings: SQLite in either run, so one run is enough
@pytest.mark.store_free
async def test_example_runs_again_in_place_and_leaves_a_clone_clean(tmp_path: Path) -> None:
    """``python docs/examples/embed.py`` from the root of a clone, twice: the
    second run finds its meshes set up and logs in; ``git status`` stays clean
    (its data folder is ignored)."""
    import shutil
    import subprocess
    import sys

    import trio

    clone = tmp_path / "clone"
    (clone / "docs" / "examples").mkdir(parents=True)
    shutil.copy(EXAMPLE, clone / "docs" / "examples" / "embed.py")
    shutil.copy(EXAMPLE.parents[2] / ".gitignore", clone / ".gitignore")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], cwd=clone, check=True)
    subprocess.run([*git, "add", "."], cwd=clone, check=True)
    subprocess.run([*git, "commit", "-qm", "clone"], cwd=clone, check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESH_")}
    env["PYTHONPATH"] = str(EXAMPLE.parents[2])
    outputs = []
    for _run in range(2):
        with trio.fail_after(60):
            result = await trio.run_process(
                [sys.executable, "docs/examples/embed.py"],
                cwd=clone,
                env=env,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        assert result.returncode == 0, result.stderr.decode(errors="replace")
        outputs.append(result.stdout.decode())
    assert outputs[0].splitlines()[0] == "['hello from the host program']"
    # the second run used the same mesh: it finds the first run's message
    assert outputs[1].splitlines()[0] == str(["hello from the host program"] * 2)
    assert (clone / "embedded-mesh-data").is_dir()
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=clone,
        capture_output=True,
        check=True,
        text=True,
    )
    assert status.stdout == ""
