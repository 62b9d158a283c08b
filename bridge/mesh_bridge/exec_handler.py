"""``--exec SCRIPT``: run a script once per message; its output is the reply."""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import subprocess
from functools import partial
from pathlib import Path
from typing import Any

import trio

from mesh_bridge.handler import Outbox, Reply, clean_content
from mesh_bridge.processes import read_bounded, signal_group, terminate_group

log = logging.getLogger("mesh_bridge")

#: Output kept from one run; more is read and dropped (the reply is cut to the
#: node's message size anyway).
MAX_OUTPUT_BYTES = 1 << 20
#: Seconds between SIGTERM and SIGKILL for a script that timed out.
KILL_GRACE = 2.0


def command_for(script: Path) -> list[str]:
    """The script itself if it is executable, otherwise ``sh SCRIPT``. (An
    executable the system cannot start, such as a script without a ``#!``
    line, is also run with ``sh``, as shells do.)"""
    if os.access(script, os.X_OK):
        return [str(script)]
    return ["sh", str(script)]


def message_environment(message: dict[str, Any]) -> dict[str, str]:
    """The variables a script gets for *message* (added to the bridge's own
    environment)."""

    def text(key: str) -> str:
        value = message.get(key)
        return "" if value is None else str(value)

    return {
        "MESH_CONTENT": text("content"),
        "MESH_SENDER_NAME": text("senderName"),
        "MESH_SENDER_ID": text("senderId"),
        "MESH_ROOM_ID": text("roomId"),
        "MESH_MESSAGE_ID": text("messageId"),
        "MESH_THREAD_ID": text("threadId"),
        "MESH_CURSOR": text("cursor"),
        "MESH_EVENT": json.dumps(message),
    }


class ExecHandler:
    """Runs *script* for each message with the message in ``MESH_*`` variables,
    stdin from ``/dev/null`` and stderr shared with the bridge (so the script's
    own complaints land in the bridge's log). Its stripped stdout, if not
    empty, is the reply in the message's room. A script that exits non-zero
    gives no reply; one that runs past *timeout* seconds is stopped (SIGTERM,
    then SIGKILL, to its whole process group). Both are logged."""

    def __init__(
        self, script: Path, outbox: Outbox, *, timeout: float, max_reply_bytes: int
    ) -> None:
        self.script = script
        self.command = command_for(script)
        self.outbox = outbox
        self.timeout = timeout
        self.max_reply_bytes = max_reply_bytes

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep_forever()

    async def handle(self, message: dict[str, Any]) -> None:
        output = await self._run_script(message)
        if output is None:
            return
        content = clean_content(output.decode("utf-8", errors="replace"), self.max_reply_bytes)
        if content is None:
            log.info("script printed nothing for message %s: no reply", message.get("messageId"))
            return
        await self.outbox.put(Reply(message["roomId"], content))

    async def _start(self, nursery: trio.Nursery, env: dict[str, str]) -> trio.Process:
        start = partial(
            trio.run_process,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            env=env,
            check=False,
            start_new_session=True,
            deliver_cancel=terminate_group(KILL_GRACE),
        )
        try:
            process: trio.Process = await nursery.start(start, self.command)
        except OSError as exc:
            if exc.errno != errno.ENOEXEC or self.command[0] == "sh":
                raise
            self.command = ["sh", str(self.script)]
            process = await nursery.start(start, self.command)
        return process

    async def _run_script(self, message: dict[str, Any]) -> bytes | None:
        """The script's stdout, or ``None`` if it failed or timed out.

        Cancellation (shutdown) stops the script's process group the same way
        a timeout does.
        """
        label = message.get("messageId")
        env = {**os.environ, **message_environment(message)}
        async with trio.open_nursery() as nursery:
            try:
                process = await self._start(nursery, env)
            except OSError as exc:
                log.warning("cannot run %s on message %s: %s", self.script, label, exc)
                return None
            assert process.stdout is not None
            with trio.move_on_after(self.timeout) as deadline:
                async with process.stdout:
                    output, cut = await read_bounded(process.stdout, MAX_OUTPUT_BYTES)
                await process.wait()
            if deadline.cancelled_caught:
                nursery.cancel_scope.cancel()
        if deadline.cancelled_caught:
            # the script may have exited leaving children that hold its stdout
            signal_group(process, signal.SIGKILL)
            log.warning(
                "script timed out after %g s on message %s and was stopped: no reply",
                self.timeout,
                label,
            )
            return None
        if process.returncode != 0:
            log.warning(
                "script exited with status %s on message %s: no reply",
                process.returncode,
                label,
            )
            return None
        if cut:
            log.warning("script output over %d bytes: the rest was dropped", MAX_OUTPUT_BYTES)
        return output
