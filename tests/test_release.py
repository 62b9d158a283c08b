"""Releases people can follow (decision 0068, docs/upgrading.md).

- One version: ``quart_mesh.__version__`` (``quart_mesh/_version.py``) is what
  the package's metadata is built with, what ``/api/health``, the mesh
  manifest, the agent cards, the OpenAPI document and ``quart-mesh
  --version`` say, and the newest release in ``CHANGELOG.md``.
- The previous release's data opens: ``tests/fixtures/releases/0.1.0/`` was
  written by 0.1.0's own code (``make_fixture.py`` run with the ``v0.1.0``
  tree on the path; how, in its docstring): a ``quart-mesh backup`` of a
  SQLite node and a ``pg_dump`` of the same mesh on PostgreSQL. This code
  restores or loads it, serves it, and finds everything over the REST API.
- A store written by a newer release (a migration this code does not know)
  is refused at start, and left as it was.

Real nodes on loopback (port 0), real processes for the command line.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import trio

import quart_mesh
from quart_mesh import Settings, open_node
from quart_mesh.backup import restore
from quart_mesh.errors import StoreFromNewerRelease
from tests import stores
from tests.helpers import Mesh, assert_error, cli
from tests.helpers import served as served_node

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
RELEASES = Path(__file__).parent / "fixtures" / "releases"
#: the previous release, whose data this one must open
PREVIOUS = RELEASES / "0.1.0"

#: ``## [1.2.3] - 2026-11-28``, as Keep a Changelog writes a release
RELEASE_HEADING = re.compile(r"## \[(\d+)\.(\d+)\.(\d+)\] - (\d{4}-\d{2}-\d{2})")
SECTIONS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def changelog_releases() -> list[tuple[str, str]]:
    """The changelog's releases, newest first: (version, date); checked to
    be in Keep a Changelog's form on the way."""
    lines = (ROOT / "CHANGELOG.md").read_text().splitlines()
    headings = [line for line in lines if line.startswith("## ")]
    assert headings[0] == "## [Unreleased]", headings[:1]
    releases = []
    for heading in headings[1:]:
        match = RELEASE_HEADING.fullmatch(heading)
        assert match, f"not a release heading: {heading!r}"
        releases.append((".".join(match.group(1, 2, 3)), match.group(4)))
    for line in lines:
        if line.startswith("### "):
            assert line[4:] in SECTIONS, f"not a Keep a Changelog section: {line!r}"
    return releases


def semver(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


@pytest.mark.store_free
def test_the_changelog_s_newest_release_is_the_version() -> None:
    releases = changelog_releases()
    assert releases[0][0] == quart_mesh.__version__
    versions = [semver(version) for version, _ in releases]
    assert versions == sorted(versions, reverse=True)
    assert len(set(versions)) == len(versions)
    dates = [date for _, date in releases]
    assert dates == sorted(dates, reverse=True)
    assert ("0.1.0", "2026-11-28") in releases


@pytest.mark.store_free
def test_the_package_metadata_is_built_from_the_one_version(tmp_path: Path) -> None:
    """setuptools reads the version from ``quart_mesh/_version.py``: built here
    from a copy of the project's files (the installed metadata of an editable
    install is the version at install time)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["dynamic"] == ["version"]
    assert "version" not in project["project"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "quart_mesh._version.__version__"
    }
    source = tmp_path / "source"
    (source / "quart_mesh").mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "quart_mesh/_version.py"):
        shutil.copy(ROOT / name, source / name)
    (source / "quart_mesh" / "__init__.py").touch()
    built = tmp_path / "metadata"
    built.mkdir()
    subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore",
            "-c",
            "import sys, setuptools; setuptools.setup(script_args="
            "['-q', 'egg_info', '--egg-base', sys.argv[1]])",
            str(built),
        ],
        cwd=source,
        check=True,
        capture_output=True,
        timeout=60,
    )
    (info,) = built.glob("*.egg-info/PKG-INFO")
    metadata = dict(line.split(": ", 1) for line in info.read_text().splitlines() if ": " in line)
    assert metadata["Name"] == "quart-mesh"
    assert metadata["Version"] == quart_mesh.__version__
    # an install made from this very checkout must have been made from this version
    installed = importlib.metadata.distribution("quart-mesh")
    origin = json.loads(installed.read_text("direct_url.json") or "{}")
    if origin.get("url") == ROOT.as_uri():
        assert installed.version == quart_mesh.__version__, "reinstall: pip install -e ."


@pytest.mark.store_free
async def test_health_manifest_cards_openapi_and_cli_say_the_version(mesh: Mesh) -> None:
    version = quart_mesh.__version__
    owner = await mesh.setup()
    r = await mesh.http.post(
        "/api/agents/bootstrap",
        json={"name": "carded", "type": "simple", "a2a": True},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    agent_id = r.json()["agentId"]
    for path in (
        "/.well-known/agent-card.json",
        f"/a2a/agents/{agent_id}/.well-known/agent-card.json",
    ):
        r = await mesh.http.get(path)
        assert r.status_code == 200, (path, r.text)
        assert r.json()["version"] == version, path
    r = await mesh.http.get("/api/health")
    assert r.json()["version"] == version
    r = await mesh.http.get("/.well-known/mesh-manifest.json")
    assert r.json()["version"] == version
    r = await mesh.http.get("/api/openapi.json")
    assert r.json()["info"]["version"] == version
    done = await cli("--version")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().strip() == f"quart-mesh {version}"


@asynccontextmanager
async def served(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The node on *settings* served on loopback; a client of it."""
    async with served_node(settings) as (_, _, http):
        yield http


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def finds_everything(http: httpx.AsyncClient, old: dict[str, Any]) -> None:
    """Everything the older release wrote (``old``: its ``<store>.json``)
    is there, over the REST API, and the mesh goes on."""
    owner, member, bot = old["owner"], old["member"], old["bot"]
    rooms, ids = old["rooms"], old["messages"]

    async def get(path: str, token: str, **params: Any) -> Any:
        r = await http.get(path, headers=bearer(token), params=params)
        assert r.status_code == 200, (path, r.text)
        return r.json()

    # the old passwords log in; the old tokens (humans' and the bot's) still work
    for who in (owner, member):
        r = await http.post(
            "/api/auth/login", json={"name": who["name"], "password": who["password"]}
        )
        assert r.status_code == 200, r.text
        assert r.json()["participantId"] == who["participantId"]
    for who in (owner, member, bot):
        me = await get("/api/auth/me", who["token"])
        assert me["participantId"] == who["participantId"]
        assert me["name"] == who["name"]
    assert (await http.get("/api/mesh/settings")).json()["name"] == old["meshName"]

    # rooms: the member sees the public ones, not the private one
    page = await get("/api/rooms", member["token"], limit=100)
    names = {room["roomId"]: room["name"] for room in page["rooms"]}
    assert names[rooms["public"]] == "releases"
    assert rooms["town"] in names
    assert rooms["private"] not in names
    r = await http.get(f"/api/rooms/{rooms['private']}/messages", headers=bearer(member["token"]))
    assert r.status_code in (403, 404), r.text
    (secret,) = await get(f"/api/rooms/{rooms['private']}/messages", owner["token"])
    assert (secret["messageId"], secret["content"]) == (ids["secret"], "only admins read this")

    # messages with their edit, reactions, attachment and thread
    history = await get(f"/api/rooms/{rooms['public']}/messages", owner["token"], limit=100)
    by_id = {message["messageId"]: message for message in history}
    first, edited, reply = by_id[ids["first"]], by_id[ids["edited"]], by_id[ids["reply"]]
    assert first["content"] == "version 0.1.0 is out"
    reactions = {r["emoji"]: sorted(r["participantIds"]) for r in first["reactions"]}
    assert reactions == {
        "🎉": sorted([owner["participantId"], member["participantId"]]),
        "👍": [bot["participantId"]],
    }
    assert edited["content"] == "second draft"
    assert edited["editedAt"] is not None
    assert reply["threadId"] == ids["first"]
    thread = await get(
        f"/api/rooms/{rooms['public']}/messages", member["token"], threadId=ids["first"]
    )
    assert ids["reply"] in [message["messageId"] for message in thread]
    assert any(m["content"] == "a bot was here" for m in history)
    assert history[-1]["messageId"] == ids["last"]

    # the upload: attached, and its bytes served
    (attachment,) = first["attachments"]
    assert attachment["uploadId"] == old["upload"]["uploadId"]
    assert attachment["url"] == old["upload"]["path"]
    r = await http.get(old["upload"]["path"], headers=bearer(member["token"]))
    assert r.status_code == 200
    assert hashlib.sha256(r.content).hexdigest() == old["upload"]["sha256"]

    # the direct message, to the member from the owner's DM list
    dms = await get("/api/dms", member["token"])
    (dm,) = [d for d in dms if d["roomId"] == rooms["dm"]]
    assert dm["participant"]["participantId"] == owner["participantId"]
    (word,) = await get(f"/api/rooms/{rooms['dm']}/messages", owner["token"])
    assert (word["messageId"], word["content"]) == (ids["dm"], "a direct word")

    # the task, where the bot left it; the member's read position
    details = await get(f"/api/tasks/{old['task']['taskId']}", owner["token"])
    task = details["task"]
    assert (task["state"], task["title"]) == (old["task"]["state"], old["task"]["title"])
    assert task["agentId"] == bot["participantId"]
    assert "write the release notes" in [m["content"] for m in details["messages"]]
    status = await get("/api/status", member["token"])
    (read,) = [room for room in status["rooms"] if room["roomId"] == rooms["public"]]
    assert read["lastReadCursor"] == old["read"]["lastReadCursor"]
    assert read["unread"] == old["read"]["unread"]

    # and the mesh goes on: a new message follows the old ones
    r = await http.post(
        f"/api/rooms/{rooms['public']}/messages",
        json={"content": f"now on {quart_mesh.__version__}"},
        headers=bearer(bot["token"]),
    )
    assert r.status_code == 201, r.text
    assert int(r.json()["cursor"]) > int(history[-1]["cursor"])


@pytest.mark.sqlite_only
async def test_a_backup_written_by_0_1_0_restores_and_serves_everything(tmp_path: Path) -> None:
    old = json.loads((PREVIOUS / "sqlite.json").read_text())
    assert old["version"] == "0.1.0"
    settings = Settings(data_dir=tmp_path / "restored")
    summary = await trio.to_thread.run_sync(restore, PREVIOUS / "sqlite.tar.gz", settings)
    assert summary.uploads == 1
    with trio.fail_after(60):
        async with served(settings) as http:
            await finds_everything(http, old)


@pytest.fixture
def cluster(_store: stores.Cluster | None) -> stores.Cluster:
    """The session's PostgreSQL cluster (``--store postgresql``)."""
    if _store is None:
        pytest.skip("loads a PostgreSQL dump: run with --store postgresql")
    return _store


async def test_a_postgresql_dump_written_by_0_1_0_loads_and_serves_everything(
    tmp_path: Path, cluster: stores.Cluster
) -> None:
    old = json.loads((PREVIOUS / "postgresql.json").read_text())
    assert old["version"] == "0.1.0"
    url = cluster.url("mesh_release_0_1_0")  # empty: the dump makes every table
    await trio.run_process(
        [
            str(cluster.bin_dir / "psql"),
            "--quiet",
            "--no-psqlrc",
            "--set=ON_ERROR_STOP=1",
            f"--host={cluster.folder}",
            f"--port={cluster.port}",
            "--username=mesh",
            f"--file={PREVIOUS / 'postgresql.sql'}",
            "mesh_release_0_1_0",
        ],
        capture_stdout=True,
    )
    # the data folder beside the database: its secrets and the uploads
    data_dir = tmp_path / "data"
    shutil.copytree(PREVIOUS / "postgresql", data_dir)
    for path in [data_dir, *data_dir.rglob("*")]:
        path.chmod(0o700 if path.is_dir() else 0o600)
    settings = Settings(data_dir=data_dir, database_url=url)
    with trio.fail_after(60):
        async with served(settings) as http:
            await finds_everything(http, old)


def _set_revision(url: str, revision: str) -> str:
    """Set the store's migration revision; the one it had."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            (before,) = conn.exec_driver_sql("SELECT version_num FROM alembic_version").one()
            conn.execute(
                sa.text("UPDATE alembic_version SET version_num = :revision"),
                {"revision": revision},
            )
    finally:
        engine.dispose()
    return str(before)


async def test_a_store_written_by_a_newer_release_is_refused_and_left_as_it_was(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    settings = Settings(data_dir=data_dir)
    async with served(settings) as http:
        owner = await Mesh(http).setup()
    # as a later release with a migration this code does not know leaves it
    url = settings.resolved_database_url
    newer = "0099_from_a_newer_release"
    head = await trio.to_thread.run_sync(_set_revision, url, newer)
    assert head == "0035_stream_lz4"  # the newest migration

    # the operator: serve refuses it in one line (exit 2, as bad settings) before it listens
    env = stores.node_env(data_dir)
    with trio.fail_after(60):
        done = await cli("serve", "--port", "0", "--data-dir", str(data_dir), env=env)
    assert done.returncode == 2, done.stderr
    stderr = done.stderr.decode()
    assert "Traceback" not in stderr, stderr
    refusal = (
        f"cannot serve: the store was migrated by a newer quart-mesh (migration {newer});"
        f" quart-mesh {quart_mesh.__version__} knows migrations up to {head}."
    )
    assert any(refusal in line for line in stderr.splitlines()), stderr
    # in-process: open_node raises it, and leaves nothing open
    with pytest.raises(StoreFromNewerRelease, match=newer):
        async with open_node(settings):
            pass
    assert "quart-mesh listening on" not in stderr
    # nothing was migrated or written: the newer release still finds its store
    assert await trio.to_thread.run_sync(_set_revision, url, head) == newer
    async with served(settings) as http:
        me = await http.get("/api/auth/me", headers=owner.headers)
        assert me.status_code == 200, me.text
        assert_error(await http.get("/api/auth/me"), 401)


@pytest.mark.store_free
def test_the_fixtures_were_written_by_the_previous_release() -> None:
    """The backup's manifest names the release that wrote it, the dump is at
    0.1.0's newest migration; the fixtures stay small."""
    with tarfile.open(PREVIOUS / "sqlite.tar.gz") as archive:
        manifest = archive.extractfile("manifest.json")
        assert manifest is not None
        assert json.load(manifest)["version"] == "0.1.0"
    dump = (PREVIOUS / "postgresql.sql").read_text()
    assert "CREATE TABLE public.alembic_version" in dump
    assert "0029_a2a_opt_in" in dump
    size = sum(path.stat().st_size for path in RELEASES.rglob("*") if path.is_file())
    assert size < 1_000_000
