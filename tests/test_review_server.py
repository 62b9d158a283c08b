"""Review of issue 31's server side: serving, stopping, exit statuses.

Real nodes and real processes on loopback, port 0."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from quart_mesh import Settings, open_node
from tests import stores
from tests.helpers import cli
from tests.test_release import _set_revision


async def test_workers_on_a_store_from_a_newer_release_exit_2(tmp_path: Path) -> None:
    # docs/upgrading.md: the refusal is exit status 2, "final" for a
    # supervisor (RestartPreventExitStatus=2); with --workers 2 (PostgreSQL)
    # the parent must say the same, not 1 (which systemd restarts for ever)
    data_dir = tmp_path / "data"
    settings = Settings(data_dir=data_dir)
    url = settings.resolved_database_url
    if not url.startswith("postgresql"):
        pytest.skip("several workers need PostgreSQL (--store postgresql)")
    async with open_node(settings):
        pass  # migrated to head
    await trio.to_thread.run_sync(_set_revision, url, "0099_from_a_newer_release")
    env = stores.node_env(data_dir)
    with trio.fail_after(90):
        done = await cli(
            "serve", "--port", "0", "--workers", "2", "--data-dir", str(data_dir), env=env
        )
    assert done.returncode == 2, done.stderr.decode()
