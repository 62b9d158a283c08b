"""The registry of known faults (``faults.py``) on an injected clock: a
fault's start is logged once with its cause, later failures are counted
with at most one summary line per interval, its end is logged once; keys
keep faults apart; what it shows (``active``, ``failures``) is what
readiness, the console and ``/metrics`` read. And how the store classifies
its failures (``store/database.py``), from the drivers' own errors."""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

import psycopg.errors
import pytest
from sqlalchemy.exc import DatabaseError, DataError, IntegrityError, InternalError, OperationalError

from quart_mesh.faults import (
    DISK_FULL,
    PEER_DOWN,
    STORE_CORRUPT,
    STORE_UNAVAILABLE,
    Faults,
)
from quart_mesh.store.database import READ, WRITE, _is_store_failure, classify

pytestmark = pytest.mark.store_free

LOGGER = "tests.faults"


class Clock:
    """Seconds, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def faults(clock: Clock) -> Faults:
    return Faults(clock=clock, summary_every=60.0, logger=logging.getLogger(LOGGER))


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_a_fault_is_logged_when_it_starts_counted_and_logged_when_it_ends(
    faults: Faults, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    for n in range(1000):
        clock.now += 0.01
        faults.failed(DISK_FULL, f"database or disk is full ({n})", hint="free space")
    assert lines(caplog) == [
        "fault started: the disk is full: database or disk is full (0) (free space)"
    ]
    assert faults.is_active(DISK_FULL)
    assert faults.any_active(DISK_FULL)
    assert not faults.is_active(STORE_UNAVAILABLE)
    [fault] = faults.active()
    assert fault.to_json() == {
        "kind": DISK_FULL,
        "key": None,
        "cause": "database or disk is full (999)",  # the latest cause
        "since": fault.since_ms,
        "failures": 1000,
    }
    assert faults.failures()[DISK_FULL] == 1000

    clock.now += 5
    faults.cleared(DISK_FULL)
    faults.cleared(DISK_FULL)  # once only
    assert lines(caplog)[1:] == ["fault ended: the disk is full, after 15.0 s and 1000 failure(s)"]
    assert faults.active() == []
    assert faults.failures()[DISK_FULL] == 1000  # a counter: it stays


def test_at_most_one_summary_per_interval(
    faults: Faults, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    # eight failures a second for five minutes
    for _ in range(8 * 300):
        faults.failed(STORE_UNAVAILABLE, "connection refused")
        clock.now += 0.125
    said = lines(caplog)
    assert said[0] == "fault started: the store is unavailable: connection refused"
    summaries = said[1:]
    assert len(summaries) == 4  # at 60, 120, 180 and 240 s (300 s is not reached)
    assert summaries[0] == (
        "fault goes on: the store is unavailable: 480 failure(s) in the last 60 s, 481 since"
        " it started 60 s ago; the latest: connection refused"
    )
    assert all(
        s.startswith("fault goes on: the store is unavailable: 480 failure") for s in said[1:]
    )


def test_a_fault_that_starts_again_is_logged_again(
    faults: Faults, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    faults.failed(STORE_UNAVAILABLE, "down")
    faults.cleared(STORE_UNAVAILABLE)
    clock.now += 1
    faults.failed(STORE_UNAVAILABLE, "down again")
    assert [s.split(":")[0] for s in lines(caplog)] == [
        "fault started",
        "fault ended",
        "fault started",
    ]
    assert faults.active()[0].count == 1


def test_a_success_ends_only_what_its_source_started(
    faults: Faults, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """A write that failed (SQLite's write lock held elsewhere) is not ended
    by reads that work: no start and end per request; a commit ends it."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    for _ in range(5):
        faults.failed(STORE_UNAVAILABLE, "database is locked", source=WRITE)
        clock.now += 1
        faults.cleared(STORE_UNAVAILABLE, source=READ)
        faults.cleared(STORE_UNAVAILABLE)  # an unnamed success (a lease's) neither
    assert [s.split(":")[0] for s in lines(caplog)] == ["fault started"]
    # reads fail too now: a read that works later leaves the writes' part
    faults.failed(STORE_UNAVAILABLE, "connection refused", source=READ)
    faults.cleared(STORE_UNAVAILABLE, source=READ)
    assert faults.is_active(STORE_UNAVAILABLE)
    faults.cleared(STORE_UNAVAILABLE, source=(WRITE, READ))  # a commit
    assert [s.split(":")[0] for s in lines(caplog)] == ["fault started", "fault ended"]
    assert lines(caplog)[1] == (
        "fault ended: the store is unavailable, after 5.0 s and 6 failure(s)"
    )
    # failures of no source are ended by any success, as before
    faults.failed(STORE_UNAVAILABLE, "lease connection lost")
    faults.cleared(STORE_UNAVAILABLE, source=READ)
    assert not faults.is_active(STORE_UNAVAILABLE)


def test_keys_keep_faults_apart(
    faults: Faults, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    faults.failed(PEER_DOWN, "cannot reach the peer", key="c1")
    clock.now += 1
    faults.failed(PEER_DOWN, "the peer answered 502", key="c2")
    faults.failed(PEER_DOWN, "cannot reach the peer", key="c1")
    assert lines(caplog) == [
        "fault started: a federation peer is down (c1): cannot reach the peer",
        "fault started: a federation peer is down (c2): the peer answered 502",
    ]
    assert [(f.key, f.count) for f in faults.active()] == [("c1", 2), ("c2", 1)]  # oldest first
    assert faults.is_active(PEER_DOWN, "c2")
    assert not faults.is_active(PEER_DOWN)
    assert faults.any_active(PEER_DOWN)
    faults.cleared(PEER_DOWN, key="c1")
    assert [f.key for f in faults.active()] == ["c2"]
    # what failed is gone: no longer followed, said once
    faults.forget(PEER_DOWN, key="c2", why="its link stopped")
    faults.forget(PEER_DOWN, key="c2", why="its link stopped")
    assert lines(caplog)[2:] == [
        "fault ended: a federation peer is down (c1), after 1.0 s and 2 failure(s)",
        "fault no longer followed: a federation peer is down (c2) (its link stopped),"
        " after 0.0 s and 1 failure(s)",
    ]
    assert not faults.any_active(PEER_DOWN)


def test_levels_start_is_an_error_end_a_warning(
    faults: Faults, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    faults.failed(DISK_FULL, "full")
    faults.cleared(DISK_FULL)
    assert [r.levelno for r in caplog.records if r.name == LOGGER] == [
        logging.ERROR,
        logging.WARNING,
    ]


def test_threads_reporting_together_start_one_fault(
    faults: Faults, caplog: pytest.LogCaptureFixture
) -> None:
    """The store reports from its worker threads: many at once still make
    one start line and an exact count."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    go = threading.Barrier(8)

    def report() -> None:
        go.wait()
        for _ in range(500):
            faults.failed(DISK_FULL, "full")

    threads = [threading.Thread(target=report) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(lines(caplog)) == 1
    assert faults.active()[0].count == 4000
    assert faults.failures()[DISK_FULL] == 4000


def _wrapped(error: Exception) -> Exception:
    """*error* as SQLAlchemy raises it."""
    cls = OperationalError if isinstance(error, sqlite3.OperationalError) else DatabaseError
    return cls("INSERT ...", {}, error)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (sqlite3.OperationalError("database or disk is full"), DISK_FULL),
        (OSError(28, "No space left on device"), DISK_FULL),
        (
            sqlite3.OperationalError(
                'could not extend file "base/16384/2619": No space left on device'
            ),
            DISK_FULL,
        ),
        (sqlite3.DatabaseError("database disk image is malformed"), STORE_CORRUPT),
        (sqlite3.DatabaseError("file is not a database"), STORE_CORRUPT),
        (sqlite3.OperationalError("database is locked"), STORE_UNAVAILABLE),
        (sqlite3.OperationalError("unable to open database file"), STORE_UNAVAILABLE),
        (
            sqlite3.OperationalError("connection failed: server closed the connection"),
            STORE_UNAVAILABLE,
        ),
    ],
)
def test_the_store_classifies_its_failures(error: Exception, kind: str) -> None:
    wrapped = error if isinstance(error, OSError) else _wrapped(error)
    assert classify(wrapped) == kind


def _pg(error: type[psycopg.errors.Error], text: str, wrapper: type[DatabaseError]) -> Exception:
    """A psycopg error of *error*'s SQLSTATE as SQLAlchemy raises it."""
    return wrapper("INSERT ...", {}, error(text))


@pytest.mark.parametrize(
    "error",
    [
        # PostgreSQL quotes the value a client chose (a send's clientId)
        _pg(
            psycopg.errors.UniqueViolation,
            'duplicate key value violates unique constraint "t_k_key"\n'
            "DETAIL:  Key (k)=(malformed) already exists.",
            IntegrityError,
        ),
        _pg(
            psycopg.errors.UniqueViolation,
            "DETAIL:  Key (k)=(file is not a database: no space left on device) already exists.",
            IntegrityError,
        ),
        _pg(
            psycopg.errors.InvalidTextRepresentation,
            'invalid input syntax for type integer: "database disk image is malformed"',
            DataError,
        ),
        # SQLite names the table and column, which may say anything
        IntegrityError(
            "INSERT ...", {}, sqlite3.IntegrityError("UNIQUE constraint failed: malformed.k")
        ),
        # a statement's own error, whatever it says
        _pg(psycopg.errors.UndefinedTable, 'relation "malformed" does not exist', DatabaseError),
        _pg(psycopg.errors.InFailedSqlTransaction, "malformed", InternalError),
    ],
)
def test_a_units_own_error_is_no_fault_whatever_its_words(error: Exception) -> None:
    assert not _is_store_failure(error)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        # a read-only server (a standby, default_transaction_read_only)
        (
            _pg(
                psycopg.errors.ReadOnlySqlTransaction,
                "cannot execute INSERT in a read-only transaction",
                InternalError,
            ),
            STORE_UNAVAILABLE,
        ),
        (
            _pg(psycopg.errors.AdminShutdown, "terminating connection", OperationalError),
            STORE_UNAVAILABLE,
        ),
        (_pg(psycopg.errors.CannotConnectNow, "starting up", OperationalError), STORE_UNAVAILABLE),
        (_pg(psycopg.errors.DiskFull, "could not write", OperationalError), DISK_FULL),
        (
            _pg(psycopg.errors.DataCorrupted, "invalid page in block 7", InternalError),
            STORE_CORRUPT,
        ),
        (_pg(psycopg.errors.IndexCorrupted, "index is corrupt", InternalError), STORE_CORRUPT),
        # the code decides, not the words
        (_pg(psycopg.errors.AdminShutdown, "malformed", OperationalError), STORE_UNAVAILABLE),
    ],
)
def test_postgresql_failures_are_classified_by_their_sqlstate(error: Exception, kind: str) -> None:
    assert _is_store_failure(error)
    assert classify(error) == kind


def test_sqlite_failures_are_classified_by_their_code(tmp_path: Path) -> None:
    """Errors SQLite itself raised (``sqlite_errorcode``), not made up."""
    # a full database: max_page_count makes SQLite answer SQLITE_FULL
    full = sqlite3.connect(tmp_path / "full.db")
    full.execute("CREATE TABLE t (x)")
    full.execute(f"PRAGMA max_page_count = {full.execute('PRAGMA page_count').fetchone()[0]}")
    with pytest.raises(sqlite3.OperationalError) as raised:
        full.execute("INSERT INTO t VALUES (zeroblob(100000))")
    assert classify(OperationalError("INSERT", {}, raised.value)) == DISK_FULL
    full.close()
    # not a database
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"\xff" * 4096)
    with pytest.raises(sqlite3.DatabaseError) as raised:
        sqlite3.connect(garbage).execute("SELECT * FROM sqlite_master")
    error = DatabaseError("SELECT", {}, raised.value)
    assert (_is_store_failure(error), classify(error)) == (True, STORE_CORRUPT)
    # words that would have meant a damaged file, in a statement's error
    ok = sqlite3.connect(tmp_path / "ok.db")
    with pytest.raises(sqlite3.OperationalError) as raised:
        ok.execute("SELECT * FROM malformed")
    assert classify(OperationalError("SELECT", {}, raised.value)) == STORE_UNAVAILABLE
    ok.execute("CREATE TABLE malformed (k UNIQUE)")
    ok.execute("INSERT INTO malformed VALUES ('file is not a database')")
    with pytest.raises(sqlite3.IntegrityError) as raised:
        ok.execute("INSERT INTO malformed VALUES ('file is not a database')")
    assert "malformed" in str(raised.value)
    assert not _is_store_failure(IntegrityError("INSERT", {}, raised.value))
    ok.close()
