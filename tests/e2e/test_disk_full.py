"""A full disk under a served node, logged once (issue 33).

A ``quart-mesh serve`` process keeps its data folder on a small tmpfs
(``tests/small_disk.py``: root only, skipped otherwise). The folder is
filled to the last byte while hundreds of sends are tried, then emptied
again. The node answers the sends it cannot store with a JSON 503 and
recovers by itself; its log holds one line when the fault starts, at most
the bounded summaries, one when it ends, and nothing per request (no
``storage error`` line, no traceback); after a restart every send it
acknowledged (201) is there.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import trio

from tests.cluster.nodes import start_node
from tests.helpers import Mesh, User, assert_error
from tests.small_disk import fill, small_disk

pytestmark = [pytest.mark.timeout(180), pytest.mark.sqlite_only]

#: the sends here are faster than a person's (``messages`` rate rule); no
#: disk floor (uploads are not what this is about)
TOKEN = "metrics-token-for-the-disk-test"
ENV = {"MESH_RATE_MESSAGES": "100000/1", "MESH_DISK_FLOOR": "0", "MESH_METRICS_TOKEN": TOKEN}
#: sends tried while the disk is full (at least this many fail), and at once
TRIED = 300
CONCURRENT = 20
#: seconds the disk stays full at least
FULL_FOR = 4.0

STARTED = re.compile(r"fault started: the disk is full")
SUMMARY = re.compile(r"fault goes on: the disk is full")
ENDED = re.compile(r"fault ended: the disk is full")


class Sender:
    """Sends into one room, recording what the node acknowledged."""

    def __init__(self, http: httpx.AsyncClient, user: User, room_id: str) -> None:
        self.http = http
        self.user = user
        self.room_id = room_id
        self.acked: set[str] = set()
        self.refused = 0
        self.tried = 0

    async def send(self, client_id: str) -> int:
        """One send; its status (201, or a JSON 503)."""
        self.tried += 1
        r = await self.http.post(
            f"/api/rooms/{self.room_id}/messages",
            json={"content": client_id, "clientId": client_id},
            headers=self.user.headers,
        )
        if r.status_code == 201:
            self.acked.add(r.json()["messageId"])
        else:
            assert_error(r, 503)
            self.refused += 1
        return r.status_code

    async def many(self, prefix: str, count: int) -> None:
        """*count* sends, :data:`CONCURRENT` at a time."""
        limit = trio.CapacityLimiter(CONCURRENT)

        async def one(n: int) -> None:
            async with limit:
                await self.send(f"{prefix}-{n}")

        async with trio.open_nursery() as nursery:
            for n in range(count):
                nursery.start_soon(one, n)


async def test_a_full_disk_is_logged_once_and_loses_nothing_acknowledged(tmp_path: Path) -> None:
    data = tmp_path / "mesh-data"
    url = f"sqlite:///{data / 'mesh.db'}"
    with small_disk(data, 24):
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, data, url, env=ENV)
            try:
                async with httpx.AsyncClient(base_url=node.url, timeout=30) as http:
                    mesh = Mesh(http)
                    owner = await mesh.setup()
                    room_id = (await mesh.create_room(owner, "full"))["roomId"]
                    sender = Sender(http, owner, room_id)
                    await sender.many("before", 20)
                    assert sender.refused == 0, node.log()

                    ballast = await trio.to_thread.run_sync(lambda: fill(data))
                    # hundreds of sends against the full disk (a few may still
                    # fit in the write-ahead log's reused pages), for a few
                    # seconds: the checkpoints (each second) meet it too
                    full_since = trio.current_time()
                    with trio.fail_after(90):
                        while sender.refused < TRIED or trio.current_time() - full_since < FULL_FOR:
                            await sender.many(f"full{sender.tried}", CONCURRENT * 5)
                    assert STARTED.search(node.log()), node.log()
                    metrics = await _metrics(http)
                    assert metrics['mesh_faults_active{kind="disk_full"}'] == 1
                    assert metrics['mesh_fault_failures_total{kind="disk_full"}'] >= 1

                    ballast.unlink()
                    # sends work again by themselves, without a restart
                    with trio.fail_after(30):
                        while await sender.send(f"back{sender.tried}") != 201:
                            await trio.sleep(0.1)
                    refused = sender.refused
                    await sender.many("after", 50)
                    assert sender.refused == refused, node.log()
                    # the fault ends a few seconds after the last write that
                    # met the disk (one episode, not one a second)
                    with trio.fail_after(15):
                        while (await _metrics(http))['mesh_faults_active{kind="disk_full"}']:
                            await trio.sleep(0.2)
            finally:
                await node.stop()
            log = node.log()

            # the log: the fault's start once, its end once, nothing per request
            assert len(STARTED.findall(log)) == 1, log
            assert len(ENDED.findall(log)) == 1, log
            assert log.index("fault ended: the disk is full") > log.index("fault started"), log
            # at most one summary a minute (the test lasts well under two)
            assert len(SUMMARY.findall(log)) <= 2, log
            assert "Traceback" not in log, log
            assert "storage error" not in log, log
            assert "checkpoint failed" not in log, log
            # besides the access log (a line per request, by design), a few lines
            others = [line for line in log.splitlines() if " quart_mesh.access: " not in line]
            assert len(others) < 30, "\n".join(others)

            # after a restart every acknowledged send is there
            again = await start_node(nursery, data, url, env=ENV)
            try:
                async with httpx.AsyncClient(base_url=again.url, timeout=30) as http:
                    stored = await _all_messages(http, owner, room_id)
            finally:
                await again.stop()
            assert sender.acked <= stored, sorted(sender.acked - stored)
            nursery.cancel_scope.cancel()


async def _all_messages(http: httpx.AsyncClient, user: User, room_id: str) -> set[str]:
    """Every message id of the room, page by page (newest page first)."""
    found: set[str] = set()
    params = {"limit": "200"}
    while True:
        r = await http.get(f"/api/rooms/{room_id}/messages", params=params, headers=user.headers)
        assert r.status_code == 200, r.text
        page = r.json()
        if not page:
            return found
        found |= {m["messageId"] for m in page}
        params = {"limit": "200", "before": page[0]["cursor"]}


async def _metrics(http: httpx.AsyncClient) -> dict[str, float]:
    """The node's metrics now: each sample's name and labels, and its value."""
    r = await http.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200, r.text
    samples = (line.rsplit(" ", 1) for line in r.text.splitlines() if not line.startswith("#"))
    return {name: float(value) for name, value in samples}
