"""The bot supervisor's restarts on an autojump clock: exponential backoff
between crashes (reset after a stable run), at once when a bot asks to be
restarted, never after a configuration failure. The bot processes are
stood in for by a fake ``_run_once``, so no process starts and no real time
passes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from quart_mesh.address import PublicAddress
from quart_mesh.bots.supervisor import EX_CONFIG, EX_TEMPFAIL, ManagedBot, Supervisor
from quart_mesh.config import Settings
from quart_mesh.records import Participant
from quart_mesh.services.agents import BotSpec
from quart_mesh.store.agents import AgentRow

pytestmark = pytest.mark.timeout(10)


class NoStore:
    """The supervisor's store: empty as the supervisor starts, then listing
    the one bot ``b1`` the tests launch right after (the supervisor stops
    bots the store no longer lists); writes go nowhere."""

    backend = "sqlite"

    def __init__(self) -> None:
        self.reads = 0

    async def read(self, fn: Callable[..., Any]) -> list[Any]:
        await trio.lowlevel.checkpoint()
        self.reads += 1
        if self.reads == 1:
            return []
        participant = Participant("b1", "b1", "bot", "echo", "agent", 0)
        return [AgentRow(participant, managed=True, webhook_url=None)]

    async def write(self, fn: Callable[..., Any]) -> None:
        await trio.lowlevel.checkpoint()


class Script:
    """Plays the bot's runs: each (seconds, exit status) in turn, recording
    when each run started and ended; *done* is set as the last one ends."""

    def __init__(self, *runs: tuple[float, int]) -> None:
        self.runs = list(runs)
        self.spans: list[tuple[float, float]] = []
        self.done = trio.Event()

    async def __call__(self, bot: ManagedBot, base: str) -> int:
        assert base == "http://mesh.test"
        start = trio.current_time()
        bot.status = "running"
        seconds, status = self.runs.pop(0)
        await trio.sleep(seconds)
        self.spans.append((start, trio.current_time()))
        if not self.runs:
            self.done.set()
        return status

    def gaps(self) -> list[float]:
        """The time between each run's end and the next one's start."""
        return [round(b[0] - a[1], 6) for a, b in zip(self.spans, self.spans[1:], strict=False)]


async def supervise(tmp_path: Path, script: Script) -> ManagedBot:
    """Run one bot under a supervisor until *script* has played out."""
    supervisor = Supervisor(
        Settings(data_dir=tmp_path),
        NoStore(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]  # no tokens are issued: _run_once is the script
        PublicAddress("http://mesh.test"),
    )
    supervisor._run_once = script  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        supervisor.launch(BotSpec("b1", "crashy", "echo", None, (), False))
        await script.done.wait()
        bot = supervisor.bots["b1"]
        nursery.cancel_scope.cancel()
    return bot


def about(seconds: float) -> tuple[float, float]:
    """The range a backoff delay of *seconds* falls in, with its ±20% jitter."""
    return (seconds * 0.8, seconds * 1.2)


async def test_crashes_back_off_and_a_stable_run_resets_it(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    script = Script((1, 1), (1, 1), (1, 1), (61, 1), (1, EX_TEMPFAIL), (1, EX_CONFIG))
    bot = await supervise(tmp_path, script)
    gaps = script.gaps()
    # 0.5, 1, 2 s after quick crashes; after a minute's run it starts again
    # from 0.5 s; a requested restart is at once
    for gap, expected in zip(gaps[:4], (0.5, 1, 2, 0.5), strict=True):
        low, high = about(expected)
        assert low <= gap <= high, gaps
    assert gaps[4] == 0
    # a configuration failure ends it
    assert (bot.status, bot.restarts) == ("failed", 5)
    assert bot.detail == "cannot run as configured"


async def test_the_backoff_is_capped(tmp_path: Path, autojump_clock: MockClock) -> None:
    script = Script(*[(0, 1)] * 10, (0, EX_CONFIG))
    bot = await supervise(tmp_path, script)
    gaps = script.gaps()
    for gap, expected in zip(gaps[:6], (0.5, 1, 2, 4, 8, 16), strict=True):
        low, high = about(expected)
        assert low <= gap <= high, gaps
    low, high = about(30)
    assert all(low <= gap <= high for gap in gaps[6:]), gaps  # 32 would be past the cap
    assert bot.restarts == 10
