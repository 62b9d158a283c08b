"""Uploads on several node processes of one mesh: a file uploaded through
one process is served, and can be attached, through another; with
``MESH_UPLOADS_DIR`` the files land in that folder (the one every host of
the mesh mounts), not in the data folder.

Needs PostgreSQL (``pytest --store postgresql``); see ``tests/cluster/nodes.py``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import httpx
import pytest

from tests.cluster.nodes import open_nodes
from tests.helpers import Mesh

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 64


async def _upload(http: httpx.AsyncClient, headers: dict[str, str], data: bytes) -> dict[str, str]:
    r = await http.post(
        "/api/upload", files={"file": ("dot.png", data, "image/png")}, headers=headers
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


async def test_an_upload_through_one_process_is_served_by_another(tmp_path: Path) -> None:
    async with (
        open_nodes(tmp_path, 2) as (one, two),
        httpx.AsyncClient(base_url=one.url, timeout=30) as http1,
        httpx.AsyncClient(base_url=two.url, timeout=30) as http2,
    ):
        owner = await Mesh(http1).setup()
        noise = os.urandom(300_000)
        for data in (PNG, noise):
            body = await _upload(http1, owner.headers, data)
            path = "/uploads/" + body["url"].rsplit("/", 1)[1]
            r = await http2.get(path)
            assert r.status_code == 200, r.text
            assert r.content == data
            r = await http2.get(path, headers={"Range": "bytes=10-19"})
            assert r.status_code == 206
            assert r.content == data[10:20]
        # attached to a message sent through the other process
        room = await Mesh(http2).create_room(owner, "files")
        sent = await Mesh(http2).send(
            owner, room["roomId"], "a picture", attachments=[body["uploadId"]]
        )
        assert [a["uploadId"] for a in sent["attachments"]] == [body["uploadId"]]
        listed = await Mesh(http1).messages(owner, room["roomId"])
        assert listed[-1]["attachments"][0]["size"] == len(noise)
        # every file landed in the shared folder under its own name, nothing half-written
        folder = tmp_path / "mesh-data" / "uploads"
        names = sorted(p.name for p in folder.iterdir())
        assert len(names) == 2, names
        assert not [name for name in names if name.startswith(".")]


async def test_uploads_land_in_the_uploads_folder(tmp_path: Path) -> None:
    shared = tmp_path / "shared" / "uploads"
    env = {"MESH_UPLOADS_DIR": str(shared)}
    async with (
        open_nodes(tmp_path, 2, env=env) as (one, two),
        httpx.AsyncClient(base_url=one.url, timeout=30) as http1,
        httpx.AsyncClient(base_url=two.url, timeout=30) as http2,
    ):
        owner = await Mesh(http2).setup()
        body = await _upload(http2, owner.headers, PNG)
        name = body["url"].rsplit("/", 1)[1]
        assert (shared / name).read_bytes() == PNG
        assert stat.S_IMODE(shared.stat().st_mode) == 0o700
        assert stat.S_IMODE((shared / name).stat().st_mode) == 0o600
        assert not (tmp_path / "mesh-data" / "uploads").exists()
        r = await http1.get("/uploads/" + name)
        assert r.status_code == 200
        assert r.content == PNG
        # a file gone from the shared folder is gone for every process
        (shared / name).unlink()
        for http in (http1, http2):
            r = await http.get("/uploads/" + name)
            assert r.status_code == 404
