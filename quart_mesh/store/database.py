"""The store's engine: synchronous SQLAlchemy Core, run off the event loop.

Why not an async driver: the ``databases`` package and every asyncio-only
driver fail under Trio (DESIGN.md §4). Instead each unit of work is a plain
function ``fn(conn) -> T`` run in a worker thread:

- :meth:`Database.write` runs it in a transaction, one writer at a time
  (SQLite allows one writer; serializing here avoids ``database is locked``).
- :meth:`Database.read` runs it on a pooled connection; several readers may
  run at once (SQLite in WAL mode lets readers proceed during a write).

On PostgreSQL several processes may each run a writer against one
database: migrations run under an advisory lock, cursor positions are
assigned under another until commit, and a constraint violation that a
concurrent writer caused reaches the client as a 404 or 409
(``dialect.py``). A batch PostgreSQL aborts to break a deadlock runs again.

A unit of work may run more than once, every run but the last rolled
back (as Synapse's ``runInteraction`` says of its functions). Units
waiting together run first in one transaction without savepoints; if one
raises, that transaction is rolled back and the batch runs again with a
savepoint per unit, so that only the failing units fail. And PostgreSQL
may abort a transaction to break a deadlock or a serialization conflict
with another writer: it runs again, up to ``_ATTEMPTS`` runs. So one
unit's function may run up to twice ``_ATTEMPTS`` times (six). A unit must
therefore be a function of its connection only, with no effect outside
the transaction: no I/O, no change to in-memory state others see, no
counters. What must happen once it has committed is recorded with
``store/outbox.py`` (events, routing changes, cache invalidations) or
done in the write's ``then``, each of which happens once, after the
commit.

With several processes the store is wired to the process's bus
(``services/bus.py``) at construction, through :class:`StreamApplier`:
what each transaction publishes also goes to the cluster's stream, and a
write returns once the bus has applied it here.

Cancellation: a unit of work that has started in its thread always runs to
completion (commit or rollback); the awaiting task sees ``Cancelled`` only
after that. So a cancelled request never leaves half a transaction.

Failures: each failure of the store is classified (:func:`classify`: the
disk full, the file damaged, or the store unavailable) and reported to the
node's :class:`~quart_mesh.faults.Faults`, which logs the fault once when
it starts, counts it while it lasts and logs its end; a commit that
succeeds ends a full disk or an unavailable store, a read that succeeds
only what failed reads started (a failed write's fault ends with a commit).
The callers get :class:`StoreFault` (an
:class:`~quart_mesh.errors.Unavailable`, 503) and log nothing more
(``docs/decisions/0077-each-fault-logged-once.md``).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import itertools
import logging
import math
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import sqlalchemy as sa
import trio
from alembic import command
from alembic.runtime.migration import MigrationContext
from prometheus_client import Histogram
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, OperationalError

from .._version import __version__
from ..errors import Overloaded, StoreFromNewerRelease, Unavailable
from ..faults import DISK_FULL, STORE_CORRUPT, STORE_UNAVAILABLE, Faults, KnownFault
from ..records import now_ms
from . import ahead, outbox
from .ahead import Ahead
from .dialect import (
    MIGRATION_LOCK,
    Statement,
    hold_write_lock,
    holds_write_lock,
    is_retryable,
    translate,
)
from .health import alembic_config, code_heads, code_revisions

__all__ = ["READ", "WRITE", "CommitListener", "Database", "StoreFault", "StreamApplier", "classify"]

log = logging.getLogger(__name__)
T = TypeVar("T")

_BATCH = 64  # units of work committed together at most
_ATTEMPTS = 3  # runs of a write that PostgreSQL aborted as a deadlock
_DELIVERY_WAIT = 30.0  # seconds a write waits for the bus to deliver it here
_CHECKPOINT_EVERY = 1.0  # seconds between SQLite checkpoints (when there were commits)
_WAL_KEEP = 4 * 1024 * 1024  # bytes SQLite's write-ahead log is cut back to when it restarts
#: free bytes in SQLite's folder for a full disk to count as having room
#: again: with less, a small commit may still fit (in pages the write-ahead
#: log reuses) while the next fails, and the fault would end and start anew
_ROOM_AGAIN = 1024 * 1024
#: free bytes beyond what a checkpoint needs for a full disk to end (hysteresis)
_ROOM_END = 8 * 1024 * 1024
#: seconds without a write meeting the full disk before it ends (hysteresis)
_FULL_SETTLE = 3.0
#: seconds a write that met the full disk keeps readiness at ``disk_full``
_FULL_RECENT = 1.0
#: free bytes beyond the write-ahead log's size above which the room a
#: checkpoint needs is not measured again for ``_ROOMY_FOR`` seconds (one
#: ``statvfs`` and one ``stat`` per batch otherwise)
_ROOM_ALWAYS = 256 * 1024 * 1024
_ROOMY_FOR = 0.25
#: seconds a truncating checkpoint waits for readers and the writer
_TRUNCATE_WAIT = 0.2
#: seconds a SQLite connection waits for the write lock another holds
_BUSY_TIMEOUT = 30.0
#: milliseconds PostgreSQL lets a transaction of the node sit idle before it
#: ends it (a unit of work never waits between its statements)
_IDLE_IN_TRANSACTION_MS = 60_000

#: what failed, as the store's faults name their sources (``faults.Faults``):
#: a fault a write started ends with a commit only, one reads started with a
#: read or a commit
WRITE = "write"
READ = "read"
#: what a commit proves working
_COMMITTED = (WRITE, READ)


#: the channel a commit that wrote to the stream notifies (``services/bus.py``)
STREAM_CHANNEL = "mesh_stream"
#: bytes of a notification's entries at most (PostgreSQL takes 8000 bytes a
#: payload; the header and a margin besides), and notifications a commit
#: sends at most: a larger one is read from the table
_CHUNK_BYTES = 7600
_MAX_CHUNKS = 64

# One round trip at the end of a transaction that published something: its
# block (taken now if its units took no position), its stream row, and its
# entries as notifications (delivered at commit, in commit order), each
# headed "<block> <final> <n> <count>": <final> is the block at or below
# which every other transaction's block is final (``blocks.py``), so a
# reader that has every notification before this one knows that a block at
# or below it it has not heard of was rolled back or published nothing.
_RECORD = (
    "WITH b AS MATERIALIZED (SELECT mesh_reserve() AS block),"
    " f AS MATERIALIZED (SELECT mesh_final_block(true) AS upto),"
    " row AS (INSERT INTO cluster_stream (position, origin, body, created_at)"
    " SELECT block, %(origin)s, %(body)s, %(at)s FROM b)"
    f" SELECT b.block, pg_notify('{STREAM_CHANNEL}', b.block || ' ' || f.upto || ' ' || t.n"
    " || ' ' || %(count)s || chr(10) || t.p)"
    " FROM b, f, unnest(string_to_array(%(chunks)s, chr(30))) WITH ORDINALITY AS t(p, n)"
)
#: between the chunks of one commit in the statement's one text parameter
#: (JSON escapes every control character, so none is in a chunk)
_CHUNK_SEPARATOR = "\x1e"

#: told, on the event loop, what each unit published, right after its
#: commit and before its ``then`` (the node's: ``Broker.committed``)
CommitListener = Callable[[list[outbox.Entry]], object]


class StreamApplier(Protocol):
    """What the store asks of the process's bus (``services/bus.py``) when
    several processes share the database. Declared here, by what the store
    uses, so that the store depends on no service."""

    @property
    def process_id(self) -> str:
        """This process among those serving the mesh: the origin of what its
        transactions write to the cluster's stream."""

    async def caught_up(self, position: int) -> None:
        """Return once the stream has been applied here up to *position* (at
        once while the bus is not running)."""

    def recorded(self, block: int, entries: list[outbox.Entry]) -> None:
        """A transaction of this process, about to commit at *block*,
        recorded *entries* (the bus then need not decode its notifications).
        Called in the writer's thread; must not block."""


class StoreFault(Unavailable, KnownFault):
    """The store failed (503 ``storage_unavailable``), already reported to
    the node's faults as *fault_kind*: nobody logs it again."""

    def __init__(self, fault_kind: str) -> None:
        message = _MESSAGES.get(fault_kind, _MESSAGES[STORE_UNAVAILABLE])
        super().__init__(message, "storage_unavailable")
        self.fault_kind = fault_kind


_MESSAGES = {
    DISK_FULL: "the storage backend is unavailable: its disk is full",
    STORE_CORRUPT: "the storage backend is unavailable: its file is damaged",
    STORE_UNAVAILABLE: "the storage backend is unavailable",
}

#: SQLite's primary result codes (``sqlite_errorcode & 0xff``): the disk
#: full, the file damaged, not a database, an I/O error
_SQLITE_FULL = 13
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26
_SQLITE_IOERR = 10
#: PostgreSQL's SQLSTATEs: the disk full; data or an index damaged
_PG_DISK_FULL = "53100"
_PG_CORRUPT = ("XX001", "XX002")
#: the server refuses work it would do otherwise: a read-only transaction
#: (a standby after a failover, ``default_transaction_read_only``), an
#: administrator's or a crash's shutdown, not accepting connections yet
_PG_REFUSING = ("25006", "57P01", "57P02", "57P03")
#: classes of SQLSTATE that are the server's trouble, not a statement's:
#: connection exceptions, insufficient resources, system errors
_PG_TROUBLE = ("08", "53", "58")
#: where no code says: what SQLite and PostgreSQL say when the disk is full,
#: and what SQLite says when its file is damaged (never read in an error
#: that carries a code, nor in a constraint's or a value's error, whose text
#: quotes what a client sent)
_FULL = ("database or disk is full", "no space left on device", "could not extend file")
_CORRUPT = ("malformed", "file is not a database")


def classify(error: BaseException) -> str:
    """The kind of fault a failure of the store is: :data:`DISK_FULL`,
    :data:`STORE_CORRUPT` or (anything else) :data:`STORE_UNAVAILABLE`.

    By the driver's code: PostgreSQL's SQLSTATE, SQLite's result code, an
    ``OSError``'s errno. Only an error without one is read for words, and
    never a constraint's or a value's (:func:`_is_units_own`)."""
    cause = _cause_of(error)
    if isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
        return DISK_FULL
    state = _sqlstate(cause)
    if state is not None:
        if state == _PG_DISK_FULL:
            return DISK_FULL
        return STORE_CORRUPT if state in _PG_CORRUPT else STORE_UNAVAILABLE
    code = _sqlite_code(cause)
    if code is not None:
        if code == _SQLITE_FULL:
            return DISK_FULL
        if code in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
            return STORE_CORRUPT
        return STORE_UNAVAILABLE
    if _is_units_own(error) or isinstance(cause, OSError):
        return STORE_UNAVAILABLE
    text = str(cause).lower()
    if any(words in text for words in _FULL):
        return DISK_FULL
    if any(words in text for words in _CORRUPT):
        return STORE_CORRUPT
    return STORE_UNAVAILABLE


def _cause_of(error: BaseException) -> BaseException:
    """The driver's own error in what SQLAlchemy raised."""
    return getattr(error, "orig", None) or error


def _sqlstate(cause: BaseException) -> str | None:
    """PostgreSQL's SQLSTATE of a psycopg error (``None``: none, or not one)."""
    state = getattr(cause, "sqlstate", None)
    return state if isinstance(state, str) and state else None


def _sqlite_code(cause: BaseException) -> int | None:
    """SQLite's primary result code of a ``sqlite3`` error (``None``: not one)."""
    code = getattr(cause, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def _is_units_own(error: BaseException) -> bool:
    """A constraint violation or a bad value: the unit's own error, whatever
    its words (PostgreSQL quotes the value: ``Key (k)=(malformed)``)."""
    if isinstance(error, (IntegrityError, DataError)):
        return True
    # the driver's own, unwrapped: sqlite3's and psycopg's classes of these names
    kinds = type(_cause_of(error)).__mro__
    return any(kind.__name__ in ("IntegrityError", "DataError") for kind in kinds)


def _refuses(state: str) -> bool:
    """Whether PostgreSQL's *state* says the server refuses work, or is in
    trouble, rather than the statement being wrong."""
    return state in _PG_REFUSING or state[:2] in _PG_TROUBLE


class _Busy(Exception):
    """The event loop's connection could not begin: SQLite's write lock is
    held elsewhere. Nothing committed (a batch's first, optimistic run may
    have run and been rolled back: the worker thread runs it again)."""


class _Job(Generic[T]):
    __slots__ = ("ahead", "done", "entries", "error", "fn", "position", "quick", "result", "then")

    def __init__(
        self,
        fn: Callable[[Connection], T],
        then: Callable[[T], object] | None,
        quick: bool = False,
        ahead: tuple[Ahead, object] | None = None,
    ) -> None:
        self.fn = fn
        self.then = then
        #: a few short statements (see Database.submit)
        self.quick = quick
        #: its first statement, runnable ahead with those of the units next
        #: to it (``store/ahead.py``): the function and this unit's item
        self.ahead = ahead
        self.done = trio.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        #: what the unit published (``outbox.py``), once it ran
        self.entries: list[outbox.Entry] = []
        #: the stream position its batch wrote (with several processes)
        self.position = 0

    def run(self, conn: Connection) -> None:
        """Run the unit on *conn*, recording what it publishes."""
        outbox.begin(conn)
        self.position = 0
        try:
            self.result, self.error = self.fn(conn), None
        finally:
            # a connection lost in the unit (invalidated: the server went away
            # or refused it) has no record of it left, and the unit fails
            self.entries = [] if conn.invalidated else outbox.take(conn)

    def outcome(self) -> T:
        if self.error is not None:
            raise self.error
        result: T = self.result
        return result


class Database:
    """Owns the engine and the thread limiters. Open with :meth:`open`; for
    group commit, also run :meth:`run` in a nursery.

    Args:
        url: the store's SQLAlchemy URL (``sqlite:///...``,
            ``postgresql+psycopg://...``).
        reader_threads: reads that may run at once.
        max_queued: units that may wait for the writer (:meth:`submit`).
        faults: where its failures are reported (a new ``Faults`` if none).
        bus: with several processes on one PostgreSQL database, the
            process's bus (:class:`StreamApplier`): every commit's entries
            also go to the cluster's stream, as this process's, and a write
            returns once the bus has applied it here. ``None``: one process.
        on_commit: told what each unit published, after its commit
            (:data:`CommitListener`; the node's broker). ``None``: nobody.
    """

    def __init__(
        self,
        url: str,
        *,
        reader_threads: int = 4,
        max_queued: int = 2000,
        faults: Faults | None = None,
        bus: StreamApplier | None = None,
        on_commit: CommitListener | None = None,
    ) -> None:
        self.url = url
        #: where its failures are reported (the node's, ``faults.py``)
        self.faults = faults if faults is not None else Faults()
        #: most units waiting for the writer (:meth:`submit` refuses more)
        self.max_queued = max_queued
        self.backend = self.backend_of(url)
        self._bus = bus
        self._on_commit = on_commit
        self._engine: Engine | None = None
        self._write_engine: Engine | None = None
        self._write_limiter = trio.CapacityLimiter(1)
        self._read_limiter = trio.CapacityLimiter(reader_threads)
        self._queue: collections.deque[_Job[Any]] | None = None
        self._wakeup = trio.Event()
        #: the newest stream position this process wrote and committed
        self.stream_head = 0
        #: units per committed batch, and each batch's time to commit (``/metrics``;
        #: registered by whoever exports them)
        self.batch_units = Histogram(
            "mesh_store_batch_units",
            "Units (sends and other writes) committed together in one batch",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=None,
        )
        self.commit_seconds = Histogram(
            "mesh_store_commit_seconds",
            "Time to run and commit one batch of writes",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=None,
        )
        #: SQLite: the event loop thread's own write connection (_run_inline),
        #: for a database in a file (an in-memory one is per connection)
        self._inline_engine: Engine | None = None
        #: its one connection, kept open between batches (a checkout and a
        #: reset per batch cost as much as a small commit)
        self._inline_conn: Connection | None = None
        database = sa.make_url(url).database
        self._inline = self.backend == "sqlite" and database not in (None, "", ":memory:")
        #: the folder of SQLite's file (where a full disk is measured)
        self._folder = Path(database).resolve().parent if self._inline and database else None
        #: SQLite's write-ahead log, whose size is the room a checkpoint may need
        self._log_path = Path(f"{Path(database).resolve()}-wal") if database else Path()
        #: when a write last met a full disk (``time.monotonic()``)
        self._full_at = -math.inf
        #: until when the folder is known to have plenty of room (not measured)
        self._roomy_until = -math.inf
        #: batches run, and how many of them the last checkpoint followed
        self._commits = 0
        self._checkpointed = 0

    @staticmethod
    def backend_of(url: str) -> str:
        """The backend *url* names: ``"sqlite"`` or ``"postgresql"``."""
        return sa.make_url(url).get_backend_name()

    @property
    def bus(self) -> StreamApplier | None:
        """The process's bus it was built with (several processes), or None."""
        return self._bus

    @property
    def stream_origin(self) -> str | None:
        """This process's id, the origin of what its commits write to the
        cluster's stream, when several processes may share the database
        (it was built with a bus); else None."""
        return None if self._bus is None else self._bus.process_id

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise Unavailable("the store is not open", "storage_unavailable")
        return self._engine

    async def open(self) -> None:
        """Create the engine and apply migrations up to head (in a thread)."""
        await trio.to_thread.run_sync(self._open_sync, limiter=self._write_limiter)

    def _open_sync(self) -> None:
        url = sa.make_url(self.url)
        kwargs: dict[str, Any] = {}
        if self.backend == "sqlite":
            if url.database and url.database != ":memory:":
                Path(url.database).parent.mkdir(parents=True, exist_ok=True)
            # connections move between worker threads; the limiters serialize use
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": _BUSY_TIMEOUT}
        if self.backend == "postgresql":
            # a transaction left open by a writer that stopped talking (its
            # host gone, the process hung) holds every process's delivery
            # back (decision 0080): PostgreSQL ends it after this long idle
            # (added to the URL's own ``options``, if it has any)
            own = url.query.get("options")
            given = " ".join(own) if isinstance(own, tuple) else (own or "")
            idle = f"-c idle_in_transaction_session_timeout={_IDLE_IN_TRANSACTION_MS}"
            url = url.update_query_dict({"options": f"{idle} {given}".strip()})
        engine = sa.create_engine(url, **kwargs)
        if self.backend == "sqlite":
            sa.event.listen(engine, "connect", _sqlite_pragmas)
            # pysqlite's own transaction handling is broken for BEGIN; take it over.
            # Writes begin IMMEDIATE: they take the write lock up front, waiting
            # (busy_timeout) while another connection holds it; a deferred one
            # would fail at once with "database is locked" when it upgrades.
            sa.event.listen(engine, "begin", _sqlite_begin)
        if self.backend == "postgresql":
            sa.event.listen(engine, "handle_error", _drop_refused_connections)
        self._engine = engine
        try:
            with engine.begin() as conn:
                if self.backend == "postgresql":
                    # processes starting together: one migrates, the others wait
                    # here until it commits, then find the schema at head
                    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
                # what this release's migrations are is read once per process
                # (health.py): reading the scripts costs ~30 ms an open
                at = frozenset(MigrationContext.configure(conn).get_current_heads())
                _refuse_a_newer_store(at)
                if at != code_heads():  # else at head already: nothing to run
                    cfg = alembic_config()
                    cfg.attributes["connection"] = conn
                    command.upgrade(cfg, "head")
        except BaseException:
            # not opened: nothing is left for the garbage collector to close
            self._engine = None
            engine.dispose()
            raise
        log.debug("store open at %s", engine.url.render_as_string(hide_password=True))

    def _writing(self) -> Engine:
        """The engine, marked so that SQLite begins its transactions IMMEDIATE."""
        if self._write_engine is None:
            self._write_engine = self.engine.execution_options(mesh_write=True)
        return self._write_engine

    async def close(self) -> None:
        if self._inline_conn is not None:
            conn, self._inline_conn = self._inline_conn, None
            conn.close()
        if self._inline_engine is not None:
            inline, self._inline_engine = self._inline_engine, None
            inline.dispose()
        if self._engine is not None:
            engine, self._engine, self._write_engine = self._engine, None, None
            await trio.to_thread.run_sync(engine.dispose)

    async def write(
        self,
        fn: Callable[[Connection], T],
        *,
        then: Callable[[T], object] | None = None,
        quick: bool = False,
    ) -> T:
        """Run ``fn(conn)`` as one unit of work, serialized with other writes.

        While :meth:`run` is running, units that are waiting together are
        committed together in one transaction (group commit), and one that
        raises fails alone: the others commit. Without :meth:`run`, each
        unit is its own transaction. With several processes (a bus), it
        returns once the bus has applied the commit here.

        *fn* may run more than once, every run but the last rolled back.
        A batch runs first without savepoints; if any of its units raises,
        the transaction is rolled back and the batch runs again with a
        savepoint per unit. And PostgreSQL may abort a transaction to break
        a deadlock or a serialization conflict with another writer: it runs
        again, up to ``_ATTEMPTS`` runs. So *fn* may run up to
        twice ``_ATTEMPTS`` times (six). It must be a function of its
        connection only: no I/O, no change to in-memory state others see,
        no counters. What must happen once it has committed is recorded
        with ``store/outbox.py`` or done in *then*; each happens once.

        Args:
            fn: the unit of work, perhaps run several times (above); runs in
                a worker thread (a *quick* one on SQLite: on the event
                loop's thread, :meth:`submit`). What it raises on its last
                run is raised here.
            then: called once with the result on the event loop after the
                commit, before the next write may start, so that what it
                publishes leaves in commit order. It must not block or raise.
            quick: the unit runs a few short statements (:meth:`submit`).

        Cancellation: a unit that has been handed to the worker thread runs
        to completion (commit or rollback) before the caller sees
        ``Cancelled``; one still queued is withdrawn.

        Raises:
            Unavailable: the database could not be reached or is locked.
        """
        return await self.submit(fn, then=then, quick=quick)

    def submit(
        self,
        fn: Callable[[Connection], T],
        *,
        then: Callable[[T], object] | None = None,
        quick: bool = False,
        ahead: tuple[Ahead, object] | None = None,
    ) -> Awaitable[T]:
        """Queue a unit of work now and return an awaitable for its result.

        Units commit in the order they were submitted, so a caller can queue
        several (a client's pipelined sends) and await them afterwards.
        Semantics otherwise as :meth:`write`: in particular *fn* may run
        more than once (up to twice ``_ATTEMPTS`` times, every run but the
        last rolled back), so it must have no effect outside its
        transaction; what must happen after the commit is recorded with
        ``store/outbox.py`` or done in *then*.

        *quick* says the unit runs a few short statements whatever the data
        (a message send, read positions): on SQLite a batch of only such
        units is committed on the event loop's own thread, without the
        hand-over to a worker thread and back (:meth:`_run_inline`).

        *ahead* is ``(function, item)``: on PostgreSQL, a run of consecutive
        units of a batch naming the same function have their first
        statement run by ``function(conn, items)`` at once, before the first
        of them runs (``store/ahead.py``); the unit must look its outcome up.

        Raises:
            Overloaded: ``max_queued`` units are already waiting (at once,
                before anything is queued).
            StoreFault: the store is known to be damaged (the
                ``store_corrupt`` fault): no write is taken until a restart.
        """
        if self.faults.is_active(STORE_CORRUPT):
            # known damaged: what it would acknowledge now, the restore the
            # fault asks for would lose (reads go on, to see and save)
            raise StoreFault(STORE_CORRUPT)
        if self._queue is None:
            return self._write_now(fn, then, quick)
        if len(self._queue) >= self.max_queued:
            raise Overloaded(
                "the node has too many writes waiting: try again shortly", retry_after=1
            )
        job: _Job[T] = _Job(fn, then, quick, ahead if self.backend == "postgresql" else None)
        self._queue.append(job)
        self._wakeup.set()
        return self._wait(job)

    async def _wait(self, job: _Job[T]) -> T:
        try:
            await job.done.wait()
        except trio.Cancelled:
            if self._queue is not None and job in self._queue:
                self._queue.remove(job)
                raise
            with trio.CancelScope(shield=True):
                await job.done.wait()
            raise
        return await self._delivered(job)

    async def _write_now(
        self, fn: Callable[[Connection], T], then: Callable[[T], object] | None, quick: bool
    ) -> T:
        job = await trio.to_thread.run_sync(
            self._run_write, fn, then, quick, limiter=self._write_limiter
        )
        return await self._delivered(job)

    async def _delivered(self, job: _Job[T]) -> T:
        """*job*'s result, once what it published has reached this process's
        sessions: with several processes that is when the bus has applied
        its stream position, so an acknowledged write has been delivered
        here as it is on one process."""
        result = job.outcome()
        if job.position and self._bus is not None:
            # committed already: if the bus is stuck (the store away), say so
            # rather than hold the caller for ever
            with trio.move_on_after(_DELIVERY_WAIT) as waited:
                await self._bus.caught_up(job.position)
            if waited.cancelled_caught:
                log.warning("a write committed but not delivered here within %ss", _DELIVERY_WAIT)
        return result

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The writer: commits queued units in batches until cancelled (and,
        on SQLite, the checkpointer: :meth:`_checkpoints`)."""
        async with trio.open_nursery() as nursery:
            if self.backend == "sqlite":
                nursery.start_soon(self._checkpoints)
            await nursery.start(self._write_batches)
            task_status.started()

    async def _checkpoints(self) -> None:
        """Move committed pages from SQLite's write-ahead log into the
        database file, every :data:`_CHECKPOINT_EVERY` seconds that saw a
        commit, in a thread of its own. Connections do not checkpoint
        themselves on the event loop's connection (``wal_autocheckpoint=0``,
        :meth:`_run_inline`): SQLite would do it inside the commit that
        fills the log, and its fsync would hold that commit (on the loop) —
        and every send waiting on it — for tens of milliseconds (seen: p99
        4 ms, max 57 ms for a 20-row commit on this machine's disk, against
        0.07 ms at the median). A passive checkpoint waits for no reader or
        writer.

        A checkpoint that fails (the disk full: the database file cannot
        grow) is tried again each second until one succeeds, commits or
        not: once space returns, the log's pages move and the log starts
        over, cut back to :data:`_WAL_KEEP`. While the disk is full, the
        checkpoint truncates the log (it waits for readers and the writer):
        the space the log held is what the node needs to write again."""
        while True:
            await trio.sleep(_CHECKPOINT_EVERY)
            self._room_again()
            commits = self._commits
            # while the disk is full, the log is cut to nothing even without
            # new commits: writes wait for that room (_short_of_room)
            truncate = self.faults.is_active(DISK_FULL) and self._log_size() > 0
            if commits == self._checkpointed and not truncate:
                continue
            try:
                done = await trio.to_thread.run_sync(
                    self._checkpoint, truncate, limiter=self._read_limiter
                )
            except DBAPIError as exc:  # the next second tries again; SQLite also does on close
                self.failed(exc)
            except Unavailable:  # not open (closing): nothing to move
                continue
            else:
                if done:  # else (readers in the way) the next second tries again
                    self._checkpointed = commits

    def _checkpoint(self, truncate: bool = False) -> bool:
        """One checkpoint; whether it moved the whole log (and, *truncate*,
        cut it to nothing). A truncating one waits for readers and the
        writer at most :data:`_TRUNCATE_WAIT` (not the busy timeout: it
        holds the writer meanwhile) and, kept waiting, is tried again."""
        with self.engine.connect() as conn:
            if not truncate:
                busy, log, moved = conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").one()
                return bool(busy == 0 and log == moved)
            conn.exec_driver_sql(f"PRAGMA busy_timeout={int(_TRUNCATE_WAIT * 1000)}")
            try:
                busy, log, moved = conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").one()
            finally:
                conn.exec_driver_sql(f"PRAGMA busy_timeout={int(_BUSY_TIMEOUT * 1000)}")
            return bool(busy == 0 and log == moved)

    @property
    def queued(self) -> int:
        """Units waiting for the writer now (the write queue's depth)."""
        return len(self._queue) if self._queue is not None else 0

    async def _write_batches(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        self._queue = collections.deque()
        task_status.started()
        try:
            while True:
                while not self._queue:
                    await self._wakeup.wait()
                    self._wakeup = trio.Event()
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), _BATCH))]
                started = time.perf_counter()
                if self._refuse_short_of_room(batch):
                    for job in batch:
                        job.done.set()
                    continue
                with trio.CancelScope(shield=True):
                    try:
                        if not self._run_inline(batch):
                            await trio.to_thread.run_sync(
                                self._run_batch, batch, limiter=self._write_limiter
                            )
                    except BaseException:
                        # a bug in the writer: it ends the node, but no caller is left waiting
                        for job in batch:
                            job.error = Unavailable("the store failed", "storage_unavailable")
                            job.done.set()
                        raise
                    self._commits += 1
                    self.commit_seconds.observe(time.perf_counter() - started)
                    self.batch_units.observe(len(batch))
                    for job in batch:
                        if job.error is None:
                            self._committed(job)
                        job.done.set()
        finally:
            queue, self._queue = self._queue, None
            for job in queue or ():
                job.error = Unavailable("the store is closing", "storage_unavailable")
                job.done.set()

    def _run_inline(self, batch: list[_Job[Any]]) -> bool:
        """On SQLite, commit a batch of quick units here, on the event loop's
        thread; False (nothing done) if it is not such a batch, or SQLite's
        write lock is held elsewhere (another process: the worker thread
        then runs the batch, waiting for the lock). A failure of the store
        is reported to the batch's callers as on the thread's way.

        Why: a batch of sends takes well under a millisecond to commit
        (statements on the driver, ``dialect.Statement``; no fsync at commit
        in WAL mode with ``synchronous=NORMAL``; checkpoints are
        :meth:`_checkpoints`'s), less than handing it to a worker thread and
        back, with both threads taking turns at the GIL. The connection is
        this thread's own (``busy_timeout=0``: it never waits for the lock).
        """
        if not self._inline or not all(job.quick for job in batch):
            return False
        try:
            self._write_limiter.acquire_nowait()
        except trio.WouldBlock:
            return False
        try:
            self._run_batch_on(self._inline_connection(), batch)
        except _Busy:  # nothing committed: the thread's way waits for the lock
            # (rare: another process writes) a failed BEGIN leaves SQLAlchemy's
            # connection half begun: the next batch starts on a new one
            self._drop_inline_connection()
            for job in batch:
                job.error, job.entries = None, []
            return False
        except (DBAPIError, Unavailable) as exc:  # as the thread's way reports it
            if isinstance(exc, DBAPIError) and not _is_store_failure(exc):
                raise
            self._drop_inline_connection()  # the next batch starts on a new one
            self._fail_all(batch, exc)
        else:
            self._wrote()
        finally:
            self._write_limiter.release()
        return True

    def _inline_connection(self) -> Connection:
        if self._inline_engine is None:
            engine = sa.create_engine(
                self.engine.url,
                poolclass=sa.pool.StaticPool,
                connect_args={"check_same_thread": False},
            )
            sa.event.listen(engine, "connect", _sqlite_pragmas)
            sa.event.listen(engine, "connect", _inline_pragmas)
            sa.event.listen(engine, "begin", _sqlite_begin)
            self._inline_engine = engine.execution_options(mesh_write=True)
        if self._inline_conn is None:
            self._inline_conn = self._inline_engine.connect()
        return self._inline_conn

    def _drop_inline_connection(self) -> None:
        conn, self._inline_conn = self._inline_conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # it failed already
                conn.close()

    def _committed(self, job: _Job[Any]) -> None:
        """After *job*'s commit, on the event loop: what it published, then its ``then``."""
        # known committed only now: a subscription made from here on starts after it
        self.stream_head = max(self.stream_head, job.position)
        try:
            if job.entries and self._on_commit is not None:
                self._on_commit(job.entries)
            if job.then is not None:
                job.then(job.result)
        except Exception:  # a bug in a publisher must not stop writes
            log.exception("after-commit callback failed")

    def _lock_first(self, conn: Connection, batch: list[_Job[Any]]) -> None:
        """With several processes, take the mesh's write lock before anything
        else, unless every unit is quick (a send, a sign-in: its checks are
        in its own statements, and such batches commit concurrently). Taken
        first, not where a unit would (``dialect.hold_write_lock``): taken
        after row locks, it would deadlock with a writer that took it first
        and waits for one of those rows."""
        if self._bus is not None and not all(job.quick for job in batch):
            hold_write_lock(conn)

    def _record(self, conn: Connection, batch: list[_Job[Any]]) -> None:
        """With several processes: write what the batch's committing units
        published to the stream at the transaction's block, in this
        transaction, and send it to the other processes as notifications
        (delivered by PostgreSQL at commit, in commit order)."""
        if self._bus is None:
            return
        found = [entry for job in batch if job.error is None for entry in job.entries]
        if not found:
            return
        parts = outbox.encode_each(found)
        body = "[" + ",".join(parts) + "]"
        chunks = _chunks(parts)
        # one round trip: the block, the row, the notifications
        written = conn.exec_driver_sql(
            _RECORD,
            {
                "origin": self._bus.process_id,
                "body": body,
                "at": now_ms(),
                "count": len(chunks),
                "chunks": _CHUNK_SEPARATOR.join(chunks),
            },
        ).first()
        if written is None:  # a row per notification, and there is one at least
            raise RuntimeError("the stream row was not written")
        position = int(written[0])
        self._bus.recorded(position, found)
        for job in batch:
            if job.error is None and job.entries:
                job.position = int(position)

    def _run_batch(self, batch: list[_Job[Any]]) -> None:
        """Commit *batch* in one transaction; run it again (a few times) if
        PostgreSQL aborted it to break a deadlock with another writer."""
        try:
            _rerun_aborted("write batch", lambda: self._run_batch_once(batch))
        except (DBAPIError, Unavailable) as exc:
            if isinstance(exc, DBAPIError) and not _is_store_failure(exc):
                raise
            self._fail_all(batch, exc)
        else:
            self._wrote()

    def _run_batch_on(self, conn: Connection, batch: list[_Job[Any]]) -> None:
        """:meth:`_run_batch_once` on *conn* (not a connection of the pool)."""

        @contextlib.contextmanager
        def transaction() -> Iterator[Connection]:
            try:
                begun = conn.begin()  # BEGIN IMMEDIATE: takes the write lock, or fails
            except OperationalError as exc:
                raise _Busy from exc
            with begun:
                yield conn

        self._run_batch_once(batch, transaction)

    def _run_batch_once(
        self,
        batch: list[_Job[Any]],
        transaction: Callable[[], contextlib.AbstractContextManager[Connection]] | None = None,
    ) -> None:
        """Commit *batch* in one transaction.

        Optimistic first: all units without savepoints (two statements fewer
        each). If any unit raises, that transaction is rolled back and the
        batch runs again with a savepoint per unit, so only the failing units
        fail. Units are plain functions of the connection, safe to run again
        (:meth:`write` requires it of them). A batch of one unit never takes
        a savepoint: if it raises, its transaction is rolled back and the
        unit fails, as it would alone.

        Raises:
            DBAPIError: the database failed (``_is_store_failure``); no unit
                committed.
        """
        begin = transaction or self._writing().begin
        sequenced = False
        if len(batch) == 1:
            job = batch[0]
            try:
                with begin() as conn:
                    self._lock_first(conn, batch)
                    job.run(conn)
                    self._record(conn, batch)
            except _Busy:
                raise
            except Exception as exc:
                if _is_store_failure(exc):
                    raise
                _unit_failed(job, exc)
            return
        runs = _runs_ahead(batch)
        try:
            with begin() as conn:
                self._lock_first(conn, batch)
                try:
                    for i, job in enumerate(batch):
                        if (run := runs.get(i)) is not None:
                            run[0](conn, run[1])
                        job.run(conn)
                finally:
                    sequenced = holds_write_lock(conn)
                    ahead.clear(conn)
                self._record(conn, batch)
        except _Busy:
            raise
        except Exception as exc:
            if _is_store_failure(exc):
                raise
            # some unit failed: all rolled back; isolate it below
        else:
            return
        with begin() as conn:
            self._lock_first(conn, batch)
            if sequenced:
                # once for the batch, outside the savepoints (rolling back to
                # a savepoint would release a lock taken inside it)
                hold_write_lock(conn)
            for job in batch:
                try:
                    with conn.begin_nested():
                        job.run(conn)
                except Exception as exc:
                    if _is_store_failure(exc):
                        raise
                    _unit_failed(job, exc)
            self._record(conn, batch)

    async def read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(conn)`` on a read connection, concurrently with other reads."""
        return await trio.to_thread.run_sync(self._run_read, fn, limiter=self._read_limiter)

    def _run_write(
        self, fn: Callable[[Connection], T], then: Callable[[T], object] | None, quick: bool
    ) -> _Job[T]:
        job: _Job[T] = _Job(fn, then, quick)

        def once() -> None:
            with self._writing().begin() as conn:
                self._lock_first(conn, [job])
                job.run(conn)
                self._record(conn, [job])

        try:
            _rerun_aborted("write", once)
        except OperationalError as exc:
            raise self.failed(exc) from exc
        except IntegrityError as exc:
            raise _translated(exc) from exc
        except DBAPIError as exc:
            if not _is_store_failure(exc):
                raise
            raise self.failed(exc) from exc
        self._wrote()
        trio.from_thread.run_sync(self._committed, job)
        return job

    def _run_read(self, fn: Callable[[Connection], T]) -> T:
        try:
            with self.engine.connect() as conn:
                try:
                    result = fn(conn)
                finally:
                    conn.rollback()
        except DBAPIError as exc:
            if not _is_store_failure(exc):
                raise
            raise self.failed(exc, source=READ) from exc
        # a dictionary lookup unless it was; ends only what failed reads started
        self.faults.cleared(STORE_UNAVAILABLE, source=READ)
        return result

    def failed(self, exc: BaseException, *, source: str = WRITE) -> StoreFault:
        """Report a failure of the store (*exc*: the driver's error, as
        SQLAlchemy raised it) to the node's faults, classified, as a failure
        of *source* (:data:`WRITE`: only a commit ends it; :data:`READ`); the
        error its callers get. Thread-safe."""
        kind = classify(exc)
        if kind == DISK_FULL:
            self._full_at = time.monotonic()
        self.faults.failed(kind, _cause(exc), hint=self._hint(kind, exc), source=source)
        return StoreFault(kind)

    def _wrote(self) -> None:
        """A commit succeeded: the store answers, and the disk has room (on
        SQLite once its folder has room to spare, :meth:`_has_room`: a
        commit may squeeze into a full disk)."""
        self._room_again()
        self.faults.cleared(STORE_UNAVAILABLE, source=_COMMITTED)

    def _room_again(self) -> None:
        """End a full disk if the data folder has room to spare
        (:meth:`_has_room`) and no write met it for :data:`_FULL_SETTLE`
        seconds: a node writing at the edge of a small disk (its log
        growing and cut back each second) rides out one fault, not a start
        and an end a second. After a commit, and each second (the
        checkpointer), so that it ends on an idle node too."""
        if (
            self.faults.is_active(DISK_FULL)
            and time.monotonic() - self._full_at >= _FULL_SETTLE
            and self._has_room()
        ):
            self.faults.cleared(DISK_FULL, source=_COMMITTED)

    def disk_full(self) -> bool:
        """Whether writes meet a full disk now (readiness): the disk-full
        fault is active, and either the data folder lacks the room a
        checkpoint needs (writes are refused before they run) or a write
        met the full disk within the last second. The fault itself ends
        later (:meth:`_room_again`): its log lines are for the episode,
        this is for where traffic should go now."""
        if not self.faults.is_active(DISK_FULL):
            return False
        if time.monotonic() - self._full_at < _FULL_RECENT:
            return True
        return self._short_of_room() is not None

    def _has_room(self) -> bool:
        """Room enough for a full disk to have ended: what a checkpoint needs
        and :data:`_ROOM_END` more, so that a node writing at the edge of
        its disk rides out one fault, not a start and an end each second."""
        return self._short_of_room(_ROOM_END) is None

    def _short_of_room(self, margin: int = 0) -> str | None:
        """SQLite: why the data folder lacks the room a checkpoint may need
        (what the write-ahead log holds, by its size, may all be new pages
        of the database file) plus :data:`_ROOM_AGAIN`, or ``None`` when it
        has it. Writes past that would strand committed pages in the log:
        a checkpoint could not grow the database file to take them, the log
        could not start over, and the disk would stay full after the
        operator freed some of it (seen: the log refilled 9 MB freed in
        half a second and held it across a restart). Cheap: a ``statvfs``
        and a ``stat`` of the log (about 1.5 µs each), and none for
        :data:`_ROOMY_FOR` seconds after finding :data:`_ROOM_ALWAYS` to spare."""
        if self._folder is None:
            return None
        now = time.monotonic()
        if now < self._roomy_until:
            return None
        try:
            stats = os.statvfs(self._folder)
        except OSError:
            return None  # not measurable: SQLite itself will say
        free = stats.f_bavail * stats.f_frsize
        log_bytes = self._log_size()
        if free >= log_bytes + _ROOM_AGAIN + margin:
            if free - log_bytes >= _ROOM_ALWAYS:  # plenty: not measured again for a while
                self._roomy_until = now + _ROOMY_FOR
            return None
        return (
            f"{free} bytes free, less than the write-ahead log's {log_bytes} bytes"
            f" and {_ROOM_AGAIN} more that a checkpoint may need: writes wait for it"
        )

    def _log_size(self) -> int:
        """The write-ahead log's size in bytes (0 without one)."""
        try:
            return os.stat(self._log_path).st_size
        except OSError:
            return 0

    def _refuse_short_of_room(self, batch: list[_Job[Any]]) -> bool:
        """Fail *batch* (not run: the disk full) if the data folder is
        :meth:`_short_of_room`; whether it did."""
        short = self._short_of_room()
        if short is None:
            return False
        self._full_at = time.monotonic()
        self.faults.failed(DISK_FULL, short, hint=self._hint(DISK_FULL), source=WRITE)
        error = StoreFault(DISK_FULL)
        for job in batch:
            job.error, job.entries = error, []
        return True

    def _fail_all(self, batch: list[_Job[Any]], exc: DBAPIError | Unavailable) -> None:
        """Every unit of *batch* fails with *exc* (the store's failure,
        reported once for the batch, as callers see it)."""
        error = self.failed(exc) if isinstance(exc, DBAPIError) else exc
        for job in batch:
            job.error = error

    def _hint(self, kind: str, exc: BaseException | None = None) -> str:
        """What an operator can do about a fault of *kind* (caused by *exc*)."""
        if kind == DISK_FULL:
            if self._folder is not None:
                return f"free space in the data folder, {self._folder}"
            if self.backend == "postgresql":
                return "free space on the database server's disk"
            return "free disk space"
        if kind == STORE_CORRUPT:
            return (
                "stop the node, run `quart-mesh check`, and restore the newest good"
                " backup with `quart-mesh restore`"
            )
        if exc is not None and _sqlstate(_cause_of(exc)) == "25006":
            return (
                "the database is read-only, a standby after a failover or"
                " default_transaction_read_only set: point the node at the primary"
            )
        return ""


def _is_store_failure(exc: BaseException) -> bool:
    """Whether *exc* is the store failing (unreachable, locked, refusing
    work, its disk full, its file damaged) rather than one unit's own error
    (a constraint, a bad value, a bug). By the driver's code (:func:`classify`);
    a constraint violation or a bad value never is, whatever it says."""
    if not isinstance(exc, DBAPIError) or _is_units_own(exc):
        return False
    if isinstance(exc, OperationalError) or exc.connection_invalidated:
        return True
    cause = _cause_of(exc)
    state = _sqlstate(cause)
    if state is not None:
        return _refuses(state) or state in _PG_CORRUPT
    code = _sqlite_code(cause)
    if code is not None:
        return code in (_SQLITE_FULL, _SQLITE_CORRUPT, _SQLITE_NOTADB, _SQLITE_IOERR)
    return classify(exc) != STORE_UNAVAILABLE  # no code: its words


def _drop_refused_connections(context: sa.engine.ExceptionContext) -> None:
    """PostgreSQL: a connection the server refuses work on (read-only, shut
    down) is dropped, and the pool's older ones with it, as after a lost
    connection: the next ones are new, and find the server as it is now (a
    promoted primary; ``default_transaction_read_only`` set back, which
    sessions already open keep)."""
    state = _sqlstate(context.original_exception)
    if state is not None and state in _PG_REFUSING:
        context.is_disconnect = True


def _cause(exc: BaseException) -> str:
    """The driver's own words for a failure, on one line."""
    cause = getattr(exc, "orig", None) or exc
    lines = str(cause).strip().splitlines()
    return lines[0] if lines else type(cause).__name__


def _chunks(parts: list[str]) -> list[str]:
    """Entries (each one's JSON) as JSON arrays of at most
    :data:`_CHUNK_BYTES` bytes, one a notification; ``["*"]`` (read the row
    from the table) if one entry alone is larger or there would be more than
    :data:`_MAX_CHUNKS`."""
    chunks: list[str] = []
    group: list[str] = []
    size = 2
    for part in parts:
        cost = len(part.encode()) + 1
        if cost + 2 > _CHUNK_BYTES:
            return ["*"]
        if size + cost > _CHUNK_BYTES:
            chunks.append("[" + ",".join(group) + "]")
            if len(chunks) >= _MAX_CHUNKS:
                return ["*"]
            group, size = [], 2
        group.append(part)
        size += cost
    chunks.append("[" + ",".join(group) + "]")
    return chunks


def _runs_ahead(batch: list[_Job[Any]]) -> dict[int, tuple[Ahead, list[Any]]]:
    """Where in *batch* to run statements ahead (``store/ahead.py``): the
    index of the first unit of each run of two or more consecutive units
    naming the same function -> the function and the run's items in order.
    (A unit alone runs its own statement: nothing is gained.)"""
    runs: dict[int, tuple[Ahead, list[Any]]] = {}
    start = 0
    while start < len(batch):
        first = batch[start].ahead
        end = start + 1
        if first is not None:
            items = [first[1]]
            while end < len(batch) and (other := batch[end].ahead) and other[0] is first[0]:
                items.append(other[1])
                end += 1
            if len(items) > 1:
                runs[start] = (first[0], items)
        start = end
    return runs


def _rerun_aborted(what: str, transaction: Callable[[], T]) -> T:
    """Run *transaction*, and again (up to ``_ATTEMPTS`` runs in all) while
    PostgreSQL aborts it to break a deadlock or a serialization conflict
    with another writer; any other error, or the last abort, is raised."""
    for attempt in itertools.count(1):
        try:
            return transaction()
        except OperationalError as exc:
            if not is_retryable(exc) or attempt >= _ATTEMPTS:
                raise
            log.warning("%s aborted (%s): running it again", what, exc.orig)
    raise AssertionError("unreachable")


def _translated(exc: IntegrityError) -> Exception:
    """A constraint violation as the client error it means (``dialect.translate``),
    or itself if it means a bug."""
    error = translate(exc)
    if error is None:
        return exc
    error.__cause__ = exc
    return error


def _unit_failed(job: _Job[Any], exc: Exception) -> None:
    """*job* raised *exc* and was rolled back alone: its own error is for its
    caller (a constraint violation translated, as ``_translated`` says), and
    it published nothing."""
    job.error = _translated(exc) if isinstance(exc, IntegrityError) else exc
    job.entries = []


def _inline_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # the event loop's connection fails at once when another holds the lock,
    # and its commits never checkpoint: Database._checkpoints does, in a
    # thread (the other connections, in worker threads, keep SQLite's own
    # checkpoints, so a process that never runs the writer still has them)
    dbapi_conn.execute("PRAGMA busy_timeout=0")
    dbapi_conn.execute("PRAGMA wal_autocheckpoint=0")


_BEGIN = Statement("BEGIN")
_BEGIN_IMMEDIATE = Statement("BEGIN IMMEDIATE")


def _sqlite_begin(conn: Connection) -> None:
    # on the driver: SQLAlchemy's execution path costs several times the statement
    immediate = conn.get_execution_options().get("mesh_write", False)
    (_BEGIN_IMMEDIATE if immediate else _BEGIN).run(conn, {})


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # autocommit at the driver level; SQLAlchemy's "begin" listener issues BEGIN
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute(f"PRAGMA busy_timeout={int(_BUSY_TIMEOUT * 1000)}")
    cur.execute("PRAGMA foreign_keys=ON")
    # the write-ahead log shrinks back to this when it starts over after a
    # checkpoint, instead of keeping the largest size a busy spell gave it
    # (tens of MB: on a small disk, the room the floor was keeping)
    cur.execute(f"PRAGMA journal_size_limit={_WAL_KEEP}")
    cur.close()


def _refuse_a_newer_store(at: frozenset[str]) -> None:
    """A store migrated by a newer release names a migration this code does
    not have: refuse it before anything is written (alembic would fail with
    a traceback that does not say why).

    Raises:
        StoreFromNewerRelease: the store's migration is unknown here.
    """
    unknown = sorted(at - code_revisions())
    if unknown:
        raise StoreFromNewerRelease(
            f"the store was migrated by a newer quart-mesh (migration {', '.join(unknown)});"
            f" quart-mesh {__version__} knows migrations up to {', '.join(sorted(code_heads()))}."
            " Run the newer release, or restore the backup taken before the upgrade"
            " (docs/upgrading.md)"
        )
