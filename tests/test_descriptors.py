"""The descriptor reserve (``quart_mesh.descriptors.Reserve``) on its own:
when it refuses, when it pauses accepting, how its fault starts and ends,
and how seldom it recounts. The real thing over a served node, under a low
``ulimit -n``, is ``tests/e2e/test_descriptors.py``."""

from __future__ import annotations

import errno
import logging
import os
import resource
import subprocess
import sys

import pytest
import trio
from trio.testing import MockClock

from quart_mesh import descriptors
from quart_mesh.descriptors import (
    Reserve,
    count_open_fds,
    open_file_limit,
    restore_open_file_limit,
)
from quart_mesh.faults import DESCRIPTORS, Faults

pytestmark = pytest.mark.store_free


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def starting(self, text: str) -> list[str]:
        return [line for line in self.lines if line.startswith(text)]


class Counter:
    """Open descriptors besides the connections; counts its calls."""

    def __init__(self, others: int) -> None:
        self.others = others
        self.calls = 0
        self.connections = 0

    def __call__(self) -> int:
        self.calls += 1
        return self.others + self.connections


def _reserve(
    share: float, others: int = 10, limit: int = 100
) -> tuple[Reserve, Counter, Clock, Lines]:
    clock, lines, counter = Clock(), Lines(), Counter(others)
    logger = logging.getLogger("tests.descriptors")
    logger.propagate = False
    logger.handlers[:] = [lines]
    logger.setLevel(logging.DEBUG)
    faults = Faults(clock=clock, logger=logger)
    reserve = Reserve(faults, share, limit=limit, count=counter, clock=clock)
    return reserve, counter, clock, lines


def _open(reserve: Reserve, counter: Counter, n: int) -> list[bool]:
    refused = []
    for _ in range(n):
        refused.append(reserve.opened())
        counter.connections += 1
    return refused


def test_connections_past_the_share_are_refused_and_the_fault_logged_once() -> None:
    reserve, counter, clock, lines = _reserve(0.5)  # refused past 50 of 100
    assert (reserve.refuse_above, reserve.pause_at) == (50, 75)
    refused = _open(reserve, counter, 45)
    assert refused == [False] * 40 + [True] * 5  # 10 others + 40 connections = 50
    assert len(lines.starting("fault started: file descriptors ran out: 51 files open")) == 1
    assert len(lines.lines) == 1
    assert reserve._faults.totals[DESCRIPTORS] == 5

    # below the share again, but a refusal less than a second ago: still on
    for _ in range(10):
        reserve.closed()
        counter.connections -= 1
    clock.now += 0.5
    assert _open(reserve, counter, 1) == [False]
    assert reserve._faults.is_active(DESCRIPTORS)
    clock.now += 1.0
    assert _open(reserve, counter, 1) == [False]
    assert not reserve._faults.is_active(DESCRIPTORS)
    assert lines.starting("fault ended: file descriptors ran out, after 1.5 s and 5 failure(s)")
    assert len(lines.lines) == 2


async def test_the_fault_ends_without_a_new_connection(autojump_clock: MockClock) -> None:
    reserve, counter, clock, lines = _reserve(0.5)
    _open(reserve, counter, 45)
    for _ in range(45):
        reserve.closed()
        counter.connections -= 1
    clock.now += 2
    with trio.move_on_after(1.5):
        await reserve.watch()  # recounts each second, and ends the quiet fault
    assert not reserve._faults.is_active(DESCRIPTORS)
    assert len(lines.starting("fault ended")) == 1


async def test_accepting_pauses_in_the_middle_of_the_reserve(autojump_clock: MockClock) -> None:
    reserve, counter, _, lines = _reserve(0.5)
    _open(reserve, counter, 64)  # 74 open: one short of the pause
    await reserve.wait_for_room()  # at once
    _open(reserve, counter, 1)
    waited = trio.Event()

    async def waiter() -> None:
        await reserve.wait_for_room()
        waited.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.sleep(5)
        assert not waited.is_set()
        assert lines.starting("fault started: file descriptors ran out:")
        reserve.closed()
        counter.connections -= 1
        with trio.fail_after(1):
            await waited.wait()


def test_without_a_reserve_nothing_is_refused_and_failed_accepts_are_the_fault() -> None:
    reserve, counter, _, lines = _reserve(1.0)
    assert not any(_open(reserve, counter, 500))
    for _ in range(30):
        reserve.accept_failed(OSError(errno.EMFILE, "Too many open files"))
    assert lines.lines == [
        "fault started: file descriptors ran out: accept failed with EMFILE (Too many open"
        " files) (raise the open-file limit (systemd: LimitNOFILE=, a shell: ulimit -n) or add"
        " capacity; docs/operations.md, Open files)"
    ]


def test_the_others_are_recounted_at_most_once_a_second() -> None:
    reserve, counter, clock, _ = _reserve(0.9, limit=1000)
    assert counter.calls == 1
    _open(reserve, counter, 200)
    assert counter.calls == 1  # the connections are counted, not listed
    counter.others = 500  # the node opened files of its own
    assert reserve.open_fds() == 210  # not seen yet
    clock.now += 1
    assert reserve.open_fds() == 700
    assert counter.calls == 2


def test_the_real_count_and_limit() -> None:
    fds = count_open_fds()
    assert fds is not None
    assert 3 <= fds < open_file_limit()


def test_the_limit_is_read_again_at_each_recount() -> None:
    # an operator raises the soft limit of the running node (prlimit)
    clock, counter, limit = Clock(), Counter(10), [100]
    reserve = Reserve(Faults(clock=clock), 0.5, limit=lambda: limit[0], count=counter, clock=clock)
    assert (reserve.limit, reserve.refuse_above, reserve.pause_at) == (100, 50, 75)
    limit[0] = 1000
    assert reserve.limit == 100  # not before the next recount
    clock.now += 1
    reserve.open_fds()
    assert (reserve.limit, reserve.refuse_above, reserve.pause_at) == (1000, 500, 750)
    assert not any(_open(reserve, counter, 400))


def test_out_of_descriptors_the_count_does_not_vanish(monkeypatch: pytest.MonkeyPatch) -> None:
    fds = count_open_fds()
    assert fds is not None

    def listdir(folder: str) -> list[str]:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(os, "listdir", listdir)
    # every descriptor below the soft limit is open: that many at least
    assert count_open_fds() == max(fds, open_file_limit())

    def no_memory(folder: str) -> list[str]:
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(os, "listdir", no_memory)
    assert count_open_fds() == max(fds, open_file_limit())  # the last count


def _child_soft_limit() -> int:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import resource; print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])",
        ],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=restore_open_file_limit,
    )
    return int(done.stdout)


def test_children_get_the_original_soft_limit_back(monkeypatch: pytest.MonkeyPatch) -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    monkeypatch.setattr(descriptors, "_original_soft", None)
    assert _child_soft_limit() == soft  # not raised: left alone
    monkeypatch.setattr(descriptors, "_original_soft", min(soft, 1024) - 1)
    assert _child_soft_limit() == min(soft, 1024) - 1
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == soft  # this process keeps its own


_RAISE_THEN_SPAWN = """
import os, resource, subprocess, sys
from quart_mesh import descriptors
descriptors.raise_open_file_limit()
child = subprocess.run(
    [sys.executable, "-c", "import resource; print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])"],
    capture_output=True, text=True, check=True, preexec_fn=descriptors.restore_open_file_limit,
)
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], child.stdout.strip(),
      os.environ.get(descriptors.ORIGINAL_LIMIT_ENV))
"""


def test_the_raised_limit_is_the_nodes_alone() -> None:
    # a process started with soft 200: it raises its own limit to the hard
    # one, and a child it starts gets 200 back
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 200:
        pytest.skip("the hard limit leaves nothing to raise")

    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, hard))

    done = subprocess.run(
        [sys.executable, "-c", _RAISE_THEN_SPAWN],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=preexec,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    own, child, remembered = done.stdout.split()
    assert int(own) > 200
    assert (child, remembered) == ("200", "200")
