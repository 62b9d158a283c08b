"""A served node whose store refuses writes while reads work, logged once
(issue 33's review).

- SQLite's write lock held by another connection (an operator's ``sqlite3``
  shell in ``BEGIN IMMEDIATE``): each send is a JSON 503, reads answer;
  the log says once that the store is unavailable, not a start and an end
  per request, and once that it ended, after a commit;
- a read-only PostgreSQL (``default_transaction_read_only``, as a standby
  after a failover): each send is a JSON 503 (not a 500 with a traceback),
  one fault; set back, sends work and the fault ends.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from functools import partial
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
import trio
from sqlalchemy.engine import Connection

from quart_mesh import MeshApp, Settings, create_app, serve
from quart_mesh.faults import STORE_UNAVAILABLE
from quart_mesh.store import database as database_module
from tests import stores
from tests.helpers import Mesh, User, assert_error

pytestmark = pytest.mark.timeout(60)


def fault_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "quart_mesh.faults" and r.getMessage().startswith("fault")
    ]


async def _served(nursery: trio.Nursery, tmp_path: Path) -> tuple[MeshApp, httpx.AsyncClient]:
    app = create_app(Settings(data_dir=tmp_path / "mesh-data"))
    url: str = await nursery.start(partial(serve, app, port=0))
    return app, httpx.AsyncClient(base_url=url, timeout=30)


async def _send(http: httpx.AsyncClient, owner: User, room_id: str, text: str) -> int:
    r = await http.post(
        f"/api/rooms/{room_id}/messages", json={"content": text}, headers=owner.headers
    )
    if r.status_code != 201:
        assert_error(r, 503, "storage_unavailable")
    return r.status_code


async def _read(http: httpx.AsyncClient, owner: User, room_id: str) -> None:
    """Reads only (a room's messages also move its reader's position: a write)."""
    for path in ("/api/rooms", f"/api/rooms/{room_id}"):
        r = await http.get(path, headers=owner.headers)
        assert r.status_code == 200, r.text


def select_one(conn: Connection) -> int:
    return int(conn.exec_driver_sql("SELECT 1").scalar_one())


@pytest.mark.sqlite_only
async def test_a_held_write_lock_is_logged_once(
    tmp_path: Path,
    nursery: trio.Nursery,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO, logger="quart_mesh")
    # a send waits this long for the lock before its 503 (30 s in service)
    monkeypatch.setattr(database_module, "_BUSY_TIMEOUT", 0.3)
    app, http = await _served(nursery, tmp_path)
    async with http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        room_id = (await mesh.create_room(owner, "locked"))["roomId"]
        assert await _send(http, owner, room_id, "before") == 201
        path = sa.make_url(app.node.db.url).database
        assert path is not None
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as shell:
            shell.execute("BEGIN IMMEDIATE")
            for n in range(4):
                assert await _send(http, owner, room_id, f"locked {n}") == 503
                await _read(http, owner, room_id)
                assert await app.node.db.read(select_one) == 1  # a read that works
            assert app.node.faults.is_active(STORE_UNAVAILABLE)
            assert [line.split(":")[0] for line in fault_lines(caplog)] == ["fault started"]
            assert "database is locked" in fault_lines(caplog)[0]
            shell.execute("ROLLBACK")
        with trio.fail_after(10):
            while await _send(http, owner, room_id, "after") != 201:
                await trio.sleep(0.1)
        await _read(http, owner, room_id)
    assert not app.node.faults.is_active(STORE_UNAVAILABLE)
    assert [line.split(":")[0] for line in fault_lines(caplog)] == [
        "fault started",
        "fault ended",
    ], fault_lines(caplog)


async def test_a_read_only_postgresql_is_a_503_and_one_fault(
    tmp_path: Path, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    if stores.cluster is None:
        pytest.skip("about PostgreSQL (run with --store postgresql)")
    caplog.set_level(logging.INFO, logger="quart_mesh")
    app, http = await _served(nursery, tmp_path)
    async with http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        room_id = (await mesh.create_room(owner, "standby"))["roomId"]
        assert await _send(http, owner, room_id, "before") == 201
        url = app.node.db.url
        name = sa.make_url(url).database
        admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.exec_driver_sql(
                    f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'
                )
            # the node's sessions are new ones, as after a failover
            app.node.db.engine.dispose()
            for n in range(4):
                assert await _send(http, owner, room_id, f"refused {n}") == 503
                await _read(http, owner, room_id)
                assert await app.node.db.read(select_one) == 1  # a read that works
            said = fault_lines(caplog)
            assert [line.split(":")[0] for line in said] == ["fault started"], said
            assert "read-only transaction" in said[0]
        finally:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
            admin.dispose()
        with trio.fail_after(10):
            while await _send(http, owner, room_id, "after") != 201:
                await trio.sleep(0.1)
        await _read(http, owner, room_id)
    assert not app.node.faults.is_active(STORE_UNAVAILABLE)
    assert [line.split(":")[0] for line in fault_lines(caplog)] == [
        "fault started",
        "fault ended",
    ], fault_lines(caplog)
    assert "Traceback" not in caplog.text
