"""The control socket: the operator's way into a running node on SQLite.

A node on SQLite is one process that holds its data folder (``data_folder.py``)
and keeps participants and signed-out tokens in memory; a chore run by
another process could not even open the store, and the node's caches and
open sessions would not learn of it. So, while it runs, the node listens on
``<data-dir>/control.sock``, a Unix socket (mode 0600, in a folder of mode
0700), and runs there the chores ``quart-mesh user|tokens|status`` send it,
with its own services (``services/operator.py``): a change takes effect
at once, as if made through the API.

Protocol: the client sends one JSON object on one line (at most
:data:`MAX_REQUEST` bytes, within :data:`REQUEST_TIMEOUT` seconds) and reads
one JSON object on one line back; then the connection closes. A peer whose
uid is neither the node's nor root's (``SO_PEERCRED``, where the system has
it) is refused; so are a line too long, too slow, not JSON or not a known
request, each with an error answer (``{"ok": false, "error", "code"}``).
Nothing a client sends can end the node: a chore that fails with a bug is
logged and answered ``internal_error``, as an HTTP request would get a 500.

A stale socket file (left by a node killed with SIGKILL) is replaced at
start; the file is removed when the node stops. Paths longer than a Unix
socket address allows are reached through ``/proc/self/fd`` (Linux).

On PostgreSQL there is no control socket: the chores run in the command's
own process, one more process of the mesh, and reach the others through the
cluster's bus (decision 0034).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import struct
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import trio

__all__ = [
    "CONTROL_SOCKET",
    "MAX_REQUEST",
    "ControlSocket",
    "ControlUnavailable",
    "call",
]

log = logging.getLogger(__name__)

#: the socket's name in the data folder
CONTROL_SOCKET = "control.sock"
#: the longest request line, bytes
MAX_REQUEST = 64 * 1024
#: the longest answer line a client reads, bytes
MAX_ANSWER = 16 * 1024 * 1024
#: how long a client has to send its request line, seconds
REQUEST_TIMEOUT = 10.0
#: how long the node gives a client to read its answer, seconds
ANSWER_TIMEOUT = 10.0
#: requests handled at once (more wait to be read)
MAX_CONNECTIONS = 4
#: below this length a path is bound as it is (a Unix address holds 108 bytes)
_SHORT = 100

Handler = Callable[[Any], Awaitable[dict[str, Any]]]


class ControlUnavailable(OSError):
    """The node's control socket cannot be reached (not there, refused)."""


class _TooLarge(Exception):
    pass


class ControlSocket:
    """Serves *handler* on the Unix socket *path* (see the module docstring).

    *handler* takes the decoded request and returns the answer; it should
    answer refusals itself (``{"ok": false, ...}``); an exception it raises is
    logged and answered ``internal_error``.
    """

    def __init__(self, path: Path, handler: Handler) -> None:
        self.path = path
        self._handler = handler
        self._limiter = trio.CapacityLimiter(MAX_CONNECTIONS)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; started once the socket accepts.

        A folder where no socket can be made is logged, and the node serves
        without one.
        """
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                # the caller holds the data folder: a socket file here is stale
                self.path.unlink(missing_ok=True)
                with _address(self.path) as address:
                    await sock.bind(address)
            except OSError as error:
                # a folder that cannot hold a socket (some network or container
                # mounts): the node serves without; chores then need it stopped
                log.warning(
                    "no control socket at %s (%s): 'quart-mesh user|tokens|status' "
                    "will work only while the node is stopped",
                    self.path,
                    error,
                )
                task_status.started()
                await trio.sleep_forever()
            try:
                os.chmod(self.path, 0o600)
                sock.listen(MAX_CONNECTIONS * 4)
                listener = trio.SocketListener(sock)
                log.debug("control socket listening on %s", self.path)
                async with trio.open_nursery() as nursery:
                    await nursery.start(trio.serve_listeners, self._serve, [listener])
                    task_status.started()
            finally:
                with contextlib.suppress(OSError):
                    self.path.unlink()
        finally:
            sock.close()

    async def _serve(self, stream: trio.SocketStream) -> None:
        async with stream:
            try:
                answer = await self._answer(stream)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return  # the client went away
            except Exception:  # nothing a client sends may end the node
                log.exception("control socket: a connection failed")
                return
            if answer is None:
                return
            with (
                trio.move_on_after(ANSWER_TIMEOUT),
                contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError),
            ):
                try:
                    data = _line(answer)
                except (ValueError, TypeError):  # not JSON-encodable (a bug): say so
                    log.exception("control socket: an answer could not be encoded")
                    data = _line(_error("internal error (see the node's log)", "internal_error"))
                await stream.send_all(data)

    async def _answer(self, stream: trio.SocketStream) -> dict[str, Any] | None:
        uid = _peer_uid(stream.socket)
        if uid is not None and uid not in (os.getuid(), 0):
            log.warning("control socket: refused a client of uid %d", uid)
            return _error("only the node's own user (or root) may use this socket", "forbidden")
        async with self._limiter:
            try:
                with trio.fail_after(REQUEST_TIMEOUT):
                    line = await _read_line(stream, MAX_REQUEST)
            except _TooLarge:
                return _error(f"a request is one line of at most {MAX_REQUEST} bytes", "too_large")
            except trio.TooSlowError:
                return _error("no request line in time", "timeout")
            if line is None:
                return None
            try:
                request = json.loads(line)
                # a lone surrogate ("\\ud800") decodes, but is no text to act on
                json.dumps(request, ensure_ascii=False).encode()
            except (ValueError, RecursionError):  # not UTF-8, not JSON, too deep
                return _error("a request is one JSON object on one line", "bad_request")
            try:
                return await self._handler(request)
            except Exception:
                log.exception("control socket: a request failed")
                return _error("internal error (see the node's log)", "internal_error")


async def call(path: Path, request: dict[str, Any]) -> dict[str, Any]:
    """Send *request* to the control socket at *path*; the node's answer.
    Put a deadline around it (a chore may wait for a busy store).

    Raises:
        ControlUnavailable: no node answers there, or the answer is not one.
    """
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with _address(path) as address:
            await sock.connect(address)
    except OSError as exc:
        sock.close()
        raise ControlUnavailable(f"cannot reach the node's control socket {path}: {exc}") from exc
    async with trio.SocketStream(sock) as stream:
        try:
            await stream.send_all(_line(request))
            line = await _read_line(stream, MAX_ANSWER)
        except (trio.BrokenResourceError, _TooLarge) as exc:
            raise ControlUnavailable(f"the node's control socket failed: {exc}") from exc
    try:
        answer = json.loads(line or b"")
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise ControlUnavailable(f"the node's control socket gave no answer ({path})")
    return answer


async def _read_line(stream: trio.SocketStream, limit: int) -> bytes | None:
    """The bytes up to the first newline (or the end of the stream); ``None``
    if the stream ended with none.

    Raises:
        _TooLarge: more than *limit* bytes without a newline.
    """
    buffer = bytearray()
    while True:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return bytes(buffer) if buffer else None
        end = chunk.find(b"\n")
        buffer += chunk if end < 0 else chunk[:end]
        if len(buffer) > limit:
            raise _TooLarge
        if end >= 0:
            return bytes(buffer)


def _line(message: dict[str, Any]) -> bytes:
    # ASCII: a lone surrogate a client sent (JSON allows "\\ud800") encodes too
    return json.dumps(message).encode() + b"\n"


def _error(message: str, code: str) -> dict[str, Any]:
    return {"ok": False, "error": message, "code": code}


def _peer_uid(sock: trio.socket.SocketType) -> int | None:
    """The uid of the process at the other end, where the system says."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:  # not Linux: the folder's mode 0700 still guards it
        return None
    credentials = sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", credentials)
    return int(uid)


@contextlib.contextmanager
def _address(path: Path) -> Iterator[str]:
    """*path* as a Unix socket address: itself, or (too long for one) the
    same file through ``/proc/self/fd/<the folder>``, while the block runs."""
    if len(os.fsencode(path)) < _SHORT or not os.path.isdir("/proc/self/fd"):
        yield str(path)
        return
    fd = os.open(path.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)
