"""A managed bot that cannot even be started, on an autojump clock: the
spawn fails with ``OSError`` (out of file descriptors, out of processes),
which is a run that failed — logged, and tried again after the usual
backoff — not an error that ends the supervisor and with it the node.

``trio.run_process`` is stood in for, so no process starts and no real time
passes: it fails as many times as asked, then "runs" a bot that exits at
once with the configuration failure status (which ends the test).
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from quart_mesh.address import PublicAddress
from quart_mesh.bots.supervisor import EX_CONFIG, ManagedBot, Supervisor
from quart_mesh.config import Settings
from quart_mesh.security import TokenClaims
from quart_mesh.services.agents import BotSpec
from tests.bots.test_supervisor import NoStore, about

pytestmark = pytest.mark.timeout(10)


class Tokens:
    def mint(self, participant_id: str, kind: str, ttl: int) -> tuple[str, TokenClaims]:
        return "token", TokenClaims(participant_id, kind, "token-id", ttl, 0)


class _Ended(trio.abc.ReceiveStream):
    """A pipe the (stand-in) bot has closed."""

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        return b""

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


class _Exited:
    pid = 4242
    returncode = EX_CONFIG
    stdout = _Ended()
    stderr = _Ended()


class FailingSpawn:
    """``trio.run_process`` failing *failures* times, then a bot that exits."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts: list[float] = []
        #: the bot's (restarts, detail) as each attempt began
        self.seen: list[tuple[int, str | None]] = []
        self.bot: ManagedBot | None = None
        self.done = trio.Event()

    async def __call__(self, command: Any, *, task_status: Any, **_: Any) -> None:
        self.attempts.append(trio.current_time())
        assert self.bot is not None
        self.seen.append((self.bot.restarts, self.bot.detail))
        await trio.lowlevel.checkpoint()
        if len(self.attempts) <= self.failures:
            raise OSError(errno.EMFILE, "Too many open files")
        task_status.started(_Exited())
        self.done.set()


async def test_a_bot_that_cannot_be_spawned_is_retried_with_backoff(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    spawn = FailingSpawn(failures=3)
    monkeypatch.setattr(trio, "run_process", spawn)  # as the supervisor calls it
    supervisor = Supervisor(
        Settings(data_dir=tmp_path),
        NoStore(),  # type: ignore[arg-type]
        Tokens(),  # type: ignore[arg-type]
        PublicAddress("http://mesh.test"),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        supervisor.launch(BotSpec("b1", "unborn", "echo", None, (), False))
        bot = spawn.bot = supervisor.bots["b1"]
        await spawn.done.wait()
        while bot.status != "failed":
            await trio.sleep(0.1)
        nursery.cancel_scope.cancel()
    # each failed spawn waited 0.5, 1, 2 s (with jitter) before the next
    gaps = [b - a for a, b in zip(spawn.attempts, spawn.attempts[1:], strict=False)]
    for gap, expected in zip(gaps, (0.5, 1, 2), strict=True):
        low, high = about(expected)
        assert low <= gap <= high, gaps
    why = "could not be started (Too many open files)"
    assert spawn.seen == [(0, None), (1, why), (2, why), (3, why)]
    # then it started, and exited with the configuration status: not restarted
    assert (bot.status, bot.restarts) == ("failed", 3)
