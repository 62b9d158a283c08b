"""Integrity: ``quart-mesh check``, the record of backups, and the store's
check at start (decision 0078).

- :func:`check` looks at a node's data without serving it: on SQLite the
  store's ``PRAGMA integrity_check``, on PostgreSQL that the store answers
  and the cluster stream's head is readable; on both that the migrations are
  at the code's head, that the data folder's secrets can be read, that every
  upload the store names is in the uploads folder, and that the newest
  recorded backup still matches its checksum. It reads only, so it may run
  beside a serving node.
- :func:`record_backup` keeps the newest backups' path, size, SHA-256 and
  time in ``<data-dir>/backups.json`` (``quart-mesh backup`` calls it);
  :func:`check` says how old the newest good one is.
- :func:`check_store_at_open` runs SQLite's ``quick_check`` before a node
  opens its store: a node does not serve a store that fails it, and says
  which commands put things right (:class:`~quart_mesh.errors.StoreCorrupt`).

Blocking I/O throughout: a node calls it in a thread.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import json
import os
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import sqlalchemy as sa
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection

from .config import Settings
from .data_folder import replace_durably
from .disk import DiskSpace
from .errors import StoreCorrupt
from .identity import KEY_FILE
from .records import now_ms
from .security import SECRET_FILE
from .store import outbox
from .store.health import code_heads, code_revisions

__all__ = [
    "BACKUPS_FILE",
    "BackupRecord",
    "Finding",
    "Report",
    "check",
    "check_store_at_open",
    "record_backup",
    "recorded_backups",
    "sqlite_file",
]

#: the record of backups, in the data folder
BACKUPS_FILE = "backups.json"
BACKUPS_FORMAT = "quart-mesh-backups/1"
#: backups the record keeps (the newest)
KEEP_BACKUPS = 20
#: problems SQLite's checks list at most
_MAX_PROBLEMS = 20
_CHUNK = 1024 * 1024

_BACKENDS = {"postgresql": "PostgreSQL"}

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing :func:`check` looked at: ``ok``, ``warn`` (worth knowing,
    the node can serve) or ``fail`` (it should not, or data is missing)."""

    name: str
    status: Status
    message: str
    #: figures for machines (``--json``): the newest good backup's, for one
    data: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"name": self.name, "status": self.status, "message": self.message}
        if self.data is not None:
            found.update(self.data)
        return found


@dataclass(frozen=True, slots=True)
class Report:
    """What :func:`check` found, in the order it looked."""

    store: str
    findings: list[Finding]

    @property
    def ok(self) -> bool:
        """Nothing failed (warnings allowed)."""
        return all(finding.status != "fail" for finding in self.findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "store": self.store,
            "findings": [finding.to_json() for finding in self.findings],
        }


@dataclass(frozen=True, slots=True)
class BackupRecord:
    """A backup ``quart-mesh backup`` wrote: where (``None``: standard
    output), how large, its SHA-256, and when it was taken."""

    path: str | None
    size: int
    sha256: str
    created_at: datetime.datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "size": self.size,
            "sha256": self.sha256,
            "createdAt": self.created_at.isoformat(timespec="seconds"),
        }

    @classmethod
    def from_json(cls, item: Any) -> BackupRecord | None:
        """The record of *item*, or ``None`` if it is not one (a damaged or
        hand-edited record is skipped, never an error): ``path`` a string or
        null, ``size`` a whole number of bytes, ``sha256`` a string,
        ``createdAt`` an ISO 8601 time with its offset."""
        if not isinstance(item, dict):
            return None
        path, size, sha256, created_at = (
            item.get("path"),
            item.get("size"),
            item.get("sha256"),
            item.get("createdAt"),
        )
        if path is not None and not isinstance(path, str):
            return None
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            return None
        if not isinstance(sha256, str) or not isinstance(created_at, str):
            return None
        try:
            created = datetime.datetime.fromisoformat(created_at)
        except ValueError:
            return None
        if created.tzinfo is None:
            return None
        return cls(path, size, sha256, created)


def sqlite_file(settings: Settings) -> Path | None:
    """The SQLite store's file, or ``None`` (PostgreSQL, or in memory)."""
    url = sa.make_url(settings.resolved_database_url)
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database)


# -- the record of backups ---------------------------------------------------


@contextlib.contextmanager
def _folder_locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on *folder* itself (two backups at once each
    keep their line of the record; the node's own ``node.lock`` is another file)."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def recorded_backups(data_dir: Path) -> list[BackupRecord]:
    """The backups recorded in *data_dir*, newest first (none if there is
    no record, or it cannot be read)."""
    try:
        document = json.loads((data_dir / BACKUPS_FILE).read_text())
    except (OSError, ValueError, RecursionError):
        return []
    if not isinstance(document, dict) or not isinstance(document.get("backups"), list):
        return []
    records = [BackupRecord.from_json(item) for item in document["backups"]]
    found = [record for record in records if record is not None]
    return sorted(found, key=lambda record: record.created_at, reverse=True)


def record_backup(data_dir: Path, record: BackupRecord) -> None:
    """Add *record* to the record of backups in *data_dir* (the newest
    :data:`KEEP_BACKUPS` are kept), written whole under a temporary name and
    renamed. Run as root on a folder that is not root's (the systemd recipe),
    the file is given the folder's owner, so the node's user can read it.

    Raises:
        OSError: the record cannot be written.
    """
    with _folder_locked(data_dir):
        records = [record, *recorded_backups(data_dir)][:KEEP_BACKUPS]
        body = json.dumps(
            {"format": BACKUPS_FORMAT, "backups": [r.to_json() for r in records]}, indent=2
        )
        fd, temporary = tempfile.mkstemp(dir=data_dir, prefix=f".{BACKUPS_FILE}.")
        try:
            with os.fdopen(fd, "w") as f:  # mkstemp makes it 0600
                f.write(body + "\n")
                f.flush()
                os.fsync(f.fileno())
            folder = data_dir.stat()
            if os.geteuid() == 0 and folder.st_uid != 0:
                os.chown(temporary, folder.st_uid, folder.st_gid)
            replace_durably(Path(temporary), data_dir / BACKUPS_FILE)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)


def sha256_of(path: Path) -> str:
    """The SHA-256 of the file at *path*, hex (read in chunks)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _age(seconds: float) -> str:
    """*seconds* as an operator reads an age: "just now" (under a minute),
    "5 min ago", "3 h 10 min ago", "4 days ago"."""
    if seconds < 60:
        return "just now"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min ago"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min ago" if minutes else f"{hours} h ago"
    return f"{hours // 24} days ago"


def check_backups(data_dir: Path, now: datetime.datetime | None = None) -> Finding:
    """The newest good backup and its age. Backups are looked at newest
    first until one still matches its checksum; one that no longer does
    fails the check (changed or damaged: not a backup to restore), one that
    is gone is only noted (moved off the host, as backups should be). One
    whose file now matches another, older record of the same path is only
    noted too: two backups to one path overlapped and the older one's file
    was renamed into place last (it is then the good backup)."""
    now = now or datetime.datetime.now(datetime.UTC)
    records = recorded_backups(data_dir)
    if not records:
        return Finding(
            "backups", "warn", "none recorded (quart-mesh backup FILE writes one and records it)"
        )
    notes: list[str] = []
    damaged = False
    files: dict[str, tuple[int, str]] = {}  # each path's size and SHA-256, read once

    def found(path: Path) -> tuple[int, str]:
        if str(path) not in files:
            files[str(path)] = (path.stat().st_size, sha256_of(path))
        return files[str(path)]

    for record in records:
        age = _age((now - record.created_at).total_seconds())
        taken = record.created_at.isoformat(timespec="seconds")
        if record.path is None:
            message = (
                f"newest: streamed to standard output {age} ({taken}, sha256 {record.sha256},"
                " not verifiable here)"
            )
            return _backup_finding(damaged, [message, *notes], record, now)
        path = Path(record.path)
        try:
            actual = found(path)
        except FileNotFoundError:
            notes.append(f"{path} ({taken}) is gone")
            continue
        except OSError as error:
            notes.append(f"{path} ({taken}) cannot be read: {error.strerror}")
            continue
        if actual != (record.size, record.sha256):
            if any(
                other.path == record.path and actual == (other.size, other.sha256)
                for other in records
                if other is not record
            ):
                notes.append(f"{path} ({taken}) was replaced by another backup to the same path")
                continue
            damaged = True
            notes.append(
                f"{path} ({taken}) does not match its recorded SHA-256: changed or damaged"
            )
            continue
        message = f"newest good: {path}, taken {age} ({taken})"
        return _backup_finding(damaged, [message, *notes], record, now)
    return Finding(
        "backups", "fail" if damaged else "warn", "no good backup found; " + "; ".join(notes)
    )


def _backup_finding(
    damaged: bool, parts: list[str], newest: BackupRecord, now: datetime.datetime
) -> Finding:
    """The finding when *newest* is the newest good backup (*damaged*: a
    newer one no longer matches its record)."""
    age = int((now - newest.created_at).total_seconds())
    data = {"newestGoodBackup": {**newest.to_json(), "ageSeconds": age}}
    return Finding("backups", "fail" if damaged else "ok", "; ".join(parts), data)


# -- the check at start --------------------------------------------------------


def check_store_at_open(settings: Settings) -> None:
    """Refuse a SQLite store that fails SQLite's ``quick_check`` (a new
    node, with no file yet, passes). A store that cannot be opened for
    another reason (permissions, a full disk) is left to the store's own
    open, which says so.

    Raises:
        StoreCorrupt: the store is damaged; the message names ``quart-mesh
            check``, ``quart-mesh restore`` and the newest recorded backup.
    """
    path = sqlite_file(settings)
    if path is None or not path.is_file():
        return
    try:
        problems = _sqlite_check(path, "quick_check")
    except sqlite3.OperationalError:
        return
    except sqlite3.DatabaseError as error:  # "file is not a database", "malformed"
        problems = [str(error)]
    if problems:
        raise StoreCorrupt(_corrupt_message(settings, path, problems))


def _corrupt_message(settings: Settings, path: Path, problems: list[str]) -> str:
    data_dir = settings.data_dir
    records = recorded_backups(data_dir)
    if not records:
        newest = "no backup is recorded in the data folder"
    else:
        taken = records[0].created_at.isoformat(timespec="seconds")
        where = records[0].path or f"streamed to standard output, sha256 {records[0].sha256}"
        newest = f"the newest recorded backup: {where} ({taken})"
    return (
        f"the store {path} is damaged ({problems[0]}), so the node does not serve it."
        f" 'quart-mesh check --data-dir {data_dir}' says what is wrong;"
        f" 'quart-mesh restore BACKUP --data-dir NEW_FOLDER' restores a backup"
        f" into an empty folder to serve instead ({newest}; docs/operations.md, Backups)"
    )


def _sqlite_check(path: Path, pragma: Literal["quick_check", "integrity_check"]) -> list[str]:
    """The problems SQLite's *pragma* finds in the store at *path* (none: sound).

    Raises:
        sqlite3.DatabaseError: the file is not a database, or is too damaged to read.
    """
    db = sqlite3.connect(path, timeout=30)
    try:
        rows = db.execute(f"PRAGMA {pragma}({_MAX_PROBLEMS})").fetchall()
    finally:
        db.close()
    lines = [str(row[0]) for row in rows]
    return [] if lines == ["ok"] else lines


# -- quart-mesh check ----------------------------------------------------------


def check(settings: Settings, now: datetime.datetime | None = None) -> Report:
    """Look at the node's data that *settings* name (see the module's text).

    Never raises for what it finds; each problem is a finding.
    """
    path = sqlite_file(settings)
    backend = sa.make_url(settings.resolved_database_url).get_backend_name()
    store = "SQLite" if path is not None else _BACKENDS.get(backend, backend)
    findings = _data_folder(settings)
    if settings.data_dir.is_dir():
        findings.append(_disk(settings))
    if path is not None:
        findings += _sqlite_store(settings, path)
    else:
        findings += _server_store(settings)
    if path is not None or (settings.data_dir / BACKUPS_FILE).exists():
        findings.append(check_backups(settings.data_dir, now))
    return Report(store, findings)


def _disk(settings: Settings) -> Finding:
    """The data folder's free space against the node's floor (a warning
    below it: uploads are refused; at none, writes fail too)."""
    disk = DiskSpace(settings.data_dir, settings.disk_floor)
    try:
        free, total, floor = disk.free(), disk.total(), disk.floor()
    except OSError as error:
        return Finding("disk", "warn", f"free space cannot be measured: {error.strerror}")
    data = {"free": free, "total": total, "floor": floor}
    said = f"{free / 1e6:.1f} MB free of {total / 1e6:.1f} MB, floor {floor / 1e6:.1f} MB"
    if free < floor:
        return Finding(
            "disk", "warn", f"{said}: below the floor, uploads are refused (free space)", data
        )
    return Finding("disk", "ok", said, data)


def _data_folder(settings: Settings) -> list[Finding]:
    data_dir = settings.data_dir
    if not data_dir.is_dir():
        return [Finding("data folder", "fail", f"{data_dir} is not a folder (give --data-dir)")]
    found = [
        _key_file(data_dir / SECRET_FILE, least=32),
        _key_file(data_dir / KEY_FILE, least=32, most=32),
    ]
    uploads = settings.resolved_uploads_dir
    if not uploads.exists():
        found.append(Finding("uploads folder", "ok", f"{uploads} not made yet (no upload)"))
    elif not uploads.is_dir() or not os.access(uploads, os.R_OK | os.W_OK | os.X_OK):
        found.append(
            Finding("uploads folder", "fail", f"{uploads} is not a folder this user can use")
        )
    else:
        found.append(Finding("uploads folder", "ok", f"{uploads} readable and writable"))
    return found


def _key_file(path: Path, least: int, most: int | None = None) -> Finding:
    """A secret of the data folder: readable hex of the right length, kept private."""
    try:
        text = path.read_text()
        size = len(bytes.fromhex(text.strip()))
    except FileNotFoundError:
        return Finding(path.name, "fail", f"{path} is missing (a node makes it at first start)")
    except OSError as error:
        return Finding(path.name, "fail", f"{path} cannot be read: {error.strerror}")
    except ValueError:
        return Finding(path.name, "fail", f"{path} does not hold a key (hex)")
    if size < least or (most is not None and size > most):
        return Finding(path.name, "fail", f"{path} holds a key of the wrong length")
    if path.stat().st_mode & 0o077:
        return Finding(path.name, "warn", f"{path} can be read by others: chmod 600 it")
    return Finding(path.name, "ok", "readable")


def _sqlite_store(settings: Settings, path: Path) -> list[Finding]:
    if not path.is_file():
        return [Finding("store", "fail", f"no store at {path} (serve the node once)")]
    try:
        problems = _sqlite_check(path, "integrity_check")
    except sqlite3.DatabaseError as error:
        return [Finding("store", "fail", f"{path}: {error}")]
    if problems:
        listed = "; ".join(problems[:5]) + ("; ..." if len(problems) > 5 else "")
        return [Finding("store", "fail", f"{path} fails SQLite's integrity check: {listed}")]
    size = path.stat().st_size
    found = [Finding("store", "ok", f"{path}: integrity check ok ({size / 1e6:.1f} MB)")]
    return found + _with_engine(settings, _migrations_and_uploads)


def _server_store(settings: Settings) -> list[Finding]:
    return _with_engine(settings, _server_checks)


def _server_checks(conn: Connection, settings: Settings) -> list[Finding]:
    where = sa.make_url(settings.resolved_database_url).render_as_string(hide_password=True)
    found = [Finding("store", "ok", f"{where} answers")]
    migrations = _migrations(conn)
    found.append(migrations)
    if migrations.status == "ok":  # the stream's tables are the code's
        found += [_uploads(conn, settings), _stream(conn)]
    elif migrations.status == "warn":
        found.append(_uploads(conn, settings))
    return found


def _with_engine(
    settings: Settings, run: Callable[[Connection, Settings], list[Finding]]
) -> list[Finding]:
    """``run(conn, settings)`` on a connection to the store, or a finding
    that it cannot be reached."""
    url = sa.make_url(settings.resolved_database_url)
    args: dict[str, Any] = {}
    if url.get_backend_name() == "postgresql":
        args["connect_timeout"] = 10
    engine = sa.create_engine(url, connect_args=args, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return run(conn, settings)
    except sa.exc.DBAPIError as error:
        cause = str(error.orig).strip().splitlines()[0] if error.orig else str(error)
        return [Finding("store", "fail", f"the store cannot be read: {cause}")]
    finally:
        engine.dispose()


def _migrations_and_uploads(conn: Connection, settings: Settings) -> list[Finding]:
    found = [_migrations(conn)]
    if found[0].status != "fail":
        found.append(_uploads(conn, settings))
    return found


def _migrations(conn: Connection) -> Finding:
    heads = code_heads()
    head = ", ".join(sorted(heads))
    current = set(MigrationContext.configure(conn).get_current_heads())
    if not current:
        return Finding("migrations", "fail", "none applied: not a node's store")
    if unknown := sorted(current - code_revisions()):
        return Finding(
            "migrations",
            "fail",
            f"the store was migrated by a newer quart-mesh ({', '.join(unknown)});"
            f" this one knows up to {head} (docs/upgrading.md)",
        )
    if current == heads:
        return Finding("migrations", "ok", f"at the code's head ({head})")
    at = ", ".join(sorted(current))
    return Finding(
        "migrations",
        "warn",
        f"at {at}, behind the code's head ({head}): the next start applies the rest",
    )


def _uploads(conn: Connection, settings: Settings) -> Finding:
    """Every upload the store names has its file in the uploads folder."""
    folder = settings.resolved_uploads_dir
    names = conn.execute(sa.text("SELECT stored_name FROM uploads")).scalars().all()
    missing = [name for name in names if not (folder / str(name)).is_file()]
    if missing:
        return Finding(
            "uploads",
            "fail",
            f"{len(missing)} of the {len(names)} uploads the store names are not in {folder}"
            f" (e.g. {missing[0]}): is the uploads folder right (--uploads-dir)?",
        )
    return Finding("uploads", "ok", f"all {len(names)} uploads the store names are in {folder}")


def _stream(conn: Connection) -> Finding:
    """The cluster stream's head is known and its newest rows can be read."""
    head = conn.execute(sa.text("SELECT max(position) FROM cluster_stream")).scalar_one()
    rows = conn.execute(
        sa.text("SELECT position, body FROM cluster_stream ORDER BY position DESC LIMIT 100")
    ).all()
    unreadable = []
    for position, body in rows:
        try:
            outbox.decode(body)
        except (ValueError, KeyError, TypeError, AttributeError):
            unreadable.append(int(position))
    serving = conn.execute(
        sa.text("SELECT count(*) FROM cluster_processes WHERE beat_at > :since"),
        {"since": now_ms() - 60_000},
    ).scalar_one()
    if unreadable:
        return Finding(
            "stream",
            "fail",
            f"head {head}; {len(unreadable)} of its newest {len(rows)} rows cannot be read"
            f" (e.g. position {unreadable[0]}): written by another version?",
        )
    return Finding(
        "stream",
        "ok",
        f"head {int(head or 0)}, its newest {len(rows)} rows readable;"
        f" {serving} processes beat in the last minute",
    )
