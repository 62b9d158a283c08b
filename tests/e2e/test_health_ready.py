"""Liveness, readiness and the disk floor over a served node (issue 33,
``docs/decisions/0076-health-and-the-disk-floor.md``).

The disk test runs the real command (``python -m quart_mesh serve``) on a
small tmpfs data folder (root only; skipped otherwise), fills it below the
floor and empties it again; the others serve a node in-process over
loopback and cause what readiness reports through the real store and the
node's real fault registry. Every JSON answer is checked against the
OpenAPI document.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import trio
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.exc import OperationalError

from quart_mesh import MeshApp, Settings, create_app, serve
from quart_mesh.api import health
from quart_mesh.faults import DISK_FULL, STORE_CORRUPT
from tests.e2e.test_cli_restart import ServerProcess
from tests.helpers import PASSWORD, Mesh, User, assert_error, wait_for
from tests.openapi_check import check_answer
from tests.small_disk import fill, small_disk

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

MIB = 1024 * 1024
TOKEN = "scrape-me-0123456789abcdef"


def client(url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, timeout=20, event_hooks={"response": [check_answer]})


async def reasons(http: httpx.AsyncClient) -> list[str]:
    """The codes ``/api/health/ready`` gives now (empty: ready)."""
    r = await http.get("/api/health/ready")
    body = r.json()
    assert r.status_code == (200 if body["ready"] else 503), r.text
    assert body["ready"] is (not body["reasons"])
    return [reason["code"] for reason in body["reasons"]]


async def flips(http: httpx.AsyncClient, wanted: list[str], *, within: float) -> float:
    """Wait until readiness gives exactly *wanted*; the seconds it took,
    which must be under *within*."""
    began = time.monotonic()

    async def there() -> bool:
        return await reasons(http) == wanted

    await wait_for(there, seconds=within + 5, interval=0.05)
    took = time.monotonic() - began
    assert took < within, f"readiness took {took:.2f} s to say {wanted}"
    return took


async def upload(http: httpx.AsyncClient, user: User, name: str = "a.txt") -> httpx.Response:
    return await http.post(
        "/api/upload", files={"file": (name, b"hello " * 100, "text/plain")}, headers=user.headers
    )


async def test_live_and_ready_say_what_they_mean(http: httpx.AsyncClient) -> None:
    r = await http.get("/api/health/live")
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"ok", "version", "uptime"}
    assert body["ok"] is True
    r = await http.get("/api/health/ready")
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"ready", "reasons", "version", "uptime", "storage"}
    assert (body["ready"], body["reasons"]) == (True, [])
    assert body["storage"]["ok"] is True
    assert body["storage"]["writable"] is True
    r = await http.get("/api/health")
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"ok", "version", "uptime", "storage", "reasons"}
    assert (body["ok"], body["reasons"], body["storage"]["writable"]) == (True, [], True)


@pytest.fixture
async def served(tmp_path: Path, nursery: trio.Nursery) -> tuple[MeshApp, str]:
    """A node served over loopback, with the app (to reach its node)."""
    app = create_app(Settings(data_dir=tmp_path / "mesh-data"))
    url: str = await nursery.start(lambda task_status: serve(app, port=0, task_status=task_status))
    return app, url


@pytest.mark.parametrize(
    ("kind", "code"), [(DISK_FULL, "disk_full"), (STORE_CORRUPT, "store_corrupt")]
)
async def test_an_active_disk_or_store_fault_makes_the_node_not_ready(
    served: tuple[MeshApp, str], kind: str, code: str
) -> None:
    app, url = served
    async with client(url) as http:
        assert await reasons(http) == []
        if kind == DISK_FULL:
            # as the store reports a write that met the full disk (SQLITE_FULL)
            full = sqlite3.OperationalError("database or disk is full")
            full.sqlite_errorcode = sqlite3.SQLITE_FULL
            app.node.db.failed(OperationalError("INSERT", {}, full))
        else:
            app.node.faults.failed(kind, "injected by the test")
        await flips(http, [code], within=1.0)
        r = await http.get("/api/health")
        assert r.status_code == 503
        assert [reason["code"] for reason in r.json()["reasons"]] == [code]
        # live stays 200: restarting the process would not help
        assert (await http.get("/api/health/live")).status_code == 200
        if kind == DISK_FULL:
            # no write meets it any more (the disk has room): ready again
            # within a second and a check, the fault's end logged later
            await flips(http, [], within=2.5)
        else:
            app.node.faults.cleared(kind)
            await flips(http, [], within=1.0)


async def test_a_store_behind_or_ahead_of_this_release_or_refusing_writes_is_not_ready(
    served: tuple[MeshApp, str],
) -> None:
    """Through the real store: its migration row set back (behind), then
    to a revision this code does not know (ahead: a newer release migrated
    it), then a trigger that refuses the probe's write."""
    app, url = served
    db = app.node.db
    head = next(iter(health.repo.code_heads()))

    def stamp(revision: str) -> Any:
        return lambda conn: conn.execute(
            sa.text("UPDATE alembic_version SET version_num = :v"), {"v": revision}
        )

    async with client(url) as http:
        assert await reasons(http) == []
        await db.write(stamp("0032_link_preview_switch"))
        await flips(http, ["migrations_pending"], within=1.5)
        await db.write(stamp(head))
        await flips(http, [], within=1.5)
        # ahead: a newer release migrated it (a revision this code does not know)
        await db.write(stamp("0099_from_a_newer_release"))
        await flips(http, ["store_from_newer_release"], within=1.5)
        r = await http.get("/api/health/ready")
        assert "newer release" in r.json()["reasons"][0]["message"]
        await db.write(stamp(head))
        await flips(http, [], within=1.5)
        if db.backend == "sqlite":
            refuse = (
                "CREATE TRIGGER refuse_probe BEFORE UPDATE ON health_probe"
                " BEGIN SELECT RAISE(ABORT, 'read only'); END"
            )
        else:
            refuse = (
                "CREATE FUNCTION refuse_probe() RETURNS trigger LANGUAGE plpgsql AS"
                " $$ BEGIN RAISE EXCEPTION 'read only'; END $$;"
                " CREATE TRIGGER refuse_probe BEFORE UPDATE ON health_probe"
                " FOR EACH ROW EXECUTE FUNCTION refuse_probe()"
            )
        await db.write(lambda conn: conn.exec_driver_sql(refuse))
        await flips(http, ["store_read_only"], within=1.5)
        r = await http.get("/api/health")
        assert r.status_code == 503
        assert r.json()["storage"] == {"ok": True, "writable": False, "backend": db.backend}
        await db.write(
            lambda conn: conn.exec_driver_sql(
                "DROP TRIGGER refuse_probe" + ("" if db.backend == "sqlite" else " ON health_probe")
            )
        )
        await flips(http, [], within=1.5)


async def test_the_disk_floor_refuses_files_not_messages_and_readiness_follows_it(
    tmp_path: Path,
) -> None:
    """A 48 MiB data folder with a 16 MiB floor: filled to 8 MiB free, the
    node is not ready within a second (``disk_low``), uploads and app sources
    get 507 and messages still 201; emptied, ready again within a second and
    uploads work; after a restart every acknowledged message is there."""
    data = tmp_path / "mesh-data"
    env = {
        "MESH_DISK_FLOOR": "16MiB",
        "MESH_METRICS_TOKEN": TOKEN,
        "MESH_RATE_MESSAGES": "10000/1",
    }
    with small_disk(data, 48):
        acked: list[str] = []
        async with trio.open_nursery() as nursery:
            node = ServerProcess(data, env=env)
            url = await node.start(nursery)
            async with client(url) as http:
                mesh = Mesh(http)
                owner = await mesh.setup()
                room_id = (await mesh.create_room(owner, "full"))["roomId"]
                assert await reasons(http) == []
                assert (await upload(http, owner)).status_code == 201
                r = await http.post(
                    "/api/apps", json={"name": "before", "html": "<p>hi</p>"}, headers=owner.headers
                )
                assert r.status_code == 201, r.text
                app_id = r.json()["appId"]

                ballast = await trio.to_thread.run_sync(lambda: fill(data, leave=8 * MIB))
                await flips(http, ["disk_low"], within=1.0)
                assert_error(await upload(http, owner), 507, "insufficient_storage")
                r = await http.post(
                    "/api/apps", json={"name": "during", "html": "<p>hi</p>"}, headers=owner.headers
                )
                assert_error(r, 507, "insufficient_storage")
                r = await http.put(
                    f"/api/apps/{app_id}/source", json={"html": "<p>v2</p>"}, headers=owner.headers
                )
                assert_error(r, 507, "insufficient_storage")
                for i in range(50):
                    acked.append((await mesh.send(owner, room_id, f"low {i}"))["messageId"])
                r = await http.get("/api/health")
                assert (r.status_code, r.json()["ok"]) == (503, False)
                assert [reason["code"] for reason in r.json()["reasons"]] == ["disk_low"]
                stats = (await http.get("/api/admin/stats", headers=owner.headers)).json()
                assert stats["disk"]["floor"] == 16 * MIB
                assert stats["disk"]["free"] < stats["disk"]["floor"]
                assert stats["disk"]["total"] <= 48 * MIB
                metrics = await http.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
                samples = {
                    sample.name: sample.value
                    for family in text_string_to_metric_families(metrics.text)
                    for sample in family.samples
                }
                assert samples["mesh_disk_floor_bytes"] == 16 * MIB
                assert samples["mesh_disk_free_bytes"] < 16 * MIB

                await trio.to_thread.run_sync(ballast.unlink)
                await flips(http, [], within=1.0)
                assert (await upload(http, owner, "after.txt")).status_code == 201
                r = await http.put(
                    f"/api/apps/{app_id}/source", json={"html": "<p>v2</p>"}, headers=owner.headers
                )
                assert r.status_code == 200, r.text
                acked.append((await mesh.send(owner, room_id, "after"))["messageId"])
            assert await node.stop() == 0, node.output.decode(errors="replace")
            assert b"Traceback" not in node.output, node.output.decode(errors="replace")

            node = ServerProcess(data, env=env)
            url = await node.start(nursery)
            async with client(url) as http:
                r = await http.post("/api/auth/login", json={"name": "owner", "password": PASSWORD})
                assert r.status_code == 200, r.text
                headers = {"Authorization": f"Bearer {r.json()['token']}"}
                r = await http.get(
                    f"/api/rooms/{room_id}/messages", params={"limit": 100}, headers=headers
                )
                stored = {message["messageId"] for message in r.json()}
                assert set(acked) <= stored
            assert await node.stop() == 0


@pytest.mark.sqlite_only  # the store's file on the small disk (PostgreSQL's is elsewhere)
async def test_a_full_disk_is_not_ready_and_ready_again_once_space_returns(
    tmp_path: Path,
) -> None:
    """The data folder filled to the last byte while messages are sent: the
    node is not ready (``disk_low``, and whatever the store says), sends
    that fail fail with a JSON 503; the space given back, it is ready again
    within about a second (the store's answer is reused for a second) and
    sends work, without a restart; every acknowledged message is kept."""
    data = tmp_path / "mesh-data"
    env = {"MESH_DISK_FLOOR": "8MiB", "MESH_RATE_MESSAGES": "10000/1"}
    with small_disk(data, 32):
        acked: list[str] = []
        async with trio.open_nursery() as nursery:
            node = ServerProcess(data, env=env)
            url = await node.start(nursery)
            async with client(url) as http:
                mesh = Mesh(http)
                owner = await mesh.setup()
                room_id = (await mesh.create_room(owner, "full"))["roomId"]
                ballast = await trio.to_thread.run_sync(lambda: fill(data, leave=0))
                refused = 0
                for i in range(300):
                    r = await http.post(
                        f"/api/rooms/{room_id}/messages",
                        json={"content": f"full {i} " + "x" * 2000},
                        headers=owner.headers,
                    )
                    if r.status_code == 201:
                        acked.append(r.json()["messageId"])
                    else:
                        assert_error(r, 503)
                        refused += 1
                assert refused, "the disk never filled up"
                codes = await reasons(http)
                assert "disk_low" in codes, codes
                assert (await http.get("/api/health/live")).status_code == 200

                await trio.to_thread.run_sync(ballast.unlink)
                await flips(http, [], within=1.6)
                acked.append((await mesh.send(owner, room_id, "after"))["messageId"])
                assert (await upload(http, owner)).status_code == 201
            assert await node.stop() == 0, node.output.decode(errors="replace")

            node = ServerProcess(data, env=env)
            url = await node.start(nursery)
            async with client(url) as http:
                r = await http.post("/api/auth/login", json={"name": "owner", "password": PASSWORD})
                headers = {"Authorization": f"Bearer {r.json()['token']}"}
                stored: set[str] = set()
                before: str | None = None
                while True:
                    params: dict[str, Any] = {"limit": 100}
                    if before:
                        params["before"] = before
                    r = await http.get(
                        f"/api/rooms/{room_id}/messages", params=params, headers=headers
                    )
                    page = r.json()
                    stored |= {message["messageId"] for message in page}
                    if len(page) < 100:
                        break
                    before = page[0]["messageId"]
                assert set(acked) <= stored, (len(acked), len(stored), refused)
            assert await node.stop() == 0
