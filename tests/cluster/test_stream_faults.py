"""The bus facing a stream row it cannot read (written by another version of
the node, or damaged): it does not stop the node; it starts over from the
stream's head — sessions end and resume from their cursors, caches are read
again — and delivery goes on (``services/bus.py``). PostgreSQL only."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
import trio
from trio_websocket import ConnectionClosed

from quart_mesh import Settings
from tests import stores
from tests.helpers import Mesh, Socket, connect

pytestmark = pytest.mark.e2e


def _write_unreadable_row(url: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO cluster_stream (origin, body, created_at)"
                    " VALUES ('another-version', :body, 0)"
                ),
                {"body": '[{"k": "publish", "e": {}}]'},
            )
            conn.execute(sa.text("SELECT pg_notify('mesh_stream', '')"))
    finally:
        engine.dispose()


async def _closed(ws: Socket) -> ConnectionClosed:
    """The close that ends *ws*, skipping the frames before it."""
    with trio.fail_after(10):
        while True:
            try:
                await ws.recv()
            except ConnectionClosed as closed:
                return closed


async def test_an_unreadable_stream_row_ends_sessions_and_delivery_goes_on(
    base_url: str, mesh: Mesh, settings: Settings
) -> None:
    if stores.cluster is None:
        pytest.skip("the cluster stream is PostgreSQL's (--store postgresql)")
    owner = await mesh.setup()
    room_id = (await mesh.create_room(owner, "lobby"))["roomId"]
    async with connect(base_url, owner) as ws:
        await mesh.send(owner, room_id, "before")
        last = await ws.expect("message", content="before")
        await trio.to_thread.run_sync(_write_unreadable_row, settings.resolved_database_url)
        closed = await _closed(ws)
        assert closed.reason is not None
        assert closed.reason.reason == "unavailable"
    await mesh.send(owner, room_id, "meanwhile")
    async with connect(base_url, owner, since=last["cursor"]) as ws:
        assert (await ws.expect("message"))["content"] == "meanwhile"
        await mesh.send(owner, room_id, "after")
        assert (await ws.expect("message"))["content"] == "after"
    health = (await mesh.http.get("/api/health")).json()
    assert health["ok"] is True
