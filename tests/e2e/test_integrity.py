"""``quart-mesh check``, the record of backups, and the store's check at
start, as real processes on a real node's data folder (decision 0078): a
fresh node passes; a store with a damaged page fails the check, and the
node refuses to serve it with a message naming ``check``, ``restore`` and
the newest backup, without a traceback; ``check`` says how old the newest
good backup is and reports one that was changed since; on PostgreSQL it
reads the store, its migrations and the cluster stream."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

from quart_mesh.integrity import (
    BACKUPS_FILE,
    KEEP_BACKUPS,
    BackupRecord,
    check_backups,
    record_backup,
    recorded_backups,
)
from tests import stores
from tests.helpers import Mesh, cli, serve_on
from tests.small_disk import fill, small_disk

pytestmark = pytest.mark.e2e


def ok(done: subprocess.CompletedProcess[bytes]) -> str:
    """Exit status 0, no traceback; the standard output."""
    assert done.returncode == 0, (done.stdout.decode(), done.stderr.decode())
    assert b"Traceback" not in done.stderr, done.stderr.decode()
    return done.stdout.decode()


def failed(done: subprocess.CompletedProcess[bytes]) -> str:
    """Exit status 1, no traceback; the standard output and error."""
    output = done.stdout.decode() + done.stderr.decode()
    assert done.returncode == 1, (done.returncode, output)
    assert "Traceback" not in output, output
    return output


async def a_node(data: Path, messages: int = 0) -> None:
    """Serve a node on *data* once: set up, *messages* sent, then stopped."""
    async with trio.open_nursery() as nursery:
        url = await serve_on(data, nursery)
        async with httpx.AsyncClient(base_url=url, timeout=20) as http:
            mesh = Mesh(http)
            owner = await mesh.setup("alice")
            room_id = (await http.get("/api/setup/status")).json()["defaultRoomId"]
            for i in range(messages):
                await mesh.send(owner, room_id, f"message {i} " + "x" * 200)
        nursery.cancel_scope.cancel()


async def check(data: Path, *extra: str, fresh: bool = False) -> subprocess.CompletedProcess[bytes]:
    return await cli(
        "check", "--data-dir", str(data), *extra, env=stores.node_env(data), fresh=fresh
    )


async def test_a_fresh_node_passes_check(tmp_path: Path) -> None:
    data = tmp_path / "node"
    await a_node(data)
    # a new interpreter once (tests/launcher.py forks the other commands)
    out = ok(await check(data, fresh=True))
    assert "all is well" in out
    assert "migrations: at the code's head" in out
    assert "secret.key: readable" in out
    assert "node.key: readable" in out
    if stores.cluster is None:
        assert "integrity check ok" in out
        assert "backups: none recorded" in out  # a warning, not a failure
    else:
        assert "stream: head" in out

    report = json.loads(ok(await check(data, "--json")))
    assert report["ok"] is True
    statuses = {f["name"]: f["status"] for f in report["findings"]}
    assert statuses["store"] == statuses["migrations"] == statuses["uploads"] == "ok"
    if stores.cluster is not None:
        assert statuses["stream"] == "ok"
    [disk] = [f for f in report["findings"] if f["name"] == "disk"]
    assert {"free", "total", "floor"} <= set(disk), disk

    done = await check(data, "--no-such-option")
    assert done.returncode == 2, done.stderr.decode()


async def test_check_says_so_when_it_cannot_read_the_store(tmp_path: Path) -> None:
    data = tmp_path / "node"
    await a_node(data)
    # nobody listens on port 1: the store cannot be reached
    url = "postgresql+psycopg://mesh@127.0.0.1:1/mesh"
    out = failed(await cli("check", "--data-dir", str(data), "--database-url", url))
    assert "store: the store cannot be read" in out
    assert "NOT WELL" in out

    # a folder that is no node's
    out = failed(await cli("check", "--data-dir", str(tmp_path / "nothing")))
    assert "is not a folder" in out


async def test_check_on_postgresql_says_when_the_server_is_down(tmp_path: Path) -> None:
    cluster = stores.cluster
    if cluster is None:
        pytest.skip("about a PostgreSQL server (--store postgresql)")
    data = tmp_path / "node"
    await a_node(data)
    stopped = False
    try:
        await trio.to_thread.run_sync(cluster.stop_server)
        stopped = True
        out = failed(await check(data))
        assert "store: the store cannot be read" in out
    finally:
        if stopped:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(cluster.start_server)
    assert "stream: head" in ok(await check(data))


def _damage_a_page_in_the_middle(store: Path) -> int:
    """Overwrite, with random bytes, the page in the middle of *store* that
    is the root of a table or index (so SQLite must notice); its number."""
    db = sqlite3.connect(store)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every page in the file itself
        (page_size,) = db.execute("PRAGMA page_size").fetchone()
        (pages,) = db.execute("PRAGMA page_count").fetchone()
        roots = [row[0] for row in db.execute("SELECT rootpage FROM sqlite_master") if row[0]]
    finally:
        db.close()
    page = min(roots, key=lambda root: abs(root - pages // 2))
    assert 2 < page < pages
    with store.open("r+b") as f:
        f.seek((page - 1) * page_size)
        f.write(os.urandom(page_size))
    return int(page)


@pytest.mark.sqlite_only
async def test_a_damaged_store_fails_check_and_the_node_refuses_to_serve_it(
    tmp_path: Path,
) -> None:
    data = tmp_path / "node"
    await a_node(data, messages=300)
    archive = tmp_path / "backups" / "mesh.tar.gz"
    ok(await cli("backup", str(archive), "--data-dir", str(data)))
    _damage_a_page_in_the_middle(data / "mesh.db")

    out = failed(await check(data))
    assert "fail  store:" in out
    assert "backups: newest good:" in out  # the way back is named

    # quart-mesh serve: a clean message and a status that is not restarted (2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESH_")}
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-m", "quart_mesh", "serve", "--port", "0", "--data-dir", str(data)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
        )
    output = (done.stdout + done.stderr).decode()
    assert done.returncode == 2, output
    assert "Traceback" not in output, output
    assert "listening on" not in output
    assert "is damaged" in output
    assert f"quart-mesh check --data-dir {data}" in output
    assert "quart-mesh restore" in output
    assert str(archive) in output

    # the way back: the backup restored into an empty folder passes, and serves
    restored = tmp_path / "restored"
    ok(await cli("restore", str(archive), "--data-dir", str(restored)))
    assert "all is well" in ok(await check(restored))


def _rewrite_record(data: Path, path: Path, created: datetime.datetime) -> None:
    """Set when the backup at *path* was taken, in the data folder's record."""
    document = json.loads((data / BACKUPS_FILE).read_text())
    for item in document["backups"]:
        if item["path"] == str(path):
            item["createdAt"] = created.isoformat(timespec="seconds")
    (data / BACKUPS_FILE).write_text(json.dumps(document))


@pytest.mark.sqlite_only
async def test_check_says_how_old_the_newest_good_backup_is(tmp_path: Path) -> None:
    data = tmp_path / "node"
    await a_node(data, messages=5)
    first = tmp_path / "first.tar.gz"
    out = ok(await cli("backup", str(first), "--data-dir", str(data)))
    sha256 = hashlib.sha256(first.read_bytes()).hexdigest()
    assert f"sha256 {sha256}" in out
    (record,) = recorded_backups(data)
    assert (record.path, record.size, record.sha256) == (str(first), first.stat().st_size, sha256)
    assert (data / BACKUPS_FILE).stat().st_mode & 0o077 == 0
    assert f"backups: newest good: {first}, taken just now" in ok(await check(data))

    three_hours_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=3, minutes=5)
    _rewrite_record(data, first, three_hours_ago)
    assert f"newest good: {first}, taken 3 h 5 min ago" in ok(await check(data))
    report = json.loads(ok(await check(data, "--json")))
    (backups,) = [f for f in report["findings"] if f["name"] == "backups"]
    assert backups["newestGoodBackup"]["path"] == str(first)
    assert backups["newestGoodBackup"]["sha256"] == sha256
    assert 3 * 3600 + 5 * 60 <= backups["newestGoodBackup"]["ageSeconds"] < 3 * 3600 + 10 * 60

    # a newer backup, changed since (same size): reported, and the older one is the good one
    second = tmp_path / "second.tar.gz"
    ok(await cli("backup", str(second), "--data-dir", str(data)))
    body = bytearray(second.read_bytes())
    body[len(body) // 2] ^= 0xFF
    second.write_bytes(bytes(body))
    out = failed(await check(data))
    assert f"{second} (" in out
    assert "does not match its recorded SHA-256" in out
    assert f"newest good: {first}, taken 3 h 5 min ago" in out

    # gone (moved off the host): only noted
    second.unlink()
    out = ok(await check(data))
    assert f"{second} (" in out
    assert "is gone" in out
    assert f"newest good: {first}" in out

    # one streamed to standard output is recorded with its checksum
    streamed = await cli("backup", "-", "--data-dir", str(data))
    assert streamed.returncode == 0, streamed.stderr.decode()
    newest = recorded_backups(data)[0]
    assert newest.path is None
    assert newest.sha256 == hashlib.sha256(streamed.stdout).hexdigest()
    assert newest.size == len(streamed.stdout)
    out = ok(await check(data))
    assert "newest: streamed to standard output just now" in out
    assert newest.sha256 in out


async def test_the_record_keeps_the_newest_backups(tmp_path: Path) -> None:
    start = datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC)
    for day in range(KEEP_BACKUPS + 5):
        taken = start + datetime.timedelta(days=day)
        record_backup(tmp_path, BackupRecord(f"/b/{day}.tar.gz", day, f"{day:064x}", taken))
    records = recorded_backups(tmp_path)
    assert [r.path for r in records] == [
        f"/b/{day}.tar.gz" for day in reversed(range(5, KEEP_BACKUPS + 5))
    ]
    assert [p.name for p in tmp_path.iterdir()] == [BACKUPS_FILE]  # no temporary left

    # a record that is not one is read as none, and written over whole
    (tmp_path / BACKUPS_FILE).write_text("{not json")
    assert recorded_backups(tmp_path) == []
    record_backup(tmp_path, records[0])
    assert recorded_backups(tmp_path) == [records[0]]


_GOOD = {
    "path": "/b/good.tar.gz",
    "size": 10,
    "sha256": "0" * 64,
    "createdAt": "2026-11-01T00:00:00+00:00",
}


@pytest.mark.parametrize(
    "bad",
    [
        {**_GOOD, "size": 1e999},  # json: inf, int(): OverflowError
        {**_GOOD, "size": -1},
        {**_GOOD, "size": 10.5},
        {**_GOOD, "size": "10"},
        {**_GOOD, "size": True},
        {**_GOOD, "path": 7},
        {**_GOOD, "path": ["a"]},
        {**_GOOD, "sha256": None},
        {**_GOOD, "createdAt": 1700000000},
        {**_GOOD, "createdAt": "yesterday"},
        {**_GOOD, "createdAt": "2026-11-01T00:00:00"},  # no offset
        {k: v for k, v in _GOOD.items() if k != "size"},
        "a string",
        None,
        [1, 2],
    ],
)
def test_a_malformed_record_is_skipped(tmp_path: Path, bad: object) -> None:
    (tmp_path / BACKUPS_FILE).write_text(json.dumps({"format": 1, "backups": [bad, _GOOD]}))
    (record,) = recorded_backups(tmp_path)
    assert record.path == _GOOD["path"]
    check_backups(tmp_path)  # does not raise


@pytest.mark.sqlite_only  # quart-mesh backup is SQLite's (pg_dump for PostgreSQL)
async def test_a_damaged_record_breaks_neither_check_nor_backup(tmp_path: Path) -> None:
    data = tmp_path / "node"
    await a_node(data)
    (data / BACKUPS_FILE).write_text('{"format": 1, "backups": [{"size": 1e999}]}')
    assert "backups: none recorded" in ok(await check(data))
    archive = tmp_path / "b.tar.gz"
    ok(await cli("backup", str(archive), "--data-dir", str(data)))
    (record,) = recorded_backups(data)  # the damaged one is dropped from the record
    assert record.path == str(archive)
    assert f"backups: newest good: {archive}" in ok(await check(data))


def test_overlapping_backups_to_one_path_are_not_a_damaged_backup(tmp_path: Path) -> None:
    # two backups to the same path overlapped: the newer was recorded, but
    # the older one's rename came last, so the file is the older backup
    archive = tmp_path / "nightly.tar.gz"
    older_body, newer_body = b"older backup", b"newer backup, a little longer"
    archive.write_bytes(older_body)
    now = datetime.datetime.now(datetime.UTC)
    for body, taken in ((older_body, now - datetime.timedelta(minutes=2)), (newer_body, now)):
        record = BackupRecord(str(archive), len(body), hashlib.sha256(body).hexdigest(), taken)
        record_backup(tmp_path, record)
    finding = check_backups(tmp_path, now)
    assert finding.status == "ok", finding
    assert finding.message == (
        f"newest good: {archive}, taken 2 min ago"
        f" ({(now - datetime.timedelta(minutes=2)).isoformat(timespec='seconds')});"
        f" {archive} ({now.isoformat(timespec='seconds')}) was replaced by another backup"
        " to the same path"
    )

    # the file matching neither is still a damaged backup
    archive.write_bytes(b"something else")
    assert check_backups(tmp_path, now).status == "fail"


@pytest.mark.sqlite_only  # the store's own disk: a small filesystem here
async def test_check_warns_below_the_disk_floor(tmp_path: Path) -> None:
    data = tmp_path / "node"
    with small_disk(data, 24):
        await a_node(data)
        ballast = fill(data, leave=4 * 1024 * 1024)
        env = {**stores.node_env(data), "MESH_DISK_FLOOR": "8MiB"}
        done = await cli("check", "--data-dir", str(data), env=env)
        out = ok(done)  # a warning: the node can serve, uploads are refused
        assert "warn  disk:" in out, out
        assert "below the floor" in out, out
        ballast.unlink()
        out = ok(await check(data))
        assert "ok    disk:" in out, out
