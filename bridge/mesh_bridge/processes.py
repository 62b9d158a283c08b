"""Child processes: each runs in its own process group so that a timeout or a
shutdown stops the script *and* whatever it started (``sh`` does not pass
SIGTERM on to its children)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable

import trio

log = logging.getLogger("mesh_bridge")


def signal_group(process: trio.Process, signum: int) -> None:
    """Send *signum* to the process group *process* leads (started with
    ``start_new_session=True``); nothing if the group is gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def terminate_group(grace: float) -> Callable[[trio.Process], Awaitable[None]]:
    """A ``deliver_cancel`` for ``trio.run_process``: SIGTERM to the group,
    then SIGKILL to whatever is left after *grace* seconds."""

    async def deliver_cancel(process: trio.Process) -> None:
        signal_group(process, signal.SIGTERM)
        with trio.move_on_after(grace):
            await process.wait()
        signal_group(process, signal.SIGKILL)

    return deliver_cancel


async def read_bounded(stream: trio.abc.ReceiveStream, limit: int) -> tuple[bytes, bool]:
    """Read *stream* to its end, keeping at most *limit* bytes (the rest is
    read and dropped so the writer never blocks). Returns the bytes and whether
    some were dropped."""
    kept = bytearray()
    dropped = False
    while chunk := await stream.receive_some(65536):
        room = limit - len(kept)
        if len(chunk) > room:
            dropped = True
        kept += chunk[: max(room, 0)]
    return bytes(kept), dropped


class LineReader:
    """Lines from a byte stream, each at most *limit* bytes: a longer line is
    cut to *limit* and the rest of it, up to its newline, dropped."""

    def __init__(self, stream: trio.abc.ReceiveStream, limit: int) -> None:
        self._stream = stream
        self._limit = limit
        self._buffer = bytearray()
        self._eof = False
        self._discarding = False

    async def next_line(self) -> bytes | None:
        """The next line without its newline; ``None`` at the end of the stream."""
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                if self._discarding:
                    self._discarding = False
                    continue
                if len(line) > self._limit:
                    log.warning("a line over %d bytes was cut", self._limit)
                    line = line[: self._limit]
                return line
            if self._discarding:
                self._buffer.clear()
            elif len(self._buffer) > self._limit:
                line = bytes(self._buffer[: self._limit])
                self._buffer.clear()
                self._discarding = True
                log.warning("a line over %d bytes was cut", self._limit)
                return line
            if self._eof:
                if self._buffer:
                    line = bytes(self._buffer)
                    self._buffer.clear()
                    return line
                return None
            chunk = await self._stream.receive_some(65536)
            if chunk:
                self._buffer += chunk
            else:
                self._eof = True
