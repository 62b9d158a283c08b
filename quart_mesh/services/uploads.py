"""Uploads: store a file streamed in, find it to serve, resolve attachments.

A file arrives as an async stream of chunks (the transport has already taken
it out of its multipart envelope). It is written, while counted, to a
temporary file in the uploads folder (``<data_dir>/uploads/``, or
``MESH_UPLOADS_DIR``) and refused (413) as soon as it passes the limit, so
memory use does not depend on the file's size. Once complete, its type is
detected from its first bytes (the client's claim can only make it stricter,
never more trusted: ``docs/uploads.md``), it is synced to disk, renamed to a
server-chosen name (the lower-cased upload id and an extension of the
detected type) and recorded in the store. The client's file name is
metadata only: sanitized, stored, shown; never a path.

Several processes and hosts may share the folder (``docs/decisions/0037``):
every file is written under a name no other writer uses and moved into place
with one atomic ``os.replace`` before its row is committed, and a file is
only ever looked for once its row exists, so whoever finds the row finds
the whole file. Nothing about uploads is kept in memory: each process asks
the store.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import time
import unicodedata
from collections.abc import AsyncIterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, ClassVar
from urllib.parse import urlsplit

import trio
from sqlalchemy.engine import Connection

from ..config import Limits, Settings
from ..data_folder import replace_durably
from ..disk import DiskSpace, Reservation
from ..errors import (
    BadRequest,
    Conflict,
    InsufficientStorage,
    MeshError,
    NotFound,
    PayloadTooLarge,
)
from ..ids import is_ulid, new_id
from ..records import Upload, now_ms
from ..store import Database
from ..store import uploads as repo
from .authz import Actor, authorize, permitted

__all__ = [
    "CSP_ATTACHMENT",
    "CSP_INLINE",
    "INERT_TYPE",
    "STORED_NAME",
    "Serving",
    "UploadTimeout",
    "Uploads",
    "attachment_refs",
    "sanitize_filename",
    "serving",
    "sniff",
]

log = logging.getLogger(__name__)

#: bytes of a file looked at to detect its type
SNIFF_BYTES = 64 * 1024
#: bytes gathered before one write to disk (one thread hop per write)
_WRITE_BATCH = 256 * 1024
#: a temporary file untouched for this long (seconds; at least twice
#: ``upload_timeout_seconds``) is left over from a crash, not another
#: process's upload in progress
_STALE_PARTIAL_SECONDS = 3600
_PARTIAL_PREFIX = ".partial-"

#: what every file a browser could run is served as: no browser runs,
#: renders or sniffs it (under ``nosniff``), as a script, a worker, a module,
#: WebAssembly or a document (decision 0056)
INERT_TYPE = "application/octet-stream"

#: detected type -> (extension, Content-Type stored and served)
_TYPES: dict[str, tuple[str, str]] = {
    "png": ("png", "image/png"),
    "jpeg": ("jpg", "image/jpeg"),
    "gif": ("gif", "image/gif"),
    "webp": ("webp", "image/webp"),
    "pdf": ("pdf", "application/pdf"),
    "zip": ("zip", "application/zip"),
    "text": ("txt", "text/plain; charset=utf-8"),
    "json": ("json", "application/json"),
    # what a browser would run as script or as a document that runs script:
    # the extension keeps what it is, the type is inert
    "html": ("html", INERT_TYPE),
    "svg": ("svg", INERT_TYPE),
    "xml": ("xml", INERT_TYPE),
    "js": ("js", INERT_TYPE),
    "wasm": ("wasm", INERT_TYPE),
    "binary": ("bin", INERT_TYPE),
}
#: (extension, Content-Type) of the files served ``inline``: these only.
#: Anything else, a row recorded before decision 0056 included (``js`` as
#: ``text/javascript``, say), is an attachment of an inert type.
_INLINE = frozenset(_TYPES[kind] for kind in ("png", "jpeg", "gif", "webp", "pdf", "text", "json"))
#: (extension, Content-Type) of attachments that keep their own type
_OWN_TYPE = frozenset({_TYPES["zip"]})
#: the policy of every file served: a sandbox (no script, an opaque origin)
#: whether the browser shows it or not
CSP_ATTACHMENT = "sandbox; default-src 'none'"
CSP_INLINE = (
    "sandbox; default-src 'none'; img-src 'self'; media-src 'self'; style-src 'unsafe-inline'"
)
#: every name the node gives a file: nothing else reaches the filesystem
_EXTENSIONS = "|".join(sorted({ext for ext, _ in _TYPES.values()}))
STORED_NAME = re.compile(rf"[0-9a-hjkmnp-tv-z]{{26}}\.(?:{_EXTENSIONS})")

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x00asm", "wasm"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"\xff\xd8\xff", "jpeg"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"%PDF-", "pdf"),
    (b"PK\x03\x04", "zip"),
    (b"PK\x05\x06", "zip"),
    (b"PK\x07\x08", "zip"),
)
# the WHATWG sniffing table's HTML openers (as lower-case prefixes)
_HTML_OPENERS = (
    b"<!doctype html",
    b"<html",
    b"<head",
    b"<body",
    b"<script",
    b"<iframe",
    b"<h1",
    b"<div",
    b"<font",
    b"<table",
    b"<a",
    b"<style",
    b"<title",
    b"<b",
    b"<br",
    b"<p",
    b"<!--",
    b"<meta",
    b"<img",
    b"<svg",
    b"<object",
    b"<embed",
    b"<form",
)
#: what may follow an opener for it to be a tag (end of the file included)
_TAG_ENDS = (b"", b" ", b">", b"/", b"\t", b"\n", b"\r", b"\x0c")
# every JavaScript MIME type essence (WHATWG MIME Sniffing, section 4.6)
_JS_TYPES = (
    "application/ecmascript",
    "application/javascript",
    "application/x-ecmascript",
    "application/x-javascript",
    "text/ecmascript",
    "text/javascript",
    "text/javascript1.0",
    "text/javascript1.1",
    "text/javascript1.2",
    "text/javascript1.3",
    "text/javascript1.4",
    "text/javascript1.5",
    "text/jscript",
    "text/livescript",
    "text/x-ecmascript",
    "text/x-javascript",
    "module",
)
_CLAIMS: tuple[tuple[tuple[str, ...], tuple[str, ...], str], ...] = (
    # (client Content-Types, file-name endings, kind) — claims that make a text stricter
    (
        ("text/html", "application/xhtml+xml"),
        (".html", ".htm", ".xhtml", ".xht", ".shtml", ".mht", ".mhtml"),
        "html",
    ),
    (("image/svg+xml",), (".svg", ".svgz"), "svg"),
    (
        (
            "application/xml",
            "text/xml",
            "application/xslt+xml",
            "text/xsl",
            "application/rss+xml",
            "application/atom+xml",
            "application/rdf+xml",
        ),
        (".xml", ".xsl", ".xslt", ".rss", ".atom", ".rdf"),
        "xml",
    ),
    (_JS_TYPES, (".js", ".mjs", ".cjs", ".jsm", ".jsx"), "js"),
    (("application/wasm",), (".wasm",), "wasm"),
)


@dataclass(frozen=True, slots=True)
class Serving:
    """How an upload is served: its ``Content-Type``, ``Content-Disposition``
    kind (``inline`` or ``attachment``) and ``Content-Security-Policy``."""

    content_type: str
    disposition: str
    csp: str


def serving(upload: Upload) -> Serving:
    """How *upload* is served, decided from its stored name's extension and
    its recorded type together: ``inline`` only for the known passive pairs
    (images, PDF, plain text, JSON); everything else an ``attachment`` of an
    inert type (ZIP keeps its own). Every answer is sandboxed (decision 0056)."""
    ext = upload.stored_name.rsplit(".", 1)[-1]
    pair = (ext, upload.content_type)
    if pair in _INLINE:
        return Serving(upload.content_type, "inline", CSP_INLINE)
    content_type = upload.content_type if pair in _OWN_TYPE else INERT_TYPE
    return Serving(content_type, "attachment", CSP_ATTACHMENT)


def sniff(head: bytes, size: int, claimed_type: str, filename: str) -> tuple[str, str]:
    """Detect a file's type from its first bytes (*head*, up to :data:`SNIFF_BYTES`).

    Binary formats are known by their magic bytes whatever the client says
    (WebAssembly too). A text file is plain text, JSON, HTML, SVG or XML by
    its content; if the client *claims* (by Content-Type or file name) that
    it is HTML, SVG, XML, JavaScript or WebAssembly, it is treated as such,
    since that is only stricter. Anything else is ``application/octet-stream``.
    What a browser could run is recorded as ``application/octet-stream``
    under its own extension (``js``, ``html``...).

    Returns:
        ``(extension, Content-Type)``.
    """
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return _TYPES[kind]
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return _TYPES["webp"]
    text_kind = _text_kind(head, complete=size <= len(head))
    if text_kind is None:
        return _TYPES["binary"]
    claimed = claimed_type.split(";", 1)[0].strip().lower()
    lowered = filename.lower()
    for types, endings, claim in _CLAIMS:
        if text_kind not in ("html", "svg") and (claimed in types or lowered.endswith(endings)):
            return _TYPES[claim]
    return _TYPES[text_kind]


def _text_kind(head: bytes, *, complete: bool) -> str | None:
    """``text``, ``json``, ``html``, ``svg`` or ``xml`` if *head* is UTF-8 text; else None."""
    body = head.removeprefix(b"\xef\xbb\xbf")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        # a character cut at the end of the window is still text
        if complete or error.start < len(body) - 3:
            return None
        text = body[: error.start].decode("utf-8")
    if any(ch in text for ch in "\x00\x7f") or any(
        ord(ch) < 32 and ch not in "\t\n\r\f\x1b" for ch in text
    ):
        return None
    stripped = text.lstrip().lower().encode()
    if stripped.startswith(b"<?xml") or stripped.startswith(b"<!doctype svg"):
        return "svg" if b"<svg" in stripped else "xml"
    for opener in _HTML_OPENERS:
        if stripped.startswith(opener):
            after = stripped[len(opener) : len(opener) + 1]
            if opener == b"<!--" or after in _TAG_ENDS:
                return "svg" if opener == b"<svg" else "html"
    if stripped.startswith(b"<") and b"<svg" in stripped:
        return "svg"
    if complete and stripped[:1] in (b"{", b"["):
        try:
            json.loads(text)
        except ValueError:
            pass
        else:
            return "json"
    return "text"


def sanitize_filename(name: str | None) -> str:
    """The client's file name as metadata: its last path segment, without
    control characters, at most 255 characters; ``file`` if nothing is left."""
    name = unicodedata.normalize("NFC", name or "")
    name = re.split(r"[/\\]", name)[-1]
    name = "".join(ch for ch in name if unicodedata.category(ch)[0] != "C")
    name = name.strip().strip(".").strip()
    return name[:255] or "file"


def attachment_refs(value: object, limits: Limits) -> tuple[tuple[str, str | None], ...]:
    """Parse a message's ``attachments``: a list of upload ids, upload URLs
    (``http(s)://<host>/uploads/<name>``) or paths (``/uploads/<name>``).

    Returns:
        ``(upload_id, stored_name or None)`` per distinct upload, in order.

    Raises:
        BadRequest: not such a list (``invalid_attachments``).
    """
    if value is None:
        return ()
    if not isinstance(value, list):
        raise BadRequest("attachments must be a list of upload URLs or ids", "invalid_attachments")
    if len(value) > limits.max_attachments:
        raise BadRequest(
            f"a message may carry at most {limits.max_attachments} attachments",
            "invalid_attachments",
        )
    refs: dict[str, str | None] = {}
    for item in value:
        if not isinstance(item, str) or len(item) > 2048:
            raise BadRequest("each attachment must be an upload URL or id", "invalid_attachments")
        if is_ulid(item):
            refs.setdefault(item, None)
            continue
        try:
            parts = urlsplit(item)
        except ValueError:
            parts = None
        name = parts.path.removeprefix("/uploads/") if parts is not None else ""
        if (
            parts is None
            or parts.scheme not in ("", "http", "https")
            or bool(parts.scheme) != bool(parts.netloc)
            or not parts.path.startswith("/uploads/")
            or parts.query
            or parts.fragment
            or not STORED_NAME.fullmatch(name)
        ):
            raise BadRequest(
                "each attachment must be an upload URL or id of this node", "invalid_attachments"
            )
        refs.setdefault(name[:26].upper(), name)
    return tuple(refs.items())


def resolve_attachments(
    conn: Connection, refs: Sequence[tuple[str, str | None]]
) -> tuple[Upload, ...]:
    """The uploads *refs* name, in order (inside a store transaction).

    Raises:
        BadRequest: one names no upload on this node (``unknown_attachment``).
    """
    found = repo.get_many(conn, [upload_id for upload_id, _ in refs])
    uploads = []
    for upload_id, name in refs:
        upload = found.get(upload_id)
        if upload is None or (name is not None and upload.stored_name != name):
            raise BadRequest("an attachment names no upload on this node", "unknown_attachment")
        uploads.append(upload)
    return tuple(uploads)


class UploadTimeout(MeshError):
    """The upload did not arrive within ``upload_timeout_seconds``."""

    status: ClassVar[int] = 408
    default_code: ClassVar[str] = "request_timeout"


@dataclass(frozen=True, slots=True)
class StoredFile:
    """An upload to serve: its record and an open file (the caller closes it)."""

    upload: Upload
    file: IO[bytes]
    size: int


class Uploads:
    """Receives, records and finds uploaded files.

    Owns the uploads folder (``settings.resolved_uploads_dir``, mode 0700;
    files 0600), shared with the mesh's other processes and hosts.
    """

    def __init__(
        self,
        settings: Settings,
        db: Database,
        *,
        disk: DiskSpace | None = None,
        uploads_disk: DiskSpace | None = None,
    ) -> None:
        self._limits = settings.limits
        #: the data folder: below its floor, uploads are refused (507)
        self._disk = disk
        #: the uploads folder's filesystem, where each upload is promised its
        #: room (the data folder's when the uploads folder is not elsewhere)
        self._files_disk = uploads_disk if uploads_disk is not None else disk
        self._quota = max(0, settings.upload_quota_bytes)
        self._db = db
        self.directory = settings.resolved_uploads_dir
        self._stale_after = max(_STALE_PARTIAL_SECONDS, 2 * self._limits.upload_timeout_seconds)
        self._prepared = False

    async def prepare(self) -> None:
        """Create the folder if needed and remove temporary files left by a
        crash (of this process or another: one untouched for longer than an
        upload may take)."""
        await trio.to_thread.run_sync(self._prepare_sync)

    @property
    def files_disk(self) -> DiskSpace | None:
        """The free space uploads are promised room in: the uploads folder's
        filesystem (the data folder's, once :meth:`prepare` found it the same)."""
        return self._files_disk

    def _prepare_sync(self) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        disk = self._disk
        if disk is not None and self._files_disk is not disk:
            with contextlib.suppress(OSError):  # unknown: both are measured
                if os.stat(self.directory).st_dev == os.stat(disk.folder).st_dev:
                    self._files_disk = disk  # one filesystem: one floor, one set of promises
        cutoff = time.time() - self._stale_after
        for path in self.directory.glob(_PARTIAL_PREFIX + "*"):
            with contextlib.suppress(OSError):
                if path.stat().st_mtime < cutoff:
                    path.unlink()
        self._prepared = True

    async def check_allowed(self, actor: Actor, declared_bytes: int | None = None) -> None:
        """Refuse early, before a body is read: permission, and (if the client
        declared a length) size limit and quota. *declared_bytes* is the least
        the file can be: the body's length less what a multipart envelope may add.

        Raises:
            Forbidden: the role may not upload.
            PayloadTooLarge: the file cannot fit the limit or the quota.
            InsufficientStorage: free disk space is below the node's floor.
        """
        authorize(actor, "files.upload")
        self._require_room(declared_bytes or 0)
        if declared_bytes is None:
            return
        if declared_bytes > self._limits.max_upload_bytes:
            raise self._too_large()
        left = await self._quota_left(actor)
        if left is not None and declared_bytes > left:
            raise self._over_quota(left)

    async def store(
        self,
        actor: Actor,
        filename: str | None,
        claimed_type: str,
        chunks: AsyncIterable[bytes],
        *,
        most_bytes: int | None = None,
    ) -> Upload:
        """Write the file streamed in *chunks* and record it.

        The stream is read to its end (the transport may check what follows
        the file then). Nothing is left on disk if this fails or is cancelled:
        the partial file is removed at once.

        The upload is promised room on the uploads folder's filesystem for as
        many bytes as it may have (*most_bytes*, the body's length when the
        client declared it, else the limit or the quota left), and refused
        unless that room is there above the floor, less what uploads in
        progress were promised; free space is measured again before each
        write to disk, and the upload refused once it would go below.

        Raises:
            Forbidden: the role may not upload.
            PayloadTooLarge: over ``max_upload_bytes`` or the actor's quota.
            UploadTimeout: the stream took longer than ``upload_timeout_seconds``.
            BadRequest: the stream was malformed (raised by *chunks*).
            InsufficientStorage: no room for it above the floor, or the disk full.
        """
        authorize(actor, "files.upload")
        left = await self._quota_left(actor)
        cap = (
            self._limits.max_upload_bytes
            if left is None
            else min(left, self._limits.max_upload_bytes)
        )
        promise = cap if most_bytes is None else max(0, min(cap, most_bytes))
        self._require_room(promise)
        if not self._prepared:
            await self.prepare()
        if self._files_disk is None:
            return await self._write(actor, filename, claimed_type, chunks, cap, left, None)
        with self._files_disk.reserve("uploads", promise) as room:
            return await self._write(actor, filename, claimed_type, chunks, cap, left, room)

    async def _write(
        self,
        actor: Actor,
        filename: str | None,
        claimed_type: str,
        chunks: AsyncIterable[bytes],
        cap: int,
        left: int | None,
        room: Reservation | None,
    ) -> Upload:
        """Write and record the file (:meth:`store`), within *cap* bytes,
        checking *room* before each write."""
        upload_id = new_id()
        temp = self.directory / f"{_PARTIAL_PREFIX}{upload_id.lower()}"
        final: Path | None = None
        out = await trio.to_thread.run_sync(_create_private, temp)

        async def write(data: bytes) -> None:
            if room is not None:
                room.check(len(data))
            await trio.to_thread.run_sync(_write, out, data)
            if room is not None:
                room.wrote(len(data))

        try:
            size = 0
            head = bytearray()
            pending = bytearray()
            with trio.move_on_after(self._limits.upload_timeout_seconds) as deadline:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > cap:
                        raise (
                            self._too_large()
                            if left is None or cap < left
                            else self._over_quota(left)
                        )
                    if len(head) < SNIFF_BYTES:
                        head += chunk[: SNIFF_BYTES - len(head)]
                    pending += chunk
                    if len(pending) >= _WRITE_BATCH:
                        await write(bytes(pending))
                        pending.clear()
            if deadline.cancelled_caught:
                raise UploadTimeout(
                    f"the upload must arrive within {self._limits.upload_timeout_seconds} s"
                )
            if pending:
                await write(bytes(pending))
            # on disk (on every host) before the row that lets others find it
            await trio.to_thread.run_sync(_sync_and_close, out)
            name = sanitize_filename(filename)
            ext, content_type = sniff(bytes(head), size, claimed_type, name)
            upload = Upload(
                upload_id=upload_id,
                stored_name=f"{upload_id.lower()}.{ext}",
                filename=name,
                content_type=content_type,
                size=size,
                uploader_id=actor.participant_id,
                created_at=now_ms(),
            )
            final = self.directory / upload.stored_name
            await trio.to_thread.run_sync(_replace_refusing_full, temp, final)
            await self._db.write(lambda conn: repo.insert_upload(conn, upload))
            final = None  # recorded: keep it
            return upload
        finally:
            try:
                # after a failed write the buffer still holds bytes: closing
                # would flush them and fail again, over the error that matters
                _close_quietly(out)
            finally:
                for path in (temp, final):
                    if path is not None:
                        with contextlib.suppress(OSError):
                            path.unlink()

    def _require_room(self, size: int) -> None:
        """Refuse an upload of *size* bytes while the data folder is below its
        floor, or the uploads folder's filesystem has not *size* bytes to
        spare above it (less what uploads in progress were promised).

        Raises:
            InsufficientStorage: 507.
        """
        if self._disk is not None and self._disk is not self._files_disk:
            self._disk.require_room("uploads")  # the store's room, whatever the file's size
        if self._files_disk is not None:
            self._files_disk.require_room("uploads", size)

    async def open(self, stored_name: str) -> StoredFile:
        """An upload and its open file, by the name it is served under.

        The name is checked against :data:`STORED_NAME` before anything else:
        no other name reaches the store or the filesystem.

        Raises:
            NotFound: no such upload (``upload_not_found``).
        """
        if not STORED_NAME.fullmatch(stored_name):
            raise NotFound("no such upload", "upload_not_found")
        upload = await self._db.read(lambda conn: repo.get_by_name(conn, stored_name))
        if upload is None:
            raise NotFound("no such upload", "upload_not_found")
        path = self.directory / upload.stored_name
        try:
            file, size = await trio.to_thread.run_sync(_open_for_reading, path)
        except FileNotFoundError:
            log.warning("upload %s is recorded but its file is missing", upload.stored_name)
            raise NotFound("no such upload", "upload_not_found") from None
        return StoredFile(upload, file, size)

    async def _quota_left(self, actor: Actor) -> int | None:
        """Bytes the actor may still upload; None if not limited.

        Raises:
            Conflict: the actor keeps ``max_uploads_per_participant`` uploads
                (``too_many_uploads``).
        """
        if permitted(actor, "files.unlimited"):
            return None
        most = self._limits.max_uploads_per_participant

        def read(conn: Connection) -> tuple[int, int]:
            pid = actor.participant_id
            return repo.count_uploads(conn, pid), repo.bytes_used(conn, pid) if self._quota else 0

        count, used = await self._db.read(read)
        if count >= most:
            raise Conflict(
                f"you have uploaded {most} files, the most one participant may keep",
                "too_many_uploads",
            )
        return max(0, self._quota - used) if self._quota else None

    def _too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"a file may be at most {self._limits.max_upload_bytes} bytes", "upload_too_large"
        )

    def _over_quota(self, left: int) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"this file would exceed your upload quota ({left} bytes left)", "quota_exceeded"
        )


def _create_private(path: Path) -> IO[bytes]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
    return os.fdopen(fd, "wb")


def _write(file: IO[bytes], data: bytes) -> None:
    """Write *data* (in a thread).

    Raises:
        InsufficientStorage: the filesystem is full (or the quota reached).
    """
    with _full_disk_refused():
        file.write(data)


def _sync_and_close(file: IO[bytes]) -> None:
    """Flush, sync and close *file* (in a thread).

    Raises:
        InsufficientStorage: the filesystem is full (or the quota reached).
    """
    with _full_disk_refused():
        file.flush()
        os.fsync(file.fileno())
        file.close()  # a network filesystem may only now say it is full


def _close_quietly(file: IO[bytes]) -> None:
    """Close *file* whatever its buffer's flush says (the descriptor is
    closed even when the flush fails): after a write failed, the error the
    client gets is that one."""
    with contextlib.suppress(OSError):
        file.close()


def _replace_refusing_full(source: Path, target: Path) -> None:
    """:func:`replace_durably`, a full disk (a directory that cannot grow)
    being the client's 507."""
    with _full_disk_refused():
        replace_durably(source, target)


@contextlib.contextmanager
def _full_disk_refused() -> Iterator[None]:
    """A full disk while writing an upload is the client's 507, not a bug."""
    try:
        yield
    except OSError as error:
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            raise InsufficientStorage("the node's disk is full: uploads are refused") from None
        raise


def _open_for_reading(path: Path) -> tuple[IO[bytes], int]:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0))
    file = os.fdopen(fd, "rb")
    return file, os.fstat(file.fileno()).st_size
