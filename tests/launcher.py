"""``python -m quart_mesh ARGS`` as a real process, without paying for
Python's start and quart_mesh's imports each time (~2 s, most of a short
command's run).

A launcher process (this module, run as ``python -m tests.launcher``)
imports :mod:`quart_mesh.cli` once, then forks one child per command: the
child takes the test's pipes as its standard input, output and error, the
environment and working folder the test gives, and runs ``quart_mesh`` as
``-m`` does (:func:`runpy.run_module` as ``__main__``), so its exit status,
its output and what it leaves behind (a traceback included) are those of the
command. What it does not repeat is the interpreter's start and the
imports: a command that would fail on import fails in the launcher, and
every command started as a process of its own (:func:`fresh`) still
covers them. ``MESH_TEST_FRESH_CLI=1`` makes :func:`run` start every
command that way.

The launcher is started on first use, once per test session (the pytest
process), and ends with it. It forks only while it has a single thread, so a
child is a copy of a process that never ran a thread nor a trio loop;
nothing of quart_mesh reads the environment on import (a child's own
environment replaces the launcher's before the command runs). Linux only
(``os.pidfd_open``); elsewhere :func:`run` is :func:`fresh`.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import gc
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

__all__ = ["fresh", "run"]

FRESH = os.environ.get("MESH_TEST_FRESH_CLI") == "1"


def _clean_env(env: dict[str, str] | None) -> dict[str, str]:
    """This process's environment without its ``MESH_*`` settings, plus *env*."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MESH_")}
    return {**environment, **(env or {})}


async def fresh(
    *args: str, stdin: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``python -m quart_mesh ARGS`` started from scratch (a new interpreter)."""
    import trio

    return await trio.run_process(
        [sys.executable, "-m", "quart_mesh", *args],
        stdin=stdin,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=_clean_env(env),
    )


async def run(
    *args: str, stdin: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``python -m quart_mesh ARGS`` as a process forked by the launcher
    (:func:`fresh` without one). Cancelled, the command is killed."""
    if FRESH or not hasattr(os, "pidfd_open"):
        return await fresh(*args, stdin=stdin, env=env)
    import trio

    launcher = await trio.to_thread.run_sync(_Launcher.get)
    return await launcher.run(list(args), stdin, _clean_env(env))


class _Launcher:
    """The test session's launcher process, and how to ask it for a command."""

    _lock = threading.Lock()
    _running: _Launcher | None = None

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="mesh-launcher-"))
        self.address = str(self.folder / "socket")
        self.log = self.folder / "launcher.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.launcher", self.address],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                env=_clean_env(None),
            )
        assert self.process.stdout is not None
        ready = self.process.stdout.readline()
        self.process.stdout.close()
        if ready != b"ready\n":
            self.process.wait()
            raise RuntimeError(f"the launcher did not start: {self.log.read_text()}")
        atexit.register(self.stop)

    @classmethod
    def get(cls) -> _Launcher:
        """The running launcher, started on first use (blocks for its start)."""
        with cls._lock:
            if cls._running is None or cls._running.process.poll() is not None:
                cls._running = cls()
            return cls._running

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        with contextlib.suppress(OSError):
            os.unlink(self.address)
            os.unlink(self.log)
            os.rmdir(self.folder)

    async def run(
        self, args: list[str], stdin: bytes, env: dict[str, str]
    ) -> subprocess.CompletedProcess[bytes]:
        import trio

        request = json.dumps({"args": args, "env": env, "cwd": os.getcwd()}).encode() + b"\n"
        pipes = [os.pipe() for _ in range(3)]  # the child's stdin, stdout, stderr
        ours = [pipes[0][1], pipes[1][0], pipes[2][0]]
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1]]
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with sock:
                await sock.connect(self.address)
                fds = array.array("i", theirs)
                sent = await sock.sendmsg(
                    [request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds.tobytes())]
                )
                while sent < len(request):
                    sent += await sock.send(request[sent:])
                for fd in theirs:
                    os.close(fd)
                theirs = []
                lines = _Lines(sock)
                pid = int((await lines.next())["pid"])
                stdout = bytearray()
                stderr = bytearray()
                writer = trio.lowlevel.FdStream(ours[0])
                readers = [trio.lowlevel.FdStream(fd) for fd in ours[1:]]
                ours = []
                try:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(_feed, writer, stdin)
                        nursery.start_soon(_drain, readers[0], stdout)
                        nursery.start_soon(_drain, readers[1], stderr)
                        status = int((await lines.next())["status"])
                except BaseException:
                    # cancelled (or failed): the command does not outlive the test
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    raise
                finally:
                    for stream in (writer, *readers):
                        with contextlib.suppress(trio.ClosedResourceError, OSError):
                            await stream.aclose()
        finally:
            for fd in (*ours, *theirs):
                os.close(fd)
        return subprocess.CompletedProcess(
            [sys.executable, "-m", "quart_mesh", *args], status, bytes(stdout), bytes(stderr)
        )


class _Lines:
    """JSON lines from the launcher's side of a connection."""

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.buffer = b""

    async def next(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            chunk = await self.sock.recv(4096)
            if not chunk:
                raise RuntimeError("the launcher hung up")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        answer: dict[str, Any] = json.loads(line)
        return answer


async def _feed(stream: Any, data: bytes) -> None:
    import trio

    # a command that exits without reading all of it closes the pipe: fine
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        if data:
            await stream.send_all(data)
    await stream.aclose()


async def _drain(stream: Any, into: bytearray) -> None:
    while chunk := await stream.receive_some(65536):
        into += chunk


# the launcher process ---------------------------------------------------------------


def _serve(address: str) -> dict[str, Any] | None:
    """Accept requests until terminated; in a forked child, return its request.

    One connection per command: the request (a JSON line, with the child's
    three descriptors), then the launcher answers ``{"pid"}`` at once and
    ``{"status"}`` (as :attr:`subprocess.Popen.returncode`) when it ends.
    """
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    #: pidfd -> (pid, the connection to answer)
    children: dict[int, tuple[int, socket.socket]] = {}
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        for key, _ in selector.select():
            if key.fileobj is listener:
                conn, _ = listener.accept()
                conn.setblocking(True)
                request, fds = _receive(conn)
                if request is None:
                    conn.close()
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                # only ever one thread here: a fork copies a consistent process
                assert threading.active_count() == 1, threading.enumerate()
                # what is here already is left out of the child's collections, and so
                # of its pages copied on write (at its exit above all: ~0.5 s without)
                gc.freeze()
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    for _, other in children.values():
                        other.close()
                    for pidfd in children:
                        os.close(pidfd)
                    conn.close()
                    for target, fd in enumerate(fds):
                        os.dup2(fd, target)
                        os.close(fd)
                    return request
                for fd in fds:
                    os.close(fd)
                conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
                pidfd = os.pidfd_open(pid)
                children[pidfd] = (pid, conn)
                selector.register(pidfd, selectors.EVENT_READ)
            else:
                pidfd = int(key.fd)
                selector.unregister(pidfd)
                os.close(pidfd)
                pid, conn = children.pop(pidfd)
                _, wait_status = os.waitpid(pid, 0)
                status = os.waitstatus_to_exitcode(wait_status)
                with contextlib.suppress(OSError), conn:
                    conn.sendall(json.dumps({"status": status}).encode() + b"\n")


def _receive(conn: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """A request line and the three descriptors sent with it."""
    data, fds, _, _ = socket.recv_fds(conn, 65536, 3)
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            for fd in fds:
                os.close(fd)
            return None, []
        data += chunk
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return None, []
    request: dict[str, Any] = json.loads(data)
    return request, fds


def _become(request: dict[str, Any]) -> None:
    """In the child: take the command's environment, folder and arguments."""
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = ["quart_mesh", *request["args"]]


if __name__ == "__main__":
    import runpy

    # what ``python -m quart_mesh`` imports before its main() runs
    import quart_mesh.cli  # noqa: F401

    child = _serve(sys.argv[1])
    if child is not None:
        _become(child)
        del child
        # as ``python -m quart_mesh`` runs it; its SystemExit ends this process
        runpy.run_module("quart_mesh", run_name="__main__", alter_sys=True)
