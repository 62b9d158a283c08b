"""A PostgreSQL outage under served processes, logged once (issue 33).

Two ``quart-mesh serve`` processes of one mesh; the database server is
stopped while clients keep sending (every send a JSON 503), then started
again. Each process's log holds one line when the store became
unavailable, at most the bounded summaries, one line when it came back,
and nothing per request or per retry of the bus (no ``storage error``, no
``reading the cluster stream failed``, no traceback). Nothing acknowledged
is lost. Needs ``--store postgresql`` (``nodes.py``), like
``test_failures.py::test_the_nodes_ride_out_a_database_outage``.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import trio

from tests import stores
from tests.cluster.nodes import NodeProcess, open_nodes
from tests.cluster.test_failures import FAST, cluster_down, mesh_of, send_until_stored
from tests.helpers import User, assert_error, wait_for

pytestmark = pytest.mark.timeout(180)

STARTED = re.compile(r"fault started: the store is unavailable")
ENDED = re.compile(r"fault ended: the store is unavailable")
SUMMARY = re.compile(r"fault goes on: the store is unavailable")
#: what each retry or request logged before faults were logged once
PER_FAILURE = (
    "storage error",
    "reading the cluster stream failed",
    "listening for the cluster's commits failed",
    "live event(s) not sent",
    "Traceback",
)
#: a process that held an elected role says it lost it (once per role)
LOST_ROLE = re.compile(r"quart_mesh.store.leases: lost the [a-z ]+ role")
#: seconds the database stays down at least (the bus retries every 0.2..5 s)
DOWN_FOR = 6.0


async def test_an_outage_is_logged_once_per_process(tmp_path: Path) -> None:
    cluster = stores.cluster
    async with open_nodes(tmp_path, 2, env=FAST) as nodes:
        assert cluster is not None
        room_id, owner, [bob] = await mesh_of(nodes, ["bob"])
        acked: list[str] = []
        async with (
            httpx.AsyncClient(base_url=nodes[0].url, timeout=10) as http_a,
            httpx.AsyncClient(base_url=nodes[1].url, timeout=10) as http_b,
        ):
            pairs: list[tuple[httpx.AsyncClient, User]] = [(http_a, owner), (http_b, bob)]
            for http, user in pairs:
                acked.append((await send_until_stored(http, user, room_id, "before"))["messageId"])

            stopped = False
            try:
                await trio.to_thread.run_sync(cluster.stop_server)
                stopped = True
                down_since = trio.current_time()
                sent = 0
                # sends on both processes while it is down: each a JSON 503
                with trio.fail_after(60):
                    while sent < 100 or trio.current_time() - down_since < DOWN_FOR:
                        http, user = pairs[sent % 2]
                        r = await http.post(
                            f"/api/rooms/{room_id}/messages",
                            json={"content": f"during {sent}"},
                            headers=user.headers,
                        )
                        assert_error(r, 503)
                        sent += 1
                        await trio.sleep(0.02)
            finally:
                if stopped or cluster_down(cluster):
                    with trio.CancelScope(shield=True):
                        await trio.to_thread.run_sync(cluster.start_server)

            # back: each process answers and stores again by itself
            for http, user in pairs:

                async def answers(http: httpx.AsyncClient = http, user: User = user) -> bool:
                    r = await http.get(f"/api/rooms/{room_id}/messages", headers=user.headers)
                    assert r.status_code in (200, 503), (r.status_code, r.text)
                    return r.status_code == 200

                await wait_for(answers, seconds=30, interval=0.2)
                acked.append((await send_until_stored(http, user, room_id, "after"))["messageId"])

            # each process ends the fault (its bus reads the stream again)
            for node in nodes:

                async def ended(node: NodeProcess = node) -> bool:
                    return bool(ENDED.search(node.log()))

                await wait_for(ended, seconds=30, interval=0.2)

            r = await http_a.get(
                f"/api/rooms/{room_id}/messages", params={"limit": "200"}, headers=owner.headers
            )
            assert r.status_code == 200, r.text
            stored = {m["messageId"] for m in r.json()}
            assert set(acked) <= stored

        for node in nodes:
            log = node.log()
            assert len(STARTED.findall(log)) == 1, log
            assert len(ENDED.findall(log)) == 1, log
            assert log.index("fault ended: the store") > log.index("fault started: the store"), log
            assert len(SUMMARY.findall(log)) <= 2, log  # at most one a minute
            for words in PER_FAILURE:
                assert words not in log, (words, log)
            # what else warned: a process losing its elected roles (once each)
            others = [
                line
                for line in log.splitlines()
                if re.search(r" (WARNING|ERROR) ", line)
                and " quart_mesh.faults: " not in line
                and not LOST_ROLE.search(line)
            ]
            assert others == [], "\n".join(others)
            assert node.process.returncode is None, log
