"""Uploads against the disk floor on small real filesystems (issue 33's
review, ``docs/decisions/0076-health-and-the-disk-floor.md``).

- a full disk (no floor): small and large uploads get a JSON 507, never a
  500, and no partial file is left behind (``python -m quart_mesh serve``,
  its output free of tracebacks);
- concurrent uploads are promised room: with room above the floor for one
  of them, one is stored and the others refused, and the floor holds;
- space taken by something else while an upload is written: the upload is
  refused before it goes below the floor, and its partial file removed;
- the uploads folder on a filesystem of its own (``MESH_UPLOADS_DIR``) is
  held to the floor too, and readiness names it; once that folder cannot be
  measured (removed), readiness says ``disk_unreadable``, the admin
  statistics say why and uploads get a JSON 507;
- the data folder that cannot be measured: the same, through its
  ``DiskSpace``.

The small filesystems are tmpfs mounts (root only; skipped otherwise).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio

from quart_mesh import MeshApp, Settings, create_app, serve
from quart_mesh.errors import InsufficientStorage
from tests.e2e.test_cli_restart import ServerProcess
from tests.helpers import Mesh, User, assert_error
from tests.openapi_check import check_answer
from tests.small_disk import fill, free_bytes, small_disk

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

MIB = 1024 * 1024


def client(url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, timeout=30, event_hooks={"response": [check_answer]})


async def upload(
    http: httpx.AsyncClient, user: User, data: bytes, name: str = "f.bin"
) -> httpx.Response:
    return await http.post(
        "/api/upload",
        files={"file": (name, data, "application/octet-stream")},
        headers=user.headers,
    )


def partials(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob(".partial-*"))


async def reasons(http: httpx.AsyncClient) -> list[dict[str, str]]:
    r = await http.get("/api/health/ready")
    body = r.json()
    assert r.status_code == (200 if body["ready"] else 503), r.text
    return list(body["reasons"])


@contextlib.asynccontextmanager
async def served(settings: Settings) -> AsyncIterator[tuple[MeshApp, str]]:
    """A node of *settings* served in this process over loopback."""
    app = create_app(settings)
    async with trio.open_nursery() as nursery:
        url: str = await nursery.start(
            lambda task_status: serve(app, port=0, task_status=task_status)
        )
        yield app, url
        nursery.cancel_scope.cancel()


async def test_uploads_on_a_full_disk_get_507_and_leave_no_partial_file(tmp_path: Path) -> None:
    """No floor (``MESH_DISK_FLOOR=0``), the disk filled: the write, the
    flush or the close fails with ENOSPC, and each upload gets its 507 with
    the partial file removed at once (not at the next start)."""
    data = tmp_path / "mesh-data"
    env = {"MESH_DISK_FLOOR": "0", "MESH_RATE_UPLOADS": "1000/1"}
    with small_disk(data, 24):
        async with trio.open_nursery() as nursery:
            node = ServerProcess(data, env=env)
            url = await node.start(nursery)
            async with client(url) as http:
                owner = await Mesh(http).setup()
                assert (await upload(http, owner, b"x" * 100)).status_code == 201
                ballast = await trio.to_thread.run_sync(lambda: fill(data, leave=3000))
                for size in (1000, 2000, 6000, 300_000):
                    r = await upload(http, owner, b"y" * size)
                    assert_error(r, 507, "insufficient_storage")
                    assert partials(data / "uploads") == [], size
                await trio.to_thread.run_sync(ballast.unlink)
                assert (await upload(http, owner, b"z" * 6000)).status_code == 201
            assert await node.stop() == 0, node.output.decode(errors="replace")
            assert b"Traceback" not in node.output, node.output.decode(errors="replace")


async def test_concurrent_uploads_are_promised_room_and_the_floor_holds(tmp_path: Path) -> None:
    """Room above the floor for one 3 MB upload and a half: of four sent at
    once, one is stored and three refused (507), whatever their order; free
    space stays above the floor."""
    data = tmp_path / "mesh-data"
    floor = 4 * MIB
    with small_disk(data, 32):
        settings = Settings(data_dir=data, disk_floor=floor, upload_quota_bytes=0)
        async with served(settings) as (_app, url), client(url) as http:
            owner = await Mesh(http).setup()
            assert (await upload(http, owner, b"x" * 100)).status_code == 201
            ballast = await trio.to_thread.run_sync(
                lambda: fill(data, leave=floor + 4_500_000, name="ballast")
            )
            statuses: list[int] = []

            async def one(i: int) -> None:
                r = await upload(http, owner, os.urandom(3_000_000), f"c{i}.bin")
                if r.status_code != 201:
                    assert_error(r, 507, "insufficient_storage")
                statuses.append(r.status_code)

            async with trio.open_nursery() as nursery:
                for i in range(4):
                    nursery.start_soon(one, i)
            assert sorted(statuses) == [201, 507, 507, 507], statuses
            assert free_bytes(data) >= floor
            assert partials(data / "uploads") == []
            # one that fits the room left goes through
            assert (await upload(http, owner, b"s" * 200_000)).status_code == 201
            ballast.unlink()


async def test_an_upload_is_refused_once_space_taken_meanwhile_leaves_it_no_room(
    tmp_path: Path,
) -> None:
    """Free space is measured again before each write to disk: taken by
    something else mid-upload, the upload is refused (507) and its partial
    file removed; the floor holds."""
    data = tmp_path / "mesh-data"
    floor = 4 * MIB
    with small_disk(data, 32):
        settings = Settings(data_dir=data, disk_floor=floor, upload_quota_bytes=0)
        async with served(settings) as (app, url), client(url) as http:
            owner = await Mesh(http).setup()
            actor = await app.node.accounts.authenticate(owner.token)
            taken: list[Path] = []

            async def chunks() -> AsyncIterator[bytes]:
                yield b"a" * (512 * 1024)
                # something else takes the room the upload was promised
                taken.append(await trio.to_thread.run_sync(lambda: fill(data, leave=floor + MIB)))
                for _ in range(8):
                    yield b"b" * (512 * 1024)

            with pytest.raises(InsufficientStorage) as refused:
                await app.node.uploads.store(
                    actor, "big.bin", "", chunks(), most_bytes=5 * 512 * 1024 * 2
                )
            assert refused.value.status == 507
            assert partials(data / "uploads") == []
            assert free_bytes(data) >= floor
            taken[0].unlink()
            assert app.node.disk.promised == 0  # the promise is given back
            assert (await upload(http, owner, b"after" * 100)).status_code == 201


async def test_an_uploads_folder_elsewhere_is_held_to_the_floor_and_named(tmp_path: Path) -> None:
    """``MESH_UPLOADS_DIR`` on a small filesystem of its own: filled below the
    floor, uploads are refused and readiness says ``disk_low`` naming the
    uploads folder, while messages go on; the admin statistics show it. The
    folder removed: ``disk_unreadable``, and uploads a JSON 507."""
    uploads = tmp_path / "uploads-disk"
    with small_disk(uploads, 16):
        settings = Settings(
            data_dir=tmp_path / "mesh-data", uploads_dir=uploads / "files", disk_floor=4 * MIB
        )
        async with served(settings) as (app, url), client(url) as http:
            mesh = Mesh(http)
            owner = await mesh.setup()
            room_id = (await mesh.create_room(owner, "elsewhere"))["roomId"]
            assert await reasons(http) == []
            assert (await upload(http, owner, b"x" * 1000)).status_code == 201
            stats = (await http.get("/api/admin/stats", headers=owner.headers)).json()
            assert stats["uploadsDisk"]["floor"] == 4 * MIB
            assert stats["uploadsDisk"]["total"] <= 16 * MIB
            assert stats["disk"]["total"] != stats["uploadsDisk"]["total"]

            ballast = await trio.to_thread.run_sync(lambda: fill(uploads, leave=2 * MIB))
            app.node.uploads_disk._measured_at = -float("inf")  # no waiting for MAX_AGE
            said = await reasons(http)
            assert [r["code"] for r in said] == ["disk_low"], said
            assert "uploads folder" in said[0]["message"]
            r = await upload(http, owner, b"y" * 1000)
            assert_error(r, 507, "insufficient_storage")
            assert "uploads folder" in r.json()["error"]
            await mesh.send(owner, room_id, "messages go on")
            ballast.unlink()

            # the folder removed from under the node: statvfs says ENOENT
            await trio.to_thread.run_sync(shutil.rmtree, uploads / "files")
            app.node.uploads_disk._measured_at = -float("inf")
            said = await reasons(http)
            assert [r["code"] for r in said] == ["disk_unreadable"], said
            assert "uploads folder" in said[0]["message"]
            r = await upload(http, owner, b"z" * 1000)
            assert_error(r, 507, "insufficient_storage")
            stats = (await http.get("/api/admin/stats", headers=owner.headers)).json()
            assert stats["uploadsDisk"]["free"] is None
            assert stats["uploadsDisk"]["error"]
            assert stats["disk"]["error"] is None


async def test_a_data_folder_that_cannot_be_measured_is_reported_not_a_500(
    tmp_path: Path,
) -> None:
    """The data folder's ``statvfs`` fails (its mount gone; here the
    ``DiskSpace`` pointed at a removed folder): readiness says
    ``disk_unreadable``, the admin statistics say why, uploads and app
    sources get a JSON 507, messages go on."""
    settings = Settings(data_dir=tmp_path / "mesh-data", disk_floor=MIB)
    async with served(settings) as (app, url), client(url) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        room_id = (await mesh.create_room(owner, "gone"))["roomId"]
        gone = tmp_path / "gone"
        gone.mkdir()
        gone.rmdir()
        app.node.disk.folder = gone
        app.node.disk._measured_at = -float("inf")
        said = await reasons(http)
        assert [r["code"] for r in said] == ["disk_unreadable"], said
        assert "data folder" in said[0]["message"]
        assert_error(await upload(http, owner, b"x" * 100), 507, "insufficient_storage")
        r = await http.post(
            "/api/apps", json={"name": "gone", "html": "<p>hi</p>"}, headers=owner.headers
        )
        assert_error(r, 507, "insufficient_storage")
        stats = await http.get("/api/admin/stats", headers=owner.headers)
        assert stats.status_code == 200, stats.text
        assert stats.json()["disk"]["free"] is None
        assert "No such file" in stats.json()["disk"]["error"]
        assert (await http.get("/metrics")).status_code in (200, 401, 403, 404)
        await mesh.send(owner, room_id, "messages go on")


async def test_an_uploads_folder_elsewhere_on_the_same_filesystem_is_one_disk(
    tmp_path: Path,
) -> None:
    """``MESH_UPLOADS_DIR`` set but on the data folder's filesystem: one
    floor, one set of promises, no second ``disk_low`` or ``uploadsDisk``."""
    settings = Settings(data_dir=tmp_path / "mesh-data", uploads_dir=tmp_path / "files")
    async with served(settings) as (app, url), client(url) as http:
        owner = await Mesh(http).setup()
        assert app.node.uploads_disk is None
        assert app.node.uploads.files_disk is app.node.disk
        stats = (await http.get("/api/admin/stats", headers=owner.headers)).json()
        assert stats["uploadsDisk"] is None
        assert (await upload(http, owner, b"x" * 100)).status_code == 201
