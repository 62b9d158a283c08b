"""``python -m quart_mesh ARGS`` as a real process, without paying for
Python's start and quart_mesh's imports each time (~2 s, most of a short
command's run and of a node's start).

A launcher process (this module, run as ``python -m tests.launcher``)
imports :mod:`quart_mesh.cli` once, then forks one child per command: the
child takes the test's pipes as its standard input, output and error, the
environment and working folder the test gives, and runs ``quart_mesh`` as
``-m`` does (:func:`runpy.run_module` as ``__main__``), so its exit status,
its output, its signals and what it leaves behind (a traceback included)
are those of the command. What it does not repeat is the interpreter's start
and the imports: a command that would fail on import fails in the launcher,
and the commands the tests still start as processes of their own (``fresh``)
cover them. ``MESH_TEST_FRESH_CLI=1`` makes every command start that way.

The launcher is started on first use, once per test session (the pytest
process), and ends with it. It forks only while it has a single thread, so a
child is a copy of a process that never ran a thread nor a trio loop;
nothing of quart_mesh reads the environment on import (a child's own
environment replaces the launcher's before the command runs; one whose
``PYTHON*`` settings differ from the launcher's, which the interpreter reads
as it starts, gets a new interpreter, but for ``PYTHONUNBUFFERED``, which the
child applies to its standard streams). Linux only (``os.pidfd_open``);
elsewhere every command starts a new interpreter.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import gc
import io
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

__all__ = ["Process", "open_process", "run"]

FRESH = os.environ.get("MESH_TEST_FRESH_CLI") == "1" or not hasattr(os, "pidfd_open")
#: the interpreter settings a fork can honour (see :func:`_stdio`) or that
#: need not match (``PYTHONPATH`` does: sys.path is set as it starts)
_APPLIED = {"PYTHONUNBUFFERED"}
_LOCALE = {"LANG", "LC_ALL", "LC_CTYPE"}


def clean_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without its ``MESH_*`` settings, plus *env*."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MESH_")}
    return {**environment, **(env or {})}


def _command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "quart_mesh", *args]


async def run(
    *args: str, stdin: bytes = b"", env: dict[str, str] | None = None, fresh: bool = False
) -> subprocess.CompletedProcess[bytes]:
    """``python -m quart_mesh ARGS`` to its end, its output captured, with
    this process's environment but its ``MESH_*`` settings, plus *env*:
    forked by the launcher, or with *fresh* a new interpreter. Cancelled,
    the command is killed."""
    import trio

    environment = clean_env(env)
    launcher = None if fresh else await _Launcher.for_env(environment)
    if launcher is None:
        return await trio.run_process(
            _command(list(args)),
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=environment,
        )
    process = await launcher.spawn(list(args), environment, stderr=subprocess.PIPE)
    assert process.stdin is not None
    assert process.stdout is not None
    assert process.stderr is not None
    stdout = bytearray()
    stderr = bytearray()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_feed, process.stdin, stdin)
            nursery.start_soon(_drain, process.stdout, stdout)
            nursery.start_soon(_drain, process.stderr, stderr)
            status = await process.wait()
    except BaseException:
        process.kill()  # cancelled, or the test failed: the command goes too
        raise
    finally:
        await process.aclose()
    return subprocess.CompletedProcess(process.args, status, bytes(stdout), bytes(stderr))


async def open_process(args: list[str], *, env: dict[str, str], stderr: int | None = None) -> Any:
    """``python -m quart_mesh ARGS`` started with exactly *env*, its standard
    output a pipe (*stderr*: ``subprocess.STDOUT`` into it, ``PIPE`` one of
    its own, ``None`` this process's), its standard input this process's: a
    :class:`Process` forked by the launcher, or (``MESH_TEST_FRESH_CLI=1``,
    or *env* asks for an interpreter of its own) a :class:`trio.Process`.
    Either way the caller waits for it (or kills it)."""
    import trio

    launcher = await _Launcher.for_env(env)
    if launcher is None:
        return await trio.lowlevel.open_process(
            _command(args), stdout=subprocess.PIPE, stderr=stderr, env=env
        )
    return await launcher.spawn(args, env, stdin=False, stderr=stderr)


class Process:
    """A command forked by the launcher, as much of :class:`trio.Process` as
    the tests use: its pipes (trio streams), ``returncode``, ``wait()``,
    signals. It is the launcher's child, not this process's: the launcher
    reaps it and sends its status here."""

    def __init__(
        self,
        args: list[str],
        pid: int,
        answers: socket.socket,
        pipes: tuple[Any, Any, Any],
    ) -> None:
        self.args = args
        self.pid = pid
        self.stdin, self.stdout, self.stderr = pipes
        self._answers = answers
        self._buffer = b""
        self._status: int | None = None

    def __repr__(self) -> str:
        return f"<launched {self.args!r}: pid {self.pid}, status {self._status}>"

    @property
    def returncode(self) -> int | None:
        """The exit status (negative: the signal that ended it), or ``None``
        while it runs."""
        return self.poll()

    def poll(self) -> int | None:
        while self._status is None and self._answers.fileno() != -1:
            try:
                chunk = self._answers.recv(4096)
            except BlockingIOError:
                break
            self._take(chunk)
        return self._status

    async def wait(self) -> int:
        import trio

        while self.poll() is None:
            if self._answers.fileno() == -1:
                raise RuntimeError(f"{self.args} was closed before its status came")
            # (closed meanwhile: another task read the status, or closed it)
            with contextlib.suppress(trio.ClosedResourceError):
                await trio.lowlevel.wait_readable(self._answers)
        assert self._status is not None
        return self._status

    def _take(self, chunk: bytes) -> None:
        if not chunk:
            raise RuntimeError(f"the launcher hung up before {self.args} ended")
        self._buffer += chunk
        if self._buffer.endswith(b"\n"):
            self._status = int(json.loads(self._buffer)["status"])
            self._close_answers()

    def _close_answers(self) -> None:
        """Close the status socket, waking a task waiting on it."""
        import trio

        with contextlib.suppress(RuntimeError):  # (not in a Trio run)
            trio.lowlevel.notify_closing(self._answers)
        self._answers.close()

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def aclose(self) -> None:
        """Close the pipes (not the process: wait for it, or kill it first)."""
        import trio

        if self._status is None:
            self._close_answers()  # its status is not waited for any longer
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                with contextlib.suppress(trio.ClosedResourceError, OSError):
                    await stream.aclose()


class _Launcher:
    """The test session's launcher process, and how to ask it for a command."""

    _lock = threading.Lock()
    _running: _Launcher | None = None

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="mesh-launcher-"))
        self.address = str(self.folder / "socket")
        self.log = self.folder / "launcher.log"
        self.env = clean_env()
        with self.log.open("wb") as log:
            # its standard input is a pipe this process never writes to: when
            # this process ends, however it ends, the launcher reads its end
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.launcher", self.address],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=self.env,
            )
        assert self.process.stdout is not None
        ready = self.process.stdout.readline()
        self.process.stdout.close()
        if ready != b"ready\n":
            self.process.wait()
            raise RuntimeError(f"the launcher did not start: {self.log.read_text()}")
        atexit.register(self.stop)

    @classmethod
    async def for_env(cls, env: dict[str, str]) -> _Launcher | None:
        """The running launcher (started on first use), or ``None`` when a
        command with *env* needs an interpreter of its own."""
        if FRESH:
            return None
        import trio

        launcher = await trio.to_thread.run_sync(cls._get)
        if _interpreter(env) != _interpreter(launcher.env):
            return None
        return launcher

    @classmethod
    def _get(cls) -> _Launcher:
        with cls._lock:
            if cls._running is None or cls._running.process.poll() is not None:
                cls._running = cls()
            return cls._running

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
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

    async def spawn(
        self, args: list[str], env: dict[str, str], *, stdin: bool = True, stderr: int | None
    ) -> Process:
        """Fork ``quart_mesh ARGS`` with *env*: its standard input a pipe
        (or with no *stdin*, this process's), its output a pipe, its error
        as :func:`open_process` says."""
        import trio

        request = json.dumps({"args": args, "env": env, "cwd": os.getcwd()}).encode() + b"\n"
        ours: list[int] = []  # closed here on failure
        theirs: list[int] = []  # the child's 0, 1, 2: closed here once sent
        try:
            if stdin:
                reader, writer = os.pipe()
                theirs.append(reader)
                ours.append(writer)
            else:
                theirs.append(os.dup(0))
            reader, writer = os.pipe()
            theirs.append(writer)
            ours.append(reader)
            if stderr == subprocess.PIPE:
                reader, writer = os.pipe()
                theirs.append(writer)
                ours.append(reader)
            elif stderr == subprocess.STDOUT:
                theirs.append(os.dup(theirs[1]))
            else:
                assert stderr is None, stderr
                theirs.append(os.dup(2))
            answers = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                with trio.fail_after(30):  # the launcher answers at once, or is stuck
                    wrapped = trio.socket.from_stdlib_socket(answers)
                    await wrapped.connect(self.address)
                    fds = array.array("i", theirs).tobytes()
                    sent = await wrapped.sendmsg(
                        [request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)]
                    )
                    while sent < len(request):
                        sent += await wrapped.send(request[sent:])
                    for fd in theirs:
                        os.close(fd)
                    theirs = []
                    line = b""
                    while not line.endswith(b"\n"):
                        chunk = await wrapped.recv(1)  # the status follows: leave it
                        if not chunk:
                            raise RuntimeError(f"the launcher failed: {self.log.read_text()}")
                        line += chunk
            except BaseException:
                answers.close()
                raise
        except BaseException:
            for fd in (*ours, *theirs):
                os.close(fd)
            raise
        pid = int(json.loads(line)["pid"])
        streams = [trio.lowlevel.FdStream(fd) for fd in ours]
        pipes = (
            streams.pop(0) if stdin else None,
            streams.pop(0),
            streams.pop(0) if stderr == subprocess.PIPE else None,
        )
        return Process(_command(args), pid, answers, pipes)


def _interpreter(env: dict[str, str]) -> dict[str, str]:
    """What in *env* an interpreter reads as it starts (and a fork cannot
    change): its own variables, and the locale (the encoding of its standard
    streams and file names is chosen then)."""
    return {
        k: v
        for k, v in env.items()
        if (k.startswith("PYTHON") and k not in _APPLIED) or k in _LOCALE
    }


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
    """Accept requests until the test session ends (its end of the standard
    input closes) or terminated; in a forked child, return its request.

    One connection per command: the request (a JSON line, with the child's
    three descriptors), then the launcher answers ``{"pid"}`` at once and
    ``{"status"}`` (as :attr:`subprocess.Popen.returncode`) when it ends.
    """
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(0, selectors.EVENT_READ)  # the session's end
    #: pidfd -> (pid, the connection to answer)
    children: dict[int, tuple[int, socket.socket]] = {}
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        for key, _ in selector.select():
            if key.fileobj == 0:
                # the session ended (even killed): so does the launcher, and its
                # folder goes; the children go on (a test waits for each, or kills it)
                shutil.rmtree(os.path.dirname(address), ignore_errors=True)
                sys.exit(0)
            if key.fileobj is listener:
                conn, _ = listener.accept()
                conn.settimeout(10)  # a request comes whole at once
                try:
                    request, fds = _receive(conn)
                except OSError:  # timed out, or the test went away
                    request, fds = None, []
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
                    conn.settimeout(None)
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
                conn.settimeout(None)
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
    """A request line and the three descriptors sent with it (``None`` and
    none if it did not come whole)."""
    data, fds, _, _ = socket.recv_fds(conn, 65536, 3)
    try:
        while data and not data.endswith(b"\n"):
            data += conn.recv(65536)
        if len(fds) == 3 and data.endswith(b"\n"):
            request: dict[str, Any] = json.loads(data)
            return request, fds
    except OSError:
        pass
    for fd in fds:
        os.close(fd)
    return None, []


def _stdio(env: dict[str, str]) -> None:
    """Standard output and error as a new interpreter would make them on
    the child's descriptors under *env* (buffered unless
    ``PYTHONUNBUFFERED``; line by line on a terminal, and for the error
    stream); the input stays (buffered, and empty: never read here)."""
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    for fd, name in ((1, "stdout"), (2, "stderr")):
        old = getattr(sys, name)
        raw = io.FileIO(fd, "wb", closefd=False)
        buffer: Any = raw if unbuffered else io.BufferedWriter(raw)
        stream = io.TextIOWrapper(
            buffer,
            encoding=old.encoding,
            errors=old.errors,
            newline="\n",
            line_buffering=not unbuffered and (os.isatty(fd) or fd == 2),
            write_through=unbuffered,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _become(request: dict[str, Any]) -> None:
    """In the child: take the command's environment, folder and arguments."""
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    _stdio(request["env"])
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
