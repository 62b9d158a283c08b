"""The store the suite runs on: SQLite (the default) or PostgreSQL.

``pytest --store postgresql`` runs the whole suite on a real PostgreSQL
server: a throwaway cluster (Debian's ``postgresql`` package: ``initdb`` and
``pg_ctl``) started in a temporary folder for the session, listening only on
a Unix socket in that folder, and gone when the session ends. Every node a
test makes, in-process or as a subprocess, gets a database of its own,
named after its data folder, so two nodes of one test (federation) never
share one and a node restarted on the same folder finds its data again.

A node's database starts as a copy of one template that the store's own
code (``Database.open``: every migration, on PostgreSQL) brought to the
newest revision at the start of the session, so each node's start finds its
schema at head instead of running the migrations again (~0.2 s a node, and
the suite makes hundreds). The migrations from an empty database stay
covered on PostgreSQL: by that template, and by the store's own tests
(``tests/store/``), whose databases are empty (:meth:`Cluster.url`). A
thread keeps two copies ready, and drops the databases of a test that has
ended, so the cluster stays small and its removal at the end is quick.

On SQLite likewise, a node made in-process whose store does not exist yet
gets a copy of one migrated at the start of the session
(:func:`sqlite_template`, :class:`SeededDatabase`); the store's own tests and the
nodes started as processes still migrate empty stores.

Tests that are about SQLite itself (its file, its locks) are marked
``sqlite_only`` and skipped on PostgreSQL.

PostgreSQL missing: the session is skipped with a message, unless
``MESH_REQUIRE_POSTGRES=1`` (CI), then it fails.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from glob import glob
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from quart_mesh.store.database import Database

if TYPE_CHECKING:
    import psycopg

REQUIRED = os.environ.get("MESH_REQUIRE_POSTGRES") == "1"

#: the migrated database every node's database is a copy of
TEMPLATE = "mesh_template"
#: copies of it kept ready (a test with three nodes takes three at once)
_SPARES = 2


def _bin_dir() -> Path | None:
    """Where Debian keeps the server's programs (newest version first)."""
    found = sorted(glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    if found:
        return Path(found[0]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class Cluster:
    """A PostgreSQL cluster in a temporary folder, reached by Unix socket."""

    def __init__(self, folder: Path, bin_dir: Path) -> None:
        self.folder = folder
        self.bin_dir = bin_dir
        self.port = 5432
        # the server refuses to run as root: run its programs as ``postgres``
        self._as: list[str] = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self._created: set[str] = set()
        #: databases made since :meth:`forget_new` last ran (the running test's)
        self._new: list[str] = []
        self._spares: queue.Queue[str] = queue.Queue(maxsize=_SPARES)
        self._drops: queue.Queue[str] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._stopping = threading.Event()

    def _run(self, *args: str) -> None:
        result = subprocess.run(
            [*self._as, *args], capture_output=True, text=True, check=False, timeout=120
        )
        if result.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {result.stdout}{result.stderr}")

    def start(self) -> None:
        if self._as:
            shutil.chown(self.folder, "postgres")
        data = self.folder / "data"
        self._run(
            str(self.bin_dir / "initdb"),
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            "mesh",
            "-E",
            "UTF8",
            "--no-sync",
        )
        self.start_server()
        self._make_template()

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        import psycopg

        return psycopg.connect(
            host=str(self.folder), port=self.port, user="mesh", dbname="postgres", autocommit=True
        )

    def _make_template(self) -> None:
        """Bring :data:`TEMPLATE` to the newest revision with the node's own
        code, then close it to connections (a copy needs it unused)."""
        import trio

        with self._connect() as conn:
            conn.execute(f'CREATE DATABASE "{TEMPLATE}"')
        database = Database(self._url(TEMPLATE))
        try:
            trio.run(database.open)
        finally:
            trio.run(database.close)
        with self._connect() as conn:
            conn.execute(
                f'ALTER DATABASE "{TEMPLATE}" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false'
            )

    def _busy(self) -> threading.Thread:
        """The thread of :meth:`_work`, started on first need."""
        if self._worker is None:
            self._worker = threading.Thread(
                target=self._work, name="mesh-pg-databases", daemon=True
            )
            self._worker.start()
        return self._worker

    def _work(self) -> None:
        """The thread: drop the databases of ended tests, and keep
        :data:`_SPARES` copies of the template ready. A failure (the server
        stopped by a test) is retried on a new connection."""
        numbers = itertools.count()
        spare: str | None = None
        while not self._stopping.is_set():
            try:
                with self._connect() as conn:
                    while not self._stopping.is_set():
                        with contextlib.suppress(queue.Empty):
                            dropped = self._drops.get_nowait()
                            conn.execute(f'DROP DATABASE IF EXISTS "{dropped}" WITH (FORCE)')
                            continue
                        if spare is None:
                            spare = f"mesh_spare_{next(numbers)}"
                            # FILE_COPY: the copy is not written to the WAL
                            conn.execute(
                                f'CREATE DATABASE "{spare}" TEMPLATE "{TEMPLATE}"'
                                " STRATEGY FILE_COPY"
                            )
                        try:
                            self._spares.put(spare, timeout=0.05)
                            spare = None
                        except queue.Full:
                            pass
            except Exception:  # the server is stopped or restarting: retry
                spare = None
                time.sleep(0.1)

    def start_server(self) -> None:
        """Start the server on the cluster made by :meth:`start` (again,
        after :meth:`stop_server`); returns once it accepts connections."""
        # durability is not what these tests are about: no fsync, to be quick
        options = (
            f"-k {self.folder} -p {self.port} -c listen_addresses='' -c fsync=off"
            " -c synchronous_commit=off -c full_page_writes=off -c max_connections=400"
        )
        self._run(
            str(self.bin_dir / "pg_ctl"),
            "-D",
            str(self.folder / "data"),
            "-o",
            options,
            "-l",
            str(self.folder / "server.log"),
            "-w",
            "start",
        )

    def stop_server(self) -> None:
        """Stop the server as an operator does (``pg_ctl stop -m fast``: open
        sessions are ended, nothing is lost); :meth:`start_server` brings it
        back. The cluster is the whole session's: restart it in a ``finally``."""
        self._run(
            str(self.bin_dir / "pg_ctl"),
            "-D",
            str(self.folder / "data"),
            "-m",
            "fast",
            "-w",
            "stop",
        )

    def stop(self) -> None:
        self._stopping.set()
        if self._worker is not None:
            self._worker.join(timeout=30)
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self._run(
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(self.folder / "data"),
                "-m",
                "immediate",
                "stop",
            )

    def url(self, database: str, *, migrated: bool = False) -> str:
        """The SQLAlchemy URL of *database*, made on first use: empty, or
        with *migrated* a copy of the migrated template."""
        if database not in self._created:
            with self._connect() as conn:
                exists = conn.execute(
                    "SELECT 1 FROM pg_database WHERE datname = %s", (database,)
                ).fetchone()
                if exists is None and migrated:
                    spare = self._spare()
                    conn.execute(f'ALTER DATABASE "{spare}" RENAME TO "{database}"')
                elif exists is None:
                    conn.execute(f'CREATE DATABASE "{database}"')
            self._created.add(database)
            self._new.append(database)
        return self._url(database)

    def _spare(self) -> str:
        """A ready copy of the template (waiting for the thread to make one)."""
        worker = self._busy()
        deadline = time.monotonic() + 60
        while True:
            try:
                return self._spares.get(timeout=1)
            except queue.Empty:
                if not worker.is_alive():
                    raise RuntimeError("the thread that copies the template has ended") from None
                if time.monotonic() > deadline:  # a failing copy: fail the test, not hang
                    raise RuntimeError("no copy of the template database in 60 s") from None

    def _url(self, database: str) -> str:
        return f"postgresql+psycopg://mesh@/{database}?host={self.folder}&port={self.port}"

    def forget_new(self) -> None:
        """Drop, in the background, the databases made since the last call
        (at the end of each test: nothing of a test outlives it)."""
        if self._new:
            self._busy()
        for database in self._new:
            self._created.discard(database)
            self._drops.put(database)
        self._new.clear()

    def url_for(self, data_dir: Path) -> str:
        """The database of the node whose data folder is *data_dir*."""
        return self.url(_database_name(data_dir), migrated=True)

    def stored_folders(self, data_dir: Path) -> list[Path]:
        """Where the server keeps the bytes of *data_dir*'s database, after
        a checkpoint has written them out: its folder and the write-ahead log."""
        with self._connect() as conn:
            conn.execute("CHECKPOINT")
            row = conn.execute(
                "SELECT oid FROM pg_database WHERE datname = %s", (_database_name(data_dir),)
            ).fetchone()
        assert row is not None, "no database for this data folder"
        data = self.folder / "data"
        return [data / "base" / str(row[0]), data / "pg_wal"]


def _database_name(data_dir: Path) -> str:
    return "mesh_" + hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()[:20]


#: the session's cluster while the suite runs on PostgreSQL, else ``None``
cluster: Cluster | None = None


@contextlib.contextmanager
def postgres_cluster() -> Iterator[Cluster | None]:
    """Start a throwaway cluster for the session; ``None`` if PostgreSQL is
    not installed (and not required)."""
    global cluster
    bin_dir = _bin_dir()
    if bin_dir is None:
        if REQUIRED:
            raise RuntimeError("MESH_REQUIRE_POSTGRES=1 but PostgreSQL is not installed")
        yield None
        return
    folder = Path(tempfile.mkdtemp(prefix="mesh-pg-"))
    started = Cluster(folder, bin_dir)
    try:
        started.start()
        cluster = started
        yield started
    finally:
        cluster = None
        started.stop()
        shutil.rmtree(folder, ignore_errors=True)


def backend() -> str:
    """The store the suite runs on: ``sqlite`` or ``postgresql``."""
    return "sqlite" if cluster is None else "postgresql"


def stored_folders(data_dir: Path) -> list[Path]:
    """The folders that hold what the node on *data_dir* has stored: the
    data folder itself, and on PostgreSQL its database's files."""
    if cluster is None:
        return [data_dir]
    return [data_dir, *cluster.stored_folders(data_dir)]


def node_env(data_dir: Path) -> dict[str, str]:
    """What a node started as a subprocess on *data_dir* needs in its
    environment to use the suite's store (nothing on SQLite)."""
    if cluster is None:
        return {}
    return {"MESH_DATABASE_URL": cluster.url_for(data_dir)}


#: the session's migrated SQLite store (:func:`sqlite_template`), while the
#: suite runs on SQLite
_sqlite_template: Path | None = None


@contextlib.contextmanager
def sqlite_template() -> Iterator[Path]:
    """For the SQLite run's session: a SQLite store the store's own code
    (``Database.open``: every migration) brought to the newest revision,
    what a node's new store is a copy of (:class:`SeededDatabase`), as on
    PostgreSQL; removed at the end."""
    global _sqlite_template
    import trio

    folder = Path(tempfile.mkdtemp(prefix="mesh-sqlite-template-"))
    path = folder / "mesh.db"

    async def migrate() -> None:
        db = Database(f"sqlite:///{path}")
        await db.open()
        await db.close()

    try:
        trio.run(migrate)  # (a session fixture's setup: outside any test's run)
        # closed: the write-ahead log was written back and removed with the
        # last connection; the file alone is the store
        assert not path.with_name("mesh.db-wal").exists(), "the template's log was left"
        _sqlite_template = path
        yield path
    finally:
        _sqlite_template = None
        shutil.rmtree(folder, ignore_errors=True)


class SeededDatabase(Database):
    """The node's ``Database``, opening a SQLite store that does not exist
    yet as a copy of the session's :func:`sqlite_template` (at the newest
    revision: opening it runs no migration), so that each of the hundreds
    of nodes the suite makes does not migrate an empty store again (~0.2 s
    of CPU each). The migrations from an empty store stay covered on
    SQLite: by the template, and by the store's own tests
    (``tests/store/``), which make their ``Database`` themselves."""

    async def open(self) -> None:
        if self.backend == "sqlite":
            name = sa.make_url(self.url).database
            if name and name != ":memory:" and not Path(name).exists():
                assert _sqlite_template is not None, "no template: not the SQLite run"
                # whole or not at all (a copy, then a rename)
                partial = f"{name}.seeding"
                shutil.copyfile(_sqlite_template, partial)
                os.replace(partial, name)
        await super().open()
