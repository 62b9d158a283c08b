"""Uploads (spec §4.16): ``POST /api/upload`` and ``GET /uploads/<name>``.

The upload's body is parsed here, as it streams in, with werkzeug's sans-IO
multipart decoder: Quart's ``request.files`` would buffer the whole body
first (in memory, then a spooled temporary file) before anything could be
refused. The file part's bytes go straight on to the service, which writes
them to disk while counting (``docs/decisions/0025-uploads.md``).

Files are served with ``nosniff`` and a sandbox CSP, inline only when passive
(images, PDF, plain text, JSON); anything a browser could run is an
``attachment`` of an inert type (``services.uploads.serving``, decision 0056);
with long-lived cache headers, conditional GET and single byte ranges
(``docs/uploads.md``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterable, AsyncIterator
from email.utils import formatdate
from typing import IO, Any
from urllib.parse import quote

import trio
from quart import Blueprint, Response, jsonify, request
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.http import parse_date, parse_etags, parse_options_header, parse_range_header
from werkzeug.sansio.multipart import Data, Epilogue, Event, File, MultipartDecoder, NeedData

from ..config import Limits
from ..errors import BadRequest, MeshError, PayloadTooLarge, error_body
from ..records import Upload
from ..services.uploads import StoredFile, UploadTimeout, serving
from ._common import caller, node, reply
from .contract import Shape, answers, raw_body
from .objects import Id

__all__ = ["MULTIPART_OVERHEAD", "UPLOAD_PATH", "bp", "upload_body_limit"]

bp = Blueprint("uploads", __name__)

UPLOAD_PATH = "/api/upload"
#: bytes a multipart body may carry besides its file (boundaries, part headers,
#: small extra fields)
MULTIPART_OVERHEAD = 64 * 1024
#: bytes handed to the multipart decoder at a time, and most it may hold
_FEED_BYTES = 64 * 1024
_DECODER_BUFFER = 2 * _FEED_BYTES
#: most parts in one upload body
_MAX_PARTS = 16
#: bytes read from disk per chunk when serving
_SERVE_CHUNK = 64 * 1024

_CACHE_CONTROL = "public, max-age=31536000, immutable"


def upload_body_limit(limits: Limits) -> int:
    """The largest body ``POST /api/upload`` accepts (the app's request class
    raises Quart's body limit to this on that path)."""
    return limits.max_upload_bytes + MULTIPART_OVERHEAD


class UploadView(Shape):
    """The stored file: where it is served, and its detected type."""

    #: the file's URL on this node
    url: str
    #: the client's file name, sanitized
    filename: str
    #: bytes
    size: int
    #: detected from the bytes, not the client's
    content_type: str
    upload_id: Id


@bp.post(UPLOAD_PATH)
@raw_body("multipart/form-data")
@answers(UploadView, 201)
async def upload() -> Any:
    """Upload a file (a multipart/form-data body with a file field named ``file``).

    Below admin, a participant keeps at most ``max_uploads_per_participant``
    files (409 ``too_many_uploads``) of ``upload_quota_bytes`` in all (413
    ``quota_exceeded``).
    """
    try:
        upload = await _receive()
    except MeshError as error:
        # the rest of the body may still be on the wire: close rather than read it
        response = jsonify(error.to_json())
        response.status_code = error.status
        response.headers["Connection"] = "close"
        return response
    base = node().address.url or request.host_url
    return reply(upload.to_json(base), 201)


async def _receive() -> Upload:
    actor = await caller()
    uploads = node().uploads
    limits = node().settings.limits
    length = request.content_length
    await uploads.check_allowed(
        actor, None if length is None else max(0, length - MULTIPART_OVERHEAD)
    )
    mimetype, options = parse_options_header(request.headers.get("Content-Type", ""))
    boundary = options.get("boundary", "")
    if mimetype != "multipart/form-data" or not 1 <= len(boundary) <= 200:
        raise BadRequest(
            "an upload is a multipart/form-data body with a file field named file",
            "invalid_upload",
        )
    try:
        boundary_bytes = boundary.encode("ascii")
    except UnicodeEncodeError:
        raise BadRequest("the multipart boundary must be ASCII", "invalid_upload") from None
    reader = _MultipartFile(request.body, boundary_bytes, upload_body_limit(limits))
    with trio.move_on_after(limits.upload_timeout_seconds) as deadline:
        await reader.start()
    if deadline.cancelled_caught:
        raise UploadTimeout(f"the upload must arrive within {limits.upload_timeout_seconds} s")
    return await uploads.store(
        actor, reader.filename, reader.content_type, reader, most_bytes=length
    )


class _MultipartFile:
    """The bytes of the ``file`` part of a multipart body, as they arrive.

    :meth:`start` reads up to the part; iterating yields its data and, after
    it, reads the rest of the body (other parts are skipped) up to the closing
    boundary, so a truncated or malformed body fails the upload.
    """

    def __init__(self, body: AsyncIterable[bytes], boundary: bytes, limit: int) -> None:
        self._body = body.__aiter__()
        self._decoder = MultipartDecoder(
            boundary, max_form_memory_size=_DECODER_BUFFER, max_parts=_MAX_PARTS
        )
        self._limit = limit
        self._received = 0
        self._backlog: deque[bytes] = deque()
        self._in_file = False
        self._done = False
        self.filename: str | None = None
        self.content_type = ""

    async def start(self) -> None:
        """Read up to the ``file`` part.

        Raises:
            BadRequest: malformed, or no ``file`` part.
            PayloadTooLarge: the body passed its limit.
        """
        while True:  # other parts (and their data) are skipped
            event = await self._next()
            if isinstance(event, File) and event.name == "file":
                self.filename = event.filename
                self.content_type = event.headers.get("Content-Type", "")
                self._in_file = True
                return
            if isinstance(event, Epilogue):
                raise BadRequest("the upload has no file field named file", "missing_file")

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        while self._in_file:
            event = await self._next()
            assert isinstance(event, Data)  # the decoder yields Data until the part ends
            if not event.more_data:
                self._in_file = False
            if event.data:
                return event.data
        while not self._done:
            event = await self._next()
            if isinstance(event, File) and event.name == "file":
                raise BadRequest("an upload carries one file", "invalid_upload")
            if isinstance(event, Epilogue):
                self._done = True
        raise StopAsyncIteration

    async def _next(self) -> Event:
        """The decoder's next event, feeding it the body as it needs."""
        while True:
            try:
                event = self._decoder.next_event()
            except (ValueError, RequestEntityTooLarge):
                raise BadRequest("malformed multipart body", "invalid_upload") from None
            if not isinstance(event, NeedData):
                return event
            await self._feed()

    async def _feed(self) -> None:
        if not self._backlog:
            try:
                chunk = await self._body.__anext__()
            except StopAsyncIteration:
                self._decoder.receive_data(None)
                return
            except RequestEntityTooLarge:
                raise self._too_large() from None
            self._received += len(chunk)
            if self._received > self._limit:
                raise self._too_large()
            # Quart may hand over what it buffered at once: feed it in slices
            view = memoryview(chunk)
            self._backlog.extend(
                bytes(view[i : i + _FEED_BYTES]) for i in range(0, len(chunk), _FEED_BYTES)
            )
            if not self._backlog:
                return
        self._decoder.receive_data(self._backlog.popleft())

    def _too_large(self) -> PayloadTooLarge:
        limit = node().settings.limits.max_upload_bytes
        return PayloadTooLarge(f"a file may be at most {limit} bytes", "upload_too_large")


@bp.get("/uploads/<name>")
async def serve(name: str) -> Response:
    stored = await node().uploads.open(name)
    try:
        return _respond(stored)
    except BaseException:
        stored.file.close()
        raise


def _respond(stored: StoredFile) -> Response:
    """The response for GET or HEAD: 200, 206, 304 or 416 (the body owns the file)."""
    upload, size = stored.upload, stored.size
    etag = f'"{upload.upload_id}"'
    modified_s = upload.created_at // 1000
    headers = {
        "ETag": etag,
        "Last-Modified": formatdate(modified_s, usegmt=True),
        "Cache-Control": _CACHE_CONTROL,
        "X-Content-Type-Options": "nosniff",
    }
    if _not_modified(etag, modified_s):
        stored.file.close()
        return Response(b"", status=304, headers=headers)
    served = serving(upload)
    headers["Content-Security-Policy"] = served.csp
    headers["Content-Disposition"] = _disposition(served.disposition, upload.filename)
    headers["Accept-Ranges"] = "bytes"
    start, length, status = 0, size, 200
    wanted = _byte_range(etag, modified_s, size) if request.method == "GET" else None
    if wanted == "unsatisfiable":
        stored.file.close()
        response = jsonify(error_body("the range is outside the file", "range_not_satisfiable"))
        response.status_code = 416
        response.headers.update(headers)
        del response.headers["Content-Disposition"]
        response.headers["Content-Range"] = f"bytes */{size}"
        return response
    if isinstance(wanted, tuple):
        start, stop = wanted
        length, status = stop - start, 206
        headers["Content-Range"] = f"bytes {start}-{stop - 1}/{size}"
    if request.method == "HEAD":
        stored.file.close()
        response = Response(b"", status=status, headers=headers, content_type=served.content_type)
    else:
        body = _FileChunks(stored.file, start, length)
        response = Response(body, status=status, headers=headers, content_type=served.content_type)
        response.timeout = node().settings.limits.upload_timeout_seconds
    response.headers["Content-Length"] = str(length)
    return response


def _not_modified(etag: str, modified_s: int) -> bool:
    if "If-None-Match" in request.headers:
        etags = parse_etags(request.headers["If-None-Match"])
        return etags.contains_weak(etag.strip('"')) or etags.star_tag
    since = parse_date(request.headers.get("If-Modified-Since"))
    return since is not None and modified_s <= since.timestamp()


def _byte_range(etag: str, modified_s: int, size: int) -> tuple[int, int] | str | None:
    """The one byte range to send (start, stop); ``"unsatisfiable"``; or None
    for the whole file (no Range, a malformed one, several ranges, or an
    ``If-Range`` that no longer matches)."""
    header = request.headers.get("Range")
    if header is None:
        return None
    if_range = request.headers.get("If-Range")
    if if_range is not None:
        if if_range.startswith(('"', "W/")):
            if if_range != etag:  # strong comparison
                return None
        else:
            date = parse_date(if_range)
            if date is None or int(date.timestamp()) != modified_s:
                return None
    parsed = parse_range_header(header)
    if parsed is None or parsed.units != "bytes" or len(parsed.ranges) != 1:
        return None
    found = parsed.range_for_length(size)
    return "unsatisfiable" if found is None else found


def _disposition(kind: str, filename: str) -> str:
    fallback = "".join(ch if 32 <= ord(ch) < 127 and ch not in '"\\;%' else "_" for ch in filename)
    return f"{kind}; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


class _FileChunks:
    """An open file's bytes ``[start, start + length)``, read off the event loop;
    closes the file when done or closed early (Quart calls ``aclose``)."""

    def __init__(self, file: IO[bytes], start: int, length: int) -> None:
        self._file = file
        self._start: int | None = start
        self._left = length

    def __aiter__(self) -> _FileChunks:
        return self

    async def __anext__(self) -> bytes:
        if self._left <= 0 or self._file.closed:
            self._file.close()
            raise StopAsyncIteration
        data = await trio.to_thread.run_sync(self._read, min(_SERVE_CHUNK, self._left))
        if not data:  # the file shrank under us: end early
            self._file.close()
            raise StopAsyncIteration
        self._left -= len(data)
        return data

    def _read(self, size: int) -> bytes:
        if self._start is not None:
            self._file.seek(self._start)
            self._start = None
        return self._file.read(size)

    async def aclose(self) -> None:
        self._file.close()
