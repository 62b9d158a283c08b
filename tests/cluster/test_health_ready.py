"""Readiness of a ``quart-mesh serve`` process on PostgreSQL while the
database server stops and starts again (issue 33): 503 ``store_unreachable``
within a second or two of the stop, 200 again within a second or two of the
start, without a restart; the process keeps answering liveness throughout.

Needs ``pytest --store postgresql`` (``nodes.py``); the outage as in
``test_failures.py::test_the_nodes_ride_out_a_database_outage``.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
import trio

from tests import stores
from tests.cluster.nodes import open_nodes
from tests.cluster.test_failures import cluster_down
from tests.helpers import Mesh, wait_for

pytestmark = pytest.mark.timeout(180)

#: seconds readiness may take to follow the database (a second of cached
#: answer, the failing query's own time, and the slack of a loaded machine)
WITHIN = 2.5


async def reasons(http: httpx.AsyncClient) -> list[str]:
    r = await http.get("/api/health/ready")
    assert r.status_code in (200, 503), r.text
    body = r.json()
    assert r.status_code == (200 if body["ready"] else 503)
    return [reason["code"] for reason in body["reasons"]]


async def until(http: httpx.AsyncClient, check: object) -> float:
    """Seconds until readiness's reasons satisfy *check*."""
    began = time.monotonic()

    async def there() -> bool:
        return bool(check(await reasons(http)))  # type: ignore[operator]

    await wait_for(there, seconds=30, interval=0.05)
    return time.monotonic() - began


async def test_readiness_follows_a_database_outage(tmp_path: Path) -> None:
    cluster = stores.cluster
    async with open_nodes(tmp_path, 1) as [node]:
        assert cluster is not None
        async with httpx.AsyncClient(base_url=node.url, timeout=10) as http:
            mesh = Mesh(http)
            owner = await mesh.setup()
            room_id = (await mesh.create_room(owner, "outage"))["roomId"]
            acked = [
                (await mesh.send(owner, room_id, f"before {i}"))["messageId"] for i in range(5)
            ]
            assert await reasons(http) == []
            stopped = False
            try:
                await trio.to_thread.run_sync(cluster.stop_server)
                stopped = True
                took = await until(http, lambda codes: "store_unreachable" in codes)
                assert took < WITHIN, took
                r = await http.get("/api/health")
                assert (r.status_code, r.json()["storage"]["ok"]) == (503, False)
                r = await http.get("/api/health/live")
                assert (r.status_code, r.json()["ok"]) == (200, True)
            finally:
                if stopped or cluster_down(cluster):
                    with trio.CancelScope(shield=True):
                        await trio.to_thread.run_sync(cluster.start_server)
            took = await until(http, lambda codes: codes == [])
            assert took < WITHIN, (took, node.log())
            acked.append((await mesh.send(owner, room_id, "after"))["messageId"])
            stored = {m["messageId"] for m in await mesh.messages(owner, room_id, limit=50)}
            assert set(acked) <= stored
        assert node.process.returncode is None, node.log()
