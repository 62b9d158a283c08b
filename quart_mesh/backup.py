"""``quart-mesh backup`` and ``quart-mesh restore``: a node's data in one file.

A backup is a gzipped tar of:

- ``manifest.json``: the format, the quart-mesh version, when it was taken,
  and each file's size and SHA-256;
- ``mesh.db``: a consistent copy of the SQLite store, made with SQLite's
  online backup (one read transaction: the store as it was at one commit,
  while the node goes on writing; WAL lets both run);
- ``secret.key`` and ``node.key``: the node's token-signing secret and its
  identity key (tokens and the node's DID stay valid after a restore);
- ``uploads/<name>``: every uploaded file, copied after the store, so every
  upload the copy of the store names is there (a file is put in place
  before its row is written, and never removed once recorded).

Each backup is recorded in the data folder (``backups.json``: its path,
size, SHA-256 and time, :mod:`quart_mesh.integrity`), so that ``quart-mesh
check`` can say how old the newest good one is.

Taken from a running or a stopped node; the node is not paused. Restored
only into an empty (or missing) data folder, with the node stopped; every
file is checked against the manifest before it is written, names are taken
from an allow-list (no path from the archive is trusted), and only regular
files are read. PostgreSQL stores are backed up with ``pg_dump``: see
docs/operations.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import io
import json
import os
import sqlite3
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import sqlalchemy as sa

from ._version import __version__
from .config import Settings
from .data_folder import replace_durably
from .errors import ConfigError
from .identity import KEY_FILE
from .integrity import BackupRecord, record_backup, sha256_of
from .security import SECRET_FILE
from .services.uploads import STORED_NAME

__all__ = ["BackupError", "BackupSummary", "backup", "restore"]

FORMAT = "quart-mesh-backup/1"
DB_NAME = "mesh.db"
MANIFEST = "manifest.json"
SECRETS = (SECRET_FILE, KEY_FILE)
#: a manifest is small; a larger one is not a backup of ours
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
_CHUNK = 1024 * 1024


class BackupError(Exception):
    """The backup or restore cannot be done; the message says why."""


@dataclasses.dataclass(frozen=True, slots=True)
class BackupSummary:
    #: the backup file (``None``: standard input or output)
    path: Path | None
    uploads: int
    bytes: int
    #: uploads the store names whose files were gone (``allow_missing_uploads``)
    missing_uploads: int = 0
    #: the archive's SHA-256 (``backup``)
    sha256: str = ""
    #: why the backup, written, is not in the data folder's record ("": it is)
    unrecorded: str = ""


class _Hashing:
    """A file object that passes what is written to *raw* and hashes it on
    the way (the archive's SHA-256 without reading it again)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()


def _sqlite_path(settings: Settings) -> Path:
    url = sa.make_url(settings.resolved_database_url)
    if url.get_backend_name() != "sqlite":
        raise BackupError(
            "the store is not SQLite: back it up with pg_dump, and the data folder's"
            " secret.key, node.key and uploads with it (docs/operations.md)"
        )
    if not url.database or url.database == ":memory:":
        raise BackupError("the SQLite store has no file to back up")
    return Path(url.database)


def _copy_store(source: Path, target: Path) -> None:
    """A consistent copy of the live store at *source* (SQLite's online
    backup, all pages in one step: one read transaction), checked."""
    if not source.is_file():
        raise BackupError(f"no store at {source}")
    src = sqlite3.connect(source, timeout=30)
    try:
        dst = sqlite3.connect(target)
        try:
            src.backup(dst)
            dst.execute("PRAGMA journal_mode=DELETE")
            _check_store(dst, "the copy of the store")
        finally:
            dst.close()
    finally:
        src.close()


def backup(
    settings: Settings, output: Path | None, *, allow_missing_uploads: bool = False
) -> BackupSummary:
    """Write a backup of the node whose data *settings* name to *output* (a
    new file, mode 0600: written under a temporary name, synced, renamed),
    or with ``None`` to standard output.

    Uploads the store names but whose files are gone make it fail, unless
    *allow_missing_uploads* (then they are listed in the manifest's
    ``missingUploads`` and counted in the summary).

    Raises:
        BackupError: the store is not SQLite, a file is missing or unreadable,
            *output* exists or cannot be written.
    """
    if output is None and sys.stdout.isatty():
        raise BackupError("not writing a backup to a terminal: redirect it to a file")
    try:
        return _backup(settings, output, allow_missing_uploads)
    except (OSError, sqlite3.Error, tarfile.TarError) as error:
        raise BackupError(f"cannot back up: {error}") from None


def _backup(settings: Settings, output: Path | None, allow_missing: bool) -> BackupSummary:
    store = _sqlite_path(settings)
    data_dir = settings.data_dir
    if output is not None and output.exists():
        raise BackupError(f"{output} exists already")
    for name in SECRETS:
        if not (data_dir / name).is_file():
            raise BackupError(f"{data_dir / name} is missing: is {data_dir} a node's data folder?")
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
    # the store's copy beside the output, or in the data folder (not a
    # small /tmp): both hold a store's size already
    scratch = output.parent if output is not None else data_dir
    with tempfile.TemporaryDirectory(prefix=".backup-", dir=scratch) as tmp:
        os.chmod(tmp, 0o700)
        copy = Path(tmp) / DB_NAME
        _copy_store(store, copy)  # the store first: then every upload it names exists
        uploads_dir = settings.resolved_uploads_dir
        named = _uploads_named(copy)
        missing = [name for name in named if not (uploads_dir / name).is_file()]
        if missing and not allow_missing:
            raise BackupError(
                f"{len(missing)} uploads the store names are not in {uploads_dir}"
                f" (e.g. {missing[0]}): is the uploads folder right (--uploads-dir)?"
                " (--allow-missing-uploads backs up without them)"
            )
        gone = set(missing)
        named = [name for name in named if name not in gone]
        files: list[tuple[str, Path]] = [(DB_NAME, copy)]
        files += [(name, data_dir / name) for name in SECRETS]
        files += [(f"uploads/{name}", uploads_dir / name) for name in named]
        manifest = {
            "format": FORMAT,
            "version": __version__,
            "createdAt": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "missingUploads": missing,
            "files": {
                name: {"size": path.stat().st_size, "sha256": sha256_of(path)}
                for name, path in files
            },
        }
        if output is None:
            stream = _Hashing(sys.stdout.buffer)
            with tarfile.open(fileobj=stream, mode="w|gz") as archive:  # type: ignore[call-overload]
                _write_archive(archive, manifest, files)
            stream.flush()
            done = BackupSummary(None, len(named), stream.size, len(missing))
        else:
            partial = Path(tmp) / "backup.tar.gz"
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as raw:
                stream = _Hashing(raw)
                with tarfile.open(fileobj=stream, mode="w:gz") as archive:  # type: ignore[call-overload]
                    _write_archive(archive, manifest, files)
                raw.flush()
                os.fsync(raw.fileno())
            replace_durably(partial, output)
            done = BackupSummary(output, len(named), stream.size, len(missing))
    return _recorded(data_dir, done, stream.digest.hexdigest(), str(manifest["createdAt"]))


def _recorded(data_dir: Path, done: BackupSummary, sha256: str, created: str) -> BackupSummary:
    """*done*, with its checksum, recorded in the data folder's record of
    backups. The backup is written either way: a record that cannot be
    written is said (``unrecorded``), not a failed backup."""
    path = str(done.path.resolve()) if done.path is not None else None
    record = BackupRecord(path, done.bytes, sha256, datetime.datetime.fromisoformat(created))
    try:
        record_backup(data_dir, record)
    except OSError as error:
        return dataclasses.replace(done, sha256=sha256, unrecorded=str(error))
    return dataclasses.replace(done, sha256=sha256)


def _check_store(db: sqlite3.Connection, what: str) -> None:
    """SQLite's ``quick_check`` of *db*.

    Raises:
        BackupError: it failed (*what* names the store in the message).
    """
    (result,) = db.execute("PRAGMA quick_check").fetchone()
    if result != "ok":
        raise BackupError(f"{what} failed its check: {result}")


def _uploads_named(store: Path) -> list[str]:
    """The stored names of every upload the copy of the store records."""
    db = sqlite3.connect(store)
    try:
        rows = db.execute("SELECT stored_name FROM uploads ORDER BY stored_name").fetchall()
    finally:
        db.close()
    names = [str(name) for (name,) in rows]
    for name in names:
        if not STORED_NAME.fullmatch(name):
            raise BackupError(f"the store names an upload {name!r} that is not a stored name")
    return names


def _write_archive(
    archive: tarfile.TarFile, manifest: dict[str, Any], files: list[tuple[str, Path]]
) -> None:
    body = json.dumps(manifest, indent=2).encode()
    info = tarfile.TarInfo(MANIFEST)
    info.size, info.mtime, info.mode = len(body), int(time.time()), 0o600
    archive.addfile(info, io.BytesIO(body))
    for name, path in files:
        info = archive.gettarinfo(str(path), arcname=name)
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mode = 0o600
        with path.open("rb") as f:
            archive.addfile(info, f)


def _allowed(name: str) -> bool:
    if name in (DB_NAME, *SECRETS):
        return True
    folder, _, rest = name.partition("/")
    return folder == "uploads" and STORED_NAME.fullmatch(rest) is not None


def _members(archive: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    for member in archive:
        if not member.isfile():
            raise BackupError(f"not a backup: {member.name!r} is not a regular file")
        yield member


def _read_manifest(archive: tarfile.TarFile, member: tarfile.TarInfo) -> dict[str, Any]:
    if member.name != MANIFEST or member.size > MAX_MANIFEST_BYTES:
        raise BackupError("not a backup: it does not begin with its manifest")
    f = archive.extractfile(member)
    assert f is not None
    try:
        manifest = json.loads(f.read())
    except ValueError:
        raise BackupError("not a backup: its manifest is not JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"not a backup of this format (expected {FORMAT})")
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(k, str) and isinstance(v, dict) for k, v in files.items()
    ):
        raise BackupError("not a backup: its manifest lists no files")
    for name in (DB_NAME, *SECRETS):
        if name not in files:
            raise BackupError(f"the backup has no {name}")
    for name in files:
        if not _allowed(name):
            raise BackupError(f"not a backup: it names an unexpected file {name!r}")
    return manifest


def _write_checked(source: IO[bytes], target: Path, expected: dict[str, Any]) -> None:
    digest = hashlib.sha256()
    size = 0
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        while chunk := source.read(_CHUNK):
            size += len(chunk)
            if size > expected.get("size", -1):
                raise BackupError(f"{target.name} is larger than its manifest says")
            digest.update(chunk)
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    if size != expected.get("size") or digest.hexdigest() != expected.get("sha256"):
        raise BackupError(f"{target.name} does not match its manifest (damaged backup?)")


def restore(archive_path: Path | None, settings: Settings) -> BackupSummary:
    """Restore the backup at *archive_path* (``None``: read from standard
    input) into the empty data folder (and uploads folder) *settings* name,
    the SQLite store at its default place. On failure, what it wrote and the
    folders it made are removed again.

    Raises:
        BackupError: the folder is not empty, the file is not a sound backup.
        ConfigError: *settings* name a store that is not the data folder's SQLite.
    """
    data_dir = settings.data_dir
    if settings.database_url:
        raise ConfigError("restore writes the data folder's own SQLite store: omit --database-url")
    uploads_dir = settings.resolved_uploads_dir
    for folder in {data_dir, uploads_dir}:
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise BackupError(f"{folder} is not empty: restore only into an empty folder")
    if archive_path is not None and not archive_path.is_file():
        raise BackupError(f"no backup at {archive_path}")
    if archive_path is None and sys.stdin.isatty():
        raise BackupError("not reading a backup from a terminal: redirect a file to it")
    made: list[Path] = []  # folders made here, outermost first
    written: list[Path] = []
    try:
        for folder in (data_dir, uploads_dir):
            missing = [p for p in (folder, *folder.parents) if not p.exists()]
            made += [p for p in reversed(missing) if p not in made]
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        with (
            tarfile.open(archive_path, "r:gz")
            if archive_path is not None
            else tarfile.open(fileobj=sys.stdin.buffer, mode="r|gz")
        ) as archive:
            files = _extract(archive, data_dir, uploads_dir, written)
        db = sqlite3.connect(data_dir / DB_NAME)
        try:
            _check_store(db, "the restored store")
        finally:
            db.close()
    except (tarfile.TarError, EOFError, OSError, sqlite3.DatabaseError) as error:
        _undo(written, made)
        raise BackupError(f"not a readable backup: {error}") from None
    except BaseException:
        _undo(written, made)
        raise
    uploads = sum(1 for name in files if name.startswith("uploads/"))
    size = archive_path.stat().st_size if archive_path is not None else 0
    return BackupSummary(archive_path, uploads, size)


def _extract(
    archive: tarfile.TarFile, data_dir: Path, uploads_dir: Path, written: list[Path]
) -> dict[str, dict[str, Any]]:
    """Write the archive's files, each checked against its manifest (which
    comes first); *written* gets each path as it is created. The manifest's files."""
    members = _members(archive)
    first = next(members, None)
    if first is None:
        raise BackupError("not a backup: it is empty")
    manifest = _read_manifest(archive, first)
    files: dict[str, dict[str, Any]] = manifest["files"]
    seen: set[str] = set()
    for member in members:
        name = member.name
        if name not in files or name in seen:
            raise BackupError(f"not a backup: {name!r} is not in its manifest, or twice")
        seen.add(name)
        folder, _, rest = name.partition("/")
        target = uploads_dir / rest if folder == "uploads" else data_dir / name
        source = archive.extractfile(member)
        assert source is not None
        written.append(target)
        _write_checked(source, target, files[name])
    if missing := set(files) - seen:
        raise BackupError(f"the backup is missing {sorted(missing)[0]}")
    return files


def _undo(written: list[Path], made: list[Path]) -> None:
    """A failed restore leaves the folders as it found them: the files it
    wrote and the folders it made are removed."""
    for path in written:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    for folder in reversed(made):
        with contextlib.suppress(OSError):
            folder.rmdir()
