"""``quart-mesh serve --workers N``: one listening socket, N node processes.

The parent binds the socket(s) once, as ``quart-mesh serve`` would, then
starts N workers: ``python -m quart_mesh serve`` with the same arguments
and environment, plus a hidden ``--worker`` option naming the inherited
file descriptors (``subprocess``'s ``pass_fds``). Each worker is a whole
node (:func:`quart_mesh.server.serve`, the node's own fast transport
included) accepting on the inherited socket; the kernel hands each new
connection to one of them. Several workers need PostgreSQL: on SQLite the
data folder is one process's (``data_folder.py``), and ``cli`` refuses.

Each worker also gets one end of a socket pair, its *control* channel: it
writes ``ready`` once it serves, and when it reads end-of-file there the
parent is gone (killed with ``SIGKILL``, say), so it shuts down instead of
serving on as an orphan.

The parent logs ``quart-mesh listening on <url>`` once every worker is
ready. It forwards SIGTERM and SIGINT (workers run in their own process
group, so a terminal's Ctrl+C reaches the parent only) and waits for them;
a second signal is forwarded as SIGINT, which cuts a worker's drain short.
A worker that exits while the parent is not stopping — status 70 (a part of
the node failed), killed by a signal, anything — is started again after a
backoff (:class:`~quart_mesh.retry.Backoff`), and the log says why. A
worker that exits before it was ready failed to start: if the first ones
exit 1 (cannot serve: the data folder, a secret file), or one slot fails to
start :data:`MAX_START_FAILURES` times in a row, the parent stops the others
and exits 1.

With ``MESH_METRICS_TOKEN`` set, the parent also makes a folder of its own
for the workers' metric files (:class:`~quart_mesh.metrics_folder.MetricsFolder`,
passed in ``PROMETHEUS_MULTIPROC_DIR``), so that ``GET /metrics``, answered
by any worker, shows the whole node; it drops a worker's live gauges when
that worker exits, and removes the folder when it exits itself.

Exit status of the parent: 0 when stopped by a signal and every worker
stopped cleanly; 1 when it cannot serve (the port is taken, workers cannot
start); 2 when the workers could not serve because of their settings or
store (they exited 2: a store a newer release migrated, say), as a single
process would; 130 after a second signal cut the drain short; 70 when a worker
did not stop cleanly (it failed while draining, or had to be killed).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import trio

from .config import Settings
from .descriptors import raise_open_file_limit
from .metrics_folder import MetricsFolder
from .retry import Backoff
from .server import listening_url

__all__ = ["MAX_START_FAILURES", "Worker", "supervise"]

log = logging.getLogger("quart_mesh.workers")

#: a slot whose worker fails to start this many times in a row ends the parent
MAX_START_FAILURES = 5
#: a worker that served this long before it ended starts the backoff afresh
STABLE_SECONDS = 60.0
#: after the stop signal, workers get ``graceful_timeout`` plus this to end,
#: then they are killed (the node stops its bots and closes its store)
STOP_MARGIN = 30.0
#: what a worker writes on its control channel once it serves
READY = b"ready\n"
#: the worker's exit statuses that say it cannot serve (``cli``)
_CANNOT_SERVE = (1, 2)
#: the exit status of a worker that cannot use its settings or store (``cli``)
_BAD_SETTINGS = 2
#: the exit status of a worker whose part failed (``cli.EX_SOFTWARE``)
_EX_SOFTWARE = 70


def describe_exit(status: int) -> str:
    """How a worker ended, for the log."""
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"was killed by {name}"
    if status == _EX_SOFTWARE:
        return "failed (exit status 70: a part of the node failed; its traceback is above)"
    if status in _CANNOT_SERVE:
        return f"could not serve (exit status {status})"
    return f"exited with status {status}"


# --- the worker's side ---------------------------------------------------------------


@dataclass
class Worker:
    """What a worker process inherited from its parent: ``--worker N:CONTROL:FD[,FD...]``."""

    number: int
    control_fd: int
    listen_fds: tuple[int, ...]
    _control: trio.SocketStream | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, spec: str) -> Worker:
        """Raises ValueError if *spec* is not ``N:CONTROL:FD[,FD...]``."""
        number, control, fds = spec.split(":")
        listen = tuple(int(fd) for fd in fds.split(","))
        if not listen:
            raise ValueError("no listening socket")
        return cls(int(number), int(control), listen)

    def spec(self) -> str:
        return f"{self.number}:{self.control_fd}:{','.join(map(str, self.listen_fds))}"

    def listeners(self) -> list[trio.SocketListener]:
        """The listening sockets the parent bound (this takes them over)."""
        return [
            trio.SocketListener(trio.socket.from_stdlib_socket(socket.socket(fileno=fd)))
            for fd in self.listen_fds
        ]

    def _channel(self) -> trio.SocketStream:
        if self._control is None:
            sock = socket.socket(fileno=self.control_fd)
            self._control = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
        return self._control

    async def ready(self, url: str) -> None:
        """Tell the parent this worker serves (and log it)."""
        log.info("quart-mesh worker %d (pid %d) serving %s", self.number, os.getpid(), url)
        # if the parent is gone, wait_for_stop returns
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await self._channel().send_all(READY)

    async def wait_for_stop(self, wait_for_signal: Callable[[], Awaitable[object]]) -> None:
        """Return on a signal (*wait_for_signal*) or when the parent is gone."""
        async with trio.open_nursery() as nursery:

            async def first(wait: Callable[[], Awaitable[object]]) -> None:
                await wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(first, wait_for_signal)
            nursery.start_soon(first, self._parent_gone)

    async def _parent_gone(self) -> None:
        control = self._channel()
        try:
            while await control.receive_some(64):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        log.warning("worker %d: the parent process is gone, shutting down", self.number)


# --- the parent's side ---------------------------------------------------------------


@dataclass
class _Slot:
    number: int
    backoff: Backoff = field(default_factory=lambda: Backoff(0.5, 30.0))
    start_failures: int = 0
    process: trio.Process | None = None
    ready: trio.Event = field(default_factory=trio.Event)


class _Pool:
    def __init__(
        self,
        settings: Settings,
        serve_args: Sequence[str],
        listeners: Sequence[trio.SocketListener],
        metrics: MetricsFolder | None = None,
    ) -> None:
        self.settings = settings
        #: the workers' metric files (``None``: metrics are off)
        self.metrics = metrics
        self.serve_args = list(serve_args)
        self.listeners = listeners
        self.slots = [_Slot(n) for n in range(1, settings.workers + 1)]
        self.stopping = trio.Event()
        self.ever_ready = False
        self.cannot_serve = False
        #: the workers that could not serve exited 2 (settings, a newer store):
        #: the parent says so too, a status supervisors take as final
        self.refused_settings = False
        self.signals = 0
        self.unclean: list[str] = []
        self._kill_deadline = float("inf")

    async def run(self, url: str) -> int:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch_signals, signals)
                async with trio.open_nursery() as workers:
                    for slot in self.slots:
                        workers.start_soon(self._keep_running, slot)
                    with trio.CancelScope() as announce:
                        nursery.start_soon(self._cancel_on_stop, announce)
                        for slot in self.slots:
                            await slot.ready.wait()
                        log.info(
                            "quart-mesh listening on %s (data in %s, %d workers)",
                            url,
                            self.settings.data_dir,
                            len(self.slots),
                        )
                nursery.cancel_scope.cancel()
        for listener in self.listeners:
            await listener.aclose()
        if self.cannot_serve:
            return 2 if self.refused_settings else 1
        if self.unclean:
            log.error("workers that did not stop cleanly: %s", "; ".join(self.unclean))
            return 130 if self.signals > 1 else _EX_SOFTWARE
        log.info("all workers stopped")
        return 0

    async def _cancel_on_stop(self, scope: trio.CancelScope) -> None:
        await self.stopping.wait()
        scope.cancel()

    async def _watch_signals(self, signals: AsyncIterator[int]) -> None:
        async for signum in signals:
            self.signals += 1
            name = signal.Signals(signum).name
            if self.signals == 1:
                log.info("received %s, stopping the workers", name)
                self._stop(signal.SIGTERM)
            else:
                log.warning("received %s again, cutting the workers' shutdown short", name)
                self._send_all(signal.SIGINT)

    def _stop(self, signum: int) -> None:
        """Stop restarting, and ask every worker to stop (killed if late)."""
        if not self.stopping.is_set():
            self._kill_deadline = trio.current_time() + self.settings.graceful_timeout + STOP_MARGIN
            self.stopping.set()
            self._send_all(signum)

    def _send_all(self, signum: int) -> None:
        for slot in self.slots:
            if slot.process is not None and slot.process.returncode is None:
                slot.process.send_signal(signum)

    async def _keep_running(self, slot: _Slot) -> None:
        while not self.stopping.is_set():
            status, served = await self._run_once(slot)
            pid = slot.process.pid if slot.process is not None else 0
            if self.metrics is not None:
                # its sessions and queues are gone; its counts stay
                self.metrics.retire(slot.number)
            if self.stopping.is_set():
                if status not in (0, -signal.SIGTERM):
                    self.unclean.append(f"worker {slot.number} {describe_exit(status)}")
                return
            why = describe_exit(status)
            if served is None:
                slot.start_failures += 1
                first = status in _CANNOT_SERVE and not self.ever_ready
                if first or slot.start_failures >= MAX_START_FAILURES:
                    log.error(
                        "worker %d (pid %d) %s before it was ready (%d time(s) in a row); "
                        "cannot serve: stopping",
                        slot.number,
                        pid,
                        why,
                        slot.start_failures,
                    )
                    self.cannot_serve = True
                    self.refused_settings = status == _BAD_SETTINGS
                    self._stop(signal.SIGTERM)
                    return
            else:
                slot.start_failures = 0
                if served >= STABLE_SECONDS:
                    slot.backoff.reset()
            delay = slot.backoff.next()
            log.warning(
                "worker %d (pid %d) %s; starting it again in %.1f s", slot.number, pid, why, delay
            )
            with trio.move_on_after(delay):
                await self.stopping.wait()

    async def _run_once(self, slot: _Slot) -> tuple[int, float | None]:
        """Run the slot's worker until it exits.

        Returns:
            Its exit status, and how long it served (``None``: never ready).
        """
        parent_end, child_end = socket.socketpair()
        fds = tuple(listener.socket.fileno() for listener in self.listeners)
        spec = Worker(slot.number, child_end.fileno(), fds).spec()
        try:
            process = await trio.lowlevel.open_process(
                [sys.executable, "-m", "quart_mesh", *self.serve_args, "--worker", spec],
                pass_fds=(child_end.fileno(), *fds),
                process_group=0,  # a terminal's Ctrl+C goes to the parent only
                env=None if self.metrics is None else {**os.environ, **self.metrics.env()},
            )
        except BaseException:
            parent_end.close()
            raise
        finally:
            child_end.close()
        slot.process = process
        if self.stopping.is_set():  # stopped while it was being started
            process.send_signal(signal.SIGTERM)
        control = trio.SocketStream(trio.socket.from_stdlib_socket(parent_end))
        ready_at: float | None = None
        try:
            async with trio.open_nursery() as nursery:

                async def wait_ready() -> None:
                    nonlocal ready_at
                    received = b""
                    while READY not in received and len(received) < 64:
                        chunk = await control.receive_some(64)
                        if not chunk:
                            return
                        received += chunk
                    if READY in received:
                        ready_at = trio.current_time()
                        self.ever_ready = True
                        slot.ready.set()

                nursery.start_soon(wait_ready)
                nursery.start_soon(self._kill_when_late, process)
                status = await process.wait()
                nursery.cancel_scope.cancel()
        except BaseException:
            # the parent itself is going down: leave no worker behind
            with trio.CancelScope(shield=True):
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            raise
        finally:
            with trio.CancelScope(shield=True):
                await control.aclose()
        return status, None if ready_at is None else trio.current_time() - ready_at

    async def _kill_when_late(self, process: trio.Process) -> None:
        await self.stopping.wait()
        await trio.sleep_until(self._kill_deadline)
        if process.returncode is None:
            log.error("worker (pid %d) did not stop in time; killing it", process.pid)
            process.kill()


async def supervise(settings: Settings, serve_args: Sequence[str]) -> int:
    """Bind, run ``settings.workers`` workers, and supervise them until a signal.

    Args:
        serve_args: the ``serve`` command line the workers get (``["serve", ...]``).

    Returns:
        The parent's exit status (see the module docstring).
    """
    raise_open_file_limit()  # once here: the workers inherit it
    try:
        listeners = await trio.open_tcp_listeners(settings.port, host=settings.host)
    except OSError as error:
        log.error("cannot serve: %s", error)
        return 1
    metrics: MetricsFolder | None = None
    if settings.metrics_token:
        try:
            metrics = MetricsFolder.create()
        except OSError as error:
            log.error("cannot serve: no folder for the workers' metrics: %s", error)
            for listener in listeners:
                await listener.aclose()
            return 1
        log.info("the workers keep their metrics in %s", metrics.path)
    try:
        pool = _Pool(settings, serve_args, listeners, metrics)
        return await pool.run(listening_url(listeners))
    finally:
        if metrics is not None:
            metrics.remove()
