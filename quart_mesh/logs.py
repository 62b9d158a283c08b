"""The node's log: its format, the access log, request ids.

Everything goes through the standard :mod:`logging` module to stderr, as
text (``2026-11-26 14:03:08,279 INFO quart_mesh: ...``) or, with
``--log-format json`` (``MESH_LOG_FORMAT``), as one JSON object a line with
the record's fields (``time``, ``level``, ``logger``, ``message``, the
access fields below, ``exception`` with the traceback if there is one).

The access log is the logger ``quart_mesh.access`` at INFO: one record per
HTTP request answered by the app (:func:`log_request`) and, for each
WebSocket session that authenticated, one when it starts and one when it
ends (:func:`log_session`). Its fields are
what :data:`ACCESS_FIELDS` lists; never a token, a password, a key, a query
string or a body. Silence it with a logging config that sets that logger's
level to WARNING.

A request id names each request: the client's (or proxy's) ``X-Request-Id``
if it is a plain token of at most 64 characters, otherwise one made here. It
is sent back in ``X-Request-Id``, written in the access log, and given in
the body of a 500 answer, so a report can be matched to the log.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import datetime
import json
import logging
import logging.handlers
import queue
import re
import secrets
import sys
from typing import Any, Final

__all__ = [
    "ACCESS",
    "ACCESS_FIELDS",
    "LOG_FORMATS",
    "JsonFormatter",
    "configure_logging",
    "flush_logging",
    "log_request",
    "log_session",
    "request_id_from",
]

ACCESS: Final = logging.getLogger("quart_mesh.access")

#: the fields of access records (besides the message): what a JSON line carries
ACCESS_FIELDS: Final = (
    "method",
    "route",
    "status",
    "duration_ms",
    "participant_id",
    "client",
    "request_id",
    "session_id",
    "event",
    "reason",
)

LOG_FORMATS: Final = ("text", "json")

_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")

#: attributes every LogRecord has: the rest came as ``extra``
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


def request_id_from(header: str | None) -> str:
    """The id of a request whose ``X-Request-Id`` header is *header*: the
    header if it is a plain token (letters, digits, ``.``, ``_``, ``:``,
    ``-``; at most 64), otherwise a new random one."""
    if header is not None and _REQUEST_ID.fullmatch(header):
        return header
    return secrets.token_hex(8)


def log_request(
    method: str,
    route: str,
    status: int,
    duration: float,
    participant_id: str | None,
    request_id: str,
    client: str | None = None,
) -> None:
    """One access record for an HTTP request (*duration* in seconds) from
    *client* (its address, behind trusted proxies the forwarded one).

    *route* is the matched URL rule (``/api/rooms/<room_id>/messages``), not
    the path: ids in it are not logged, and lines group by endpoint."""
    if not ACCESS.isEnabledFor(logging.INFO):
        return
    ms = round(duration * 1000, 1)
    ACCESS.info(
        "%s %s %d %.1fms participant=%s client=%s request=%s",
        method,
        route,
        status,
        ms,
        participant_id or "-",
        client or "-",
        request_id,
        extra={
            "method": method,
            "route": route,
            "status": status,
            "duration_ms": ms,
            "participant_id": participant_id,
            "client": client,
            "request_id": request_id,
        },
    )


def log_session(
    event: str,
    session_id: str,
    participant_id: str,
    *,
    duration: float | None = None,
    reason: str | None = None,
    client: str | None = None,
) -> None:
    """One access record for a WebSocket session: *event* ``session_start``
    (it authenticated) or ``session_end`` (with its *duration* in seconds and
    why it ended: ``closed``, ``expired``, ``lagging``, ``shutdown``...)."""
    if not ACCESS.isEnabledFor(logging.INFO):
        return
    fields: dict[str, Any] = {
        "event": event,
        "session_id": session_id,
        "participant_id": participant_id,
        "client": client,
    }
    if duration is None:
        ACCESS.info(
            "WS %s participant=%s client=%s session=%s",
            event,
            participant_id,
            client or "-",
            session_id,
            extra=fields,
        )
        return
    fields["duration_ms"] = round(duration * 1000, 1)
    fields["reason"] = reason
    ACCESS.info(
        "WS %s participant=%s client=%s session=%s %.1fs reason=%s",
        event,
        participant_id,
        client or "-",
        session_id,
        duration,
        reason,
        extra=fields,
    )


class JsonFormatter(logging.Formatter):
    """A record as one line of JSON: ``time`` (UTC, ISO 8601), ``level``,
    ``logger``, ``message``, the record's extra fields, and ``exception``
    (the formatted traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in data:
                data[key] = value
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            data["exception"] = record.exc_text
        if record.stack_info:
            data["stack"] = self.formatStack(record.stack_info)
        return json.dumps(data, ensure_ascii=False, default=str)


class _QueueHandler(logging.handlers.QueueHandler):
    """Hands records to the writer thread, never waiting: when the queue is
    full (stderr is not being read) the record is dropped and counted, and
    the count is logged once the writer catches up."""

    def __init__(self, records: queue.Queue[Any]) -> None:
        super().__init__(records)
        self._records = records
        self.dropped = 0

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        # the message and the traceback as text now (the record's arguments
        # may change once this returns); extra fields stay as they are
        record = copy.copy(record)
        record.message = record.getMessage()
        record.msg, record.args = record.message, None
        if record.exc_info:
            record.exc_text = _TRACEBACKS.formatException(record.exc_info)
            record.exc_info = None
        return record

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            if self.dropped and self._records.qsize() < MAX_QUEUED_RECORDS // 2:
                note = logging.LogRecord(
                    "quart_mesh",
                    logging.WARNING,
                    __file__,
                    0,
                    "%d log records were dropped: the log was not read fast enough",
                    (self.dropped,),
                    None,
                )
                self._records.put_nowait(self.prepare(note))
                self.dropped = 0
            if record.levelno >= logging.ERROR:
                # an error is worth a short wait: it may say why the node stops
                self._records.put(record, timeout=_ERROR_WAIT)
            else:
                self._records.put_nowait(record)
        except queue.Full:
            self.dropped += 1


class _Listener(logging.handlers.QueueListener):
    """The writer thread; stopping it never blocks for long, even with the
    queue full and stderr not read."""

    def __init__(self, records: queue.Queue[Any], handler: logging.Handler) -> None:
        super().__init__(records, handler)
        self._records = records

    def stop(self) -> None:
        thread = self._thread
        if thread is None:
            return
        with contextlib.suppress(queue.Full):
            self._records.put(None, timeout=_FLUSH_WAIT)  # QueueListener._sentinel
        thread.join(_FLUSH_WAIT)
        self._thread = None


_TRACEBACKS = logging.Formatter()
_listener: _Listener | None = None
_front: _QueueHandler | None = None
#: records waiting for the writer thread, at most
MAX_QUEUED_RECORDS = 10_000
#: seconds an error record may wait for room in the queue
_ERROR_WAIT = 1.0
#: seconds flush_logging waits for the writer to write what is queued
_FLUSH_WAIT = 5.0


def configure_logging(level: str, fmt: str = "text", *, leave_hypercorn: bool = False) -> None:
    """The node's log to stderr at *level*, as *fmt* (``text`` or ``json``),
    unless logging is set up already (a ``--log-config`` that configures the
    root logger replaces it); Alembic says what it migrates only at DEBUG.
    With *leave_hypercorn*, records of hypercorn's own loggers are left to
    the handlers hypercorn gives them (a stock hypercorn server), not
    printed twice.

    Records are written by a thread of their own: the event loop never waits
    on stderr (a full pipe, a slow journal). Beyond ``MAX_QUEUED_RECORDS``
    waiting, records are dropped and the number dropped is logged.
    :func:`flush_logging` writes what is queued (at exit, and before the
    process ends itself)."""
    global _listener, _front
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    records: queue.Queue[Any] = queue.Queue(MAX_QUEUED_RECORDS)
    front = _QueueHandler(records)
    if leave_hypercorn:
        front.addFilter(lambda record: not record.name.startswith("hypercorn."))
    root.addHandler(front)
    _front = front
    _listener = _Listener(records, handler)
    _listener.start()
    atexit.register(flush_logging)
    root.setLevel(level)
    if root.getEffectiveLevel() > logging.DEBUG:
        logging.getLogger("alembic").setLevel(logging.WARNING)


def flush_logging() -> None:
    """Write every queued record and stop the writer thread, waiting at
    most a few seconds (records logged afterwards are queued and not
    written); say how many records were dropped, if any. Never raises."""
    global _listener
    listener, _listener = _listener, None
    if listener is None:
        return
    with contextlib.suppress(Exception):
        listener.stop()
    if _front is not None and _front.dropped:
        with contextlib.suppress(Exception):
            sys.stderr.write(f"{_front.dropped} log records were dropped at the end\n")
            sys.stderr.flush()
