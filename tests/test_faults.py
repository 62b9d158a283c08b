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

import pytest
from sqlalchemy.exc import DatabaseError, OperationalError

from quart_mesh.faults import (
    DISK_FULL,
    PEER_DOWN,
    STORE_CORRUPT,
    STORE_UNAVAILABLE,
    Faults,
)
from quart_mesh.store.database import classify

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
