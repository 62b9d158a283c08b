"""``--pipe COMMAND``: one long-running process; messages in on its stdin,
replies out of its stdout."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
from dataclasses import dataclass
from functools import partial
from typing import Any

import trio

from mesh_bridge.backoff import Backoff
from mesh_bridge.handler import Outbox, Reply, clean_content, reply_from_object
from mesh_bridge.processes import LineReader, signal_group, terminate_group

log = logging.getLogger("mesh_bridge")

#: Longest line read from the process; a longer one is cut.
MAX_LINE_BYTES = 1 << 20
#: Seconds between SIGTERM and SIGKILL when the bridge stops the process.
KILL_GRACE = 5.0
#: A process that ran this long before it died restarts after the shortest delay.
STABLE_RUN = 60.0


@dataclass
class _Running:
    stdin: trio.abc.SendStream
    broken: bool = False


class PipeHandler:
    """Runs ``sh -c COMMAND`` for as long as the bridge runs, restarting it
    (0.5 s doubling to 30 s, back to 0.5 s after a run of a minute) whenever it
    exits.

    Each message is written to its stdin as one line of JSON (the event as
    received); writing it is what "handled" means here. Each line the process
    prints is a reply: a JSON object ``{"content", "roomId"?, "threadId"?}``, or
    plain text for the room of the last message written. Replies need not
    follow messages one for one, and may come at any time.
    """

    def __init__(self, command: str, outbox: Outbox, *, max_reply_bytes: int) -> None:
        self.command = command
        self.outbox = outbox
        self.max_reply_bytes = max_reply_bytes
        self._running: _Running | None = None
        self._changed = trio.Event()
        self._last_room: str | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Supervise the process until cancelled; cancelling stops it (SIGTERM
        to its process group, SIGKILL after ``KILL_GRACE`` seconds)."""
        backoff = Backoff()
        task_status.started()
        while True:
            started = trio.current_time()
            status = await self._run_once()
            if trio.current_time() - started >= STABLE_RUN:
                backoff.reset()
            delay = backoff.next_delay()
            log.warning("pipe process exited with status %s; restarting in %g s", status, delay)
            await trio.sleep(delay)

    async def _run_once(self) -> int | None:
        async with trio.open_nursery() as nursery:
            try:
                process: trio.Process = await nursery.start(
                    partial(
                        trio.run_process,
                        ["sh", "-c", self.command],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        check=False,
                        start_new_session=True,
                        deliver_cancel=terminate_group(KILL_GRACE),
                    )
                )
            except OSError as exc:
                log.error("cannot start the pipe process: %s", exc)
                return None
            assert process.stdin is not None
            assert process.stdout is not None
            log.info("pipe process started (pid %d)", process.pid)
            self._set_running(_Running(process.stdin))
            try:
                async with process.stdout:
                    await self._read_replies(LineReader(process.stdout, MAX_LINE_BYTES))
                await process.wait()
            finally:
                self._set_running(None)
                await trio.aclose_forcefully(process.stdin)
        # what the process left behind in its group goes with it
        signal_group(process, signal.SIGKILL)
        return process.returncode

    def _set_running(self, running: _Running | None) -> None:
        self._running = running
        self._changed.set()
        self._changed = trio.Event()

    async def _read_replies(self, lines: LineReader) -> None:
        while (line := await lines.next_line()) is not None:
            reply = self._parse(line.decode("utf-8", errors="replace"))
            if reply is not None:
                await self.outbox.put(reply)

    def _parse(self, line: str) -> Reply | None:
        if line.lstrip().startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                data = None
            if isinstance(data, dict):
                return reply_from_object(data, self._last_room, self.max_reply_bytes, "pipe")
        content = clean_content(line, self.max_reply_bytes)
        if content is None:
            return None
        if self._last_room is None:
            log.warning("pipe printed a line before any message: no room to reply in")
            return None
        return Reply(self._last_room, content)

    async def handle(self, message: dict[str, Any]) -> None:
        """Write *message* to the process's stdin. If the process is down or
        dies before taking the line, wait for the next one and write it there.

        A process that stops reading its stdin makes this wait (and so the
        whole bridge) once the pipe's buffer is full.
        """
        line = (json.dumps(message) + "\n").encode()
        while True:
            running = self._running
            if running is None or running.broken:
                await self._changed.wait()
                continue
            try:
                await running.stdin.send_all(line)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                running.broken = True
                log.warning(
                    "pipe process gone before taking message %s; it goes to the next one",
                    message.get("messageId"),
                )
                continue
            self._last_room = message["roomId"]
            return
