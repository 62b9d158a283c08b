"""``quart-mesh backup`` and ``restore`` as real processes: a backup taken
while a node commits sends, restored into an empty folder and served again
with nothing acknowledged before it missing; and the refusals (a folder not
empty, a damaged or hostile archive, a PostgreSQL store, an existing file)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.helpers import Mesh, User, cli, serve_on

# backups are of SQLite stores (PostgreSQL: pg_dump, docs/operations.md)
pytestmark = [pytest.mark.e2e, pytest.mark.sqlite_only]


async def history(http: httpx.AsyncClient, user: User, room_id: str) -> list[dict[str, Any]]:
    """Every message of the room, oldest first, paged forward."""
    messages: list[dict[str, Any]] = []
    since = "0"
    while True:
        r = await http.get(
            f"/api/rooms/{room_id}/messages",
            params={"since": since, "limit": 200},
            headers=user.headers,
        )
        assert r.status_code == 200, r.text
        page = r.json()
        messages += page
        if len(page) < 200:
            return messages
        since = page[-1]["cursor"]


async def test_a_backup_under_send_load_restores_everything_acknowledged_before_it(
    tmp_path: Path,
) -> None:
    data = tmp_path / "node"
    archive = tmp_path / "backups" / "mesh.tar.gz"
    restored = tmp_path / "restored"
    picture = os.urandom(50_000)
    async with trio.open_nursery() as nursery:
        url = await serve_on(data, nursery)
        async with httpx.AsyncClient(base_url=url, timeout=20) as http:
            mesh = Mesh(http)
            owner = await mesh.setup("alice")
            room_id = (await http.get("/api/setup/status")).json()["defaultRoomId"]
            r = await http.post(
                "/api/upload",
                files={"file": ("picture.png", picture, "image/png")},
                headers=owner.headers,
            )
            assert r.status_code == 201, r.text
            upload_path = httpx.URL(r.json()["url"]).path
            #: ids of the sends acknowledged (201), in order
            acked: list[str] = []
            enough = trio.Event()
            stop = trio.Event()

            async def load() -> None:
                i = 0
                while not stop.is_set():
                    message = await mesh.send(owner, room_id, f"load {i}")
                    acked.append(message["messageId"])
                    i += 1
                    if i == 50:
                        enough.set()

            async with trio.open_nursery() as sending:
                sending.start_soon(load)
                await enough.wait()
                before = len(acked)  # acknowledged before the backup began
                # a new interpreter (tests/launcher.py forks the other commands)
                done = await cli("backup", str(archive), "--data-dir", str(data), fresh=True)
                after = len(acked)
                stop.set()  # the last send in flight is still awaited
        nursery.cancel_scope.cancel()
    assert done.returncode == 0, done.stderr.decode()
    assert b"1 uploads" in done.stdout
    assert after > before  # the node went on committing while it was backed up
    assert archive.stat().st_mode & 0o777 == 0o600

    done = await cli("restore", str(archive), "--data-dir", str(restored), fresh=True)
    assert done.returncode == 0, done.stderr.decode()
    async with trio.open_nursery() as nursery:
        url = await serve_on(restored, nursery)
        async with httpx.AsyncClient(base_url=url, timeout=20) as http:
            # the secret came back: the old token is still good
            r = await http.get("/api/auth/me", headers=owner.headers)
            assert r.status_code == 200, r.text
            ids = [m["messageId"] for m in await history(http, owner, room_id)]
            load_ids = [i for i in ids if i in set(acked)]
            # a prefix of what was acknowledged, at least all of it up to the backup
            assert load_ids == acked[: len(load_ids)]
            assert len(load_ids) >= before
            r = await http.get(upload_path, headers=owner.headers)
            assert r.status_code == 200
            assert r.content == picture
        nursery.cancel_scope.cancel()
    for path in restored.rglob("*"):
        if path.is_file():
            assert path.stat().st_mode & 0o077 == 0, path


async def _a_backup(tmp_path: Path) -> Path:
    data = tmp_path / "node"
    async with trio.open_nursery() as nursery:
        url = await serve_on(data, nursery)
        async with httpx.AsyncClient(base_url=url) as http:
            await Mesh(http).setup("alice")
        nursery.cancel_scope.cancel()
    archive = tmp_path / "mesh.tar.gz"
    done = await cli("backup", str(archive), "--data-dir", str(data))
    assert done.returncode == 0, done.stderr.decode()
    return archive


def _rewrite(archive: Path, target: Path, change: Any) -> None:
    """A copy of *archive* with each (name, bytes) passed through *change*."""
    with tarfile.open(archive, "r:gz") as src, tarfile.open(target, "w:gz") as dst:
        for member in src:
            f = src.extractfile(member)
            assert f is not None
            for name, body in change(member.name, f.read()):
                info = tarfile.TarInfo(name)
                info.size = len(body)
                dst.addfile(info, io.BytesIO(body))


async def test_restore_refuses_what_it_must(tmp_path: Path) -> None:
    archive = await _a_backup(tmp_path)

    # not into a folder that holds anything
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mesh.db").write_bytes(b"someone's store")
    done = await cli("restore", str(archive), "--data-dir", str(busy))
    assert done.returncode == 1
    assert b"not empty" in done.stderr
    assert (busy / "mesh.db").read_bytes() == b"someone's store"

    # a damaged file: refused, and the folder left empty
    damaged = tmp_path / "damaged.tar.gz"

    def flip(name: str, body: bytes) -> list[tuple[str, bytes]]:
        if name == "mesh.db":
            body = body[:-1] + bytes([body[-1] ^ 1])
        return [(name, body)]

    _rewrite(archive, damaged, flip)
    target = tmp_path / "from-damaged"
    done = await cli("restore", str(damaged), "--data-dir", str(target))
    assert done.returncode == 1
    assert b"does not match its manifest" in done.stderr
    assert not target.exists()  # the folders it made are gone too
    # and the same folder takes a sound backup afterwards
    done = await cli("restore", str(archive), "--data-dir", str(target))
    assert done.returncode == 0, done.stderr.decode()

    # a hostile one: names outside the folder are never written
    hostile = tmp_path / "hostile.tar.gz"

    def escape(name: str, body: bytes) -> list[tuple[str, bytes]]:
        if name == "manifest.json":
            manifest = json.loads(body)
            manifest["files"]["../escaped"] = {"size": 4, "sha256": "0" * 64}
            return [(name, json.dumps(manifest).encode())]
        return [(name, body), ("../escaped", b"evil")] if name == "mesh.db" else [(name, body)]

    _rewrite(archive, hostile, escape)
    target = tmp_path / "deep" / "from-hostile"
    done = await cli("restore", str(hostile), "--data-dir", str(target))
    assert done.returncode == 1
    assert b"unexpected file" in done.stderr
    assert not (tmp_path / "deep" / "escaped").exists()
    assert not (tmp_path / "deep").exists()

    # links and other non-files are refused, whatever their name
    linked = tmp_path / "linked.tar.gz"
    with tarfile.open(archive, "r:gz") as src, tarfile.open(linked, "w:gz") as dst:
        for member in src:
            if member.name == "secret.key":
                link = tarfile.TarInfo("secret.key")
                link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
                dst.addfile(link)
            else:
                dst.addfile(member, src.extractfile(member))
    target = tmp_path / "from-linked"
    done = await cli("restore", str(linked), "--data-dir", str(target))
    assert done.returncode == 1
    assert b"not a regular file" in done.stderr
    assert not target.exists()

    # not a backup at all
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"\x1f\x8b not really")
    done = await cli("restore", str(junk), "--data-dir", str(tmp_path / "from-junk"))
    assert done.returncode == 1
    assert b"not a readable backup" in done.stderr


async def test_backup_refuses_what_it_must(tmp_path: Path) -> None:
    archive = await _a_backup(tmp_path)
    done = await cli("backup", str(archive), "--data-dir", str(tmp_path / "node"))
    assert done.returncode == 1
    assert b"exists already" in done.stderr
    done = await cli(
        "backup",
        str(tmp_path / "pg.tar.gz"),
        "--database-url",
        "postgresql+psycopg://mesh@/mesh",
        "--data-dir",
        str(tmp_path / "node"),
    )
    assert done.returncode == 1
    assert b"pg_dump" in done.stderr
    done = await cli("backup", str(tmp_path / "none.tar.gz"), "--data-dir", str(tmp_path / "nope"))
    assert done.returncode == 1
    assert b"missing" in done.stderr


async def test_a_backup_streams_through_a_pipe_and_names_a_wrong_uploads_folder(
    tmp_path: Path,
) -> None:
    data = tmp_path / "node"
    async with trio.open_nursery() as nursery:
        url = await serve_on(data, nursery)
        async with httpx.AsyncClient(base_url=url) as http:
            owner = await Mesh(http).setup("alice")
            r = await http.post(
                "/api/upload",
                files={"file": ("notes.txt", b"kept", "text/plain")},
                headers=owner.headers,
            )
            assert r.status_code == 201, r.text
        nursery.cancel_scope.cancel()
    # a backup that would leave the uploads behind is refused
    done = await cli(
        "backup",
        str(tmp_path / "wrong.tar.gz"),
        "--data-dir",
        str(data),
        "--uploads-dir",
        str(tmp_path / "elsewhere"),
    )
    assert done.returncode == 1
    assert b"uploads the store names are not in" in done.stderr
    assert not (tmp_path / "wrong.tar.gz").exists()
    # unless asked to go on without them: said, and listed in the manifest
    done = await cli(
        "backup",
        str(tmp_path / "partial.tar.gz"),
        "--data-dir",
        str(data),
        "--uploads-dir",
        str(tmp_path / "elsewhere"),
        "--allow-missing-uploads",
    )
    assert done.returncode == 0, done.stderr.decode()
    assert b"1 uploads the store names were missing" in done.stderr
    with tarfile.open(tmp_path / "partial.tar.gz", "r:gz") as archive:
        manifest = archive.extractfile("manifest.json")
        assert manifest is not None
        assert len(json.load(manifest)["missingUploads"]) == 1
    # over a pipe: backup - | restore -
    done = await cli("backup", "-", "--data-dir", str(data))
    assert done.returncode == 0, done.stderr.decode()
    restored = tmp_path / "restored"
    again = await cli("restore", "-", "--data-dir", str(restored), stdin=done.stdout)
    assert again.returncode == 0, again.stderr.decode()
    assert b"1 uploads" in again.stdout
    (kept,) = (restored / "uploads").iterdir()
    assert kept.read_bytes() == b"kept"
