"""Serving a node: one port, HTTP by hypercorn, WebSocket by the node.

The node owns its listening sockets. For each connection it reads the first
request head itself, within 16 KiB and ``request_head_timeout``; a head not
complete by then, or cut short by the client, is dropped unanswered — so a
WebSocket handshake never waits longer on the client than that deadline:

- a WebSocket upgrade goes to the node's own WebSocket transport
  (:mod:`quart_mesh.realtime`), which serves ``/ws`` and answers 404 elsewhere;
- anything else is handed, bytes and all, to hypercorn's trio ``TCPServer``,
  which serves the Quart app (and any further requests on that connection,
  each awaited under its keep-alive timeout, which also bounds their heads).

Each connection runs under its own exception guard, so no single client can
take the server down (hypercorn #225). The node's components, the app's
lifespan (driven by hypercorn's ``Lifespan``, as under ``hypercorn.trio.serve``)
and the listeners share one nursery: a component that dies of a bug takes
the server down with it (see :func:`serve`).

Shutdown: when *shutdown_trigger* returns, :meth:`Node.aclose` is called or
the caller cancels :func:`serve`, the listeners close, WebSocket sessions are
told the node is going away (close code 1001), hypercorn closes idle
keep-alive connections, and anything still open after ``graceful_timeout`` is
cancelled; then the node's components stop and its store closes. The served
tree is shielded while it stops, so a cancel from outside takes this same
path (``docs/decisions/0066-graceful-shutdown.md``).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import AppWrapper, LifespanState
from hypercorn.utils import repr_socket_addr, wrap_app

from .app import MeshApp
from .client_address import is_loopback
from .node import Node

__all__ = ["STOP_MARGIN", "listening_url", "serve"]

log = logging.getLogger("quart_mesh")

#: the first request head must fit in this (its time: ``request_head_timeout``)
MAX_HEAD_BYTES = 16 * 1024
#: hypercorn's keep-alive timeout: the wait for a later request and its head
KEEP_ALIVE_TIMEOUT = 5.0
#: a stop (a trigger, :meth:`Node.aclose`, a cancel) may take
#: ``graceful_timeout`` (for requests and sends in flight) plus this (the
#: app's shutdown, managed bots' SIGTERM then SIGKILL, saving and closing the
#: store) before what is left of it is cancelled
STOP_MARGIN = 10.0
#: after a WebSocket connection's close frame, seconds to wait for the client
#: to close its side before the socket is closed
CLOSE_LINGER = 2.0


def hypercorn_config(graceful_timeout: float, head_timeout: float) -> HypercornConfig:
    config = HypercornConfig()
    config.graceful_timeout = graceful_timeout
    # a later request's head is read under the keep-alive timer (hypercorn
    # stops it once the head is complete), so that bounds it too
    config.keep_alive_timeout = min(KEEP_ALIVE_TIMEOUT, head_timeout)
    config.accesslog = None
    # hypercorn's warnings and errors still reach the log, not its info chatter
    hlog = logging.getLogger("hypercorn.error")
    hlog.setLevel(max(hlog.getEffectiveLevel(), logging.WARNING))
    config.errorlog = hlog
    return config


def listening_url(listeners: Sequence[trio.SocketListener]) -> str:
    """The base URL of the first of *listeners* (``http://127.0.0.1:8000``)."""
    sock = listeners[0].socket
    return "http://" + repr_socket_addr(sock.family, sock.getsockname())


class PrefixedStream(trio.abc.HalfCloseableStream):
    """A socket stream with bytes already read put back in front."""

    def __init__(self, stream: trio.SocketStream, prefix: bytes) -> None:
        self._stream = stream
        self._prefix = prefix
        self.socket = stream.socket  # hypercorn reads peer and local addresses here
        # every response is sent in several writes: call the socket's own
        # method, not a coroutine that awaits it
        self.send_all = stream.send_all  # type: ignore[method-assign]

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            data, self._prefix = self._prefix, b""
            # from now on reads go straight to the socket
            self.receive_some = self._stream.receive_some  # type: ignore[method-assign]
            await trio.lowlevel.checkpoint()
            return data
        return await self._stream.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()


def _is_websocket_upgrade(head: bytes) -> bool:
    lines = head.split(b"\r\n")
    if not lines[0].upper().startswith(b"GET "):
        return False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"upgrade" and b"websocket" in value.lower():
            return True
    return False


async def _read_head(stream: trio.SocketStream, deadline: float) -> bytes | None:
    """Bytes up to the end of the first request head (possibly more), or
    ``MAX_HEAD_BYTES`` or more without its end (too large: answered by
    whoever serves it); ``None`` if the client closed, or *deadline* passed,
    before either (then there is nothing to answer)."""
    data = b""
    with trio.move_on_at(deadline):
        while b"\r\n\r\n" not in data and len(data) < MAX_HEAD_BYTES:
            chunk = await stream.receive_some(MAX_HEAD_BYTES)
            if not chunk:
                return None
            data += chunk
        return data
    return None


async def _close_gracefully(stream: trio.SocketStream) -> None:
    """After a WebSocket connection's close frame: send EOF, then discard
    what the client still sends until it closes too, for at most
    ``CLOSE_LINGER`` seconds. Closing with unread data would reset the
    connection, and a reset can destroy the close frame before the client
    has read it. (A connection the transport has reset is closed already.)"""
    with trio.move_on_after(CLOSE_LINGER):
        try:
            await stream.send_eof()
            while await stream.receive_some(MAX_HEAD_BYTES):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
            pass


class _Server:
    def __init__(self, app: MeshApp, config: HypercornConfig, head_timeout: float) -> None:
        self.app = app
        self.config = config
        self.head_timeout = head_timeout
        self.asgi: AppWrapper = wrap_app(app, config.wsgi_max_body_size, None)
        self.context = WorkerContext(None)
        self.state: LifespanState = {}

    async def handle(self, stream: trio.SocketStream) -> None:
        """Serve one connection; whatever happens stays inside it."""
        try:
            head = await _read_head(stream, trio.current_time() + self.head_timeout)
            if head is None:
                return  # dropped: closed, or too slow (an upgrade is never read further)
            if _is_websocket_upgrade(head):
                await self.app.node.realtime.serve_websocket(stream, head)
                await _close_gracefully(stream)
            else:
                await TCPServer(
                    self.asgi,
                    self.config,
                    self.context,
                    self.state.copy(),
                    PrefixedStream(stream, head),  # type: ignore[arg-type]
                )
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        except Exception:
            log.exception("connection failed; the server goes on")
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()


def _is_loopback(listener: trio.SocketListener) -> bool:
    sock = listener.socket
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return True  # a unix socket: only this machine reaches it
    return is_loopback(str(sock.getsockname()[0]))


async def claim_node(node: Node, *, public: bool | None) -> None:
    """Before serving: a node not set up and reachable from the network
    (*public*; ``None``: not known, a stock ASGI server) asks for a setup
    code at its first setup; log it (``services/setup_claim.py``)."""
    code = await node.accounts.claim.prepare(
        public=public, initialized=node.accounts.mesh is not None
    )
    if code is not None:
        log.warning(
            "quart-mesh setup code: %s (this node is not set up and may be reached from"
            " the network: its first setup, POST /api/setup/init or the web client's"
            " setup form, asks for this code)",
            code,
        )


async def serve(
    app: MeshApp,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    listeners: Sequence[trio.SocketListener] | None = None,
    shutdown_trigger: Callable[[], Awaitable[object]] | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve *app* and run its node until *shutdown_trigger* returns,
    :meth:`Node.aclose` is called, or the caller cancels.

    It binds *host* and *port* itself, once the node has started, and logs
    ``quart-mesh listening on <url>``; or it accepts on *listeners*, sockets
    already listening (a worker of ``quart-mesh serve --workers``, whose
    parent bound them), and logs nothing: the caller announces it. Either
    way the listeners are closed when it returns.

    One nursery holds the node's components (:meth:`Node.run`), the app's
    lifespan and the listeners. A component that fails with a bug ends it:
    the listeners close, open connections are cancelled, the node closes its
    store, and the error propagates out of ``serve`` (``quart-mesh serve``
    then logs it and exits non-zero). The node never goes on serving
    without one of its parts.

    The app's node is opened for the duration (unless it was given an open
    one, ``create_app(node=...)``) and closed on the way out.

    Reports the base URL it listens on (e.g. ``http://127.0.0.1:41873``)
    through ``task_status`` once the node is started and the socket is
    listening, so ``url = await nursery.start(serve, app, port=0)`` works.
    Without ``public_url`` in the settings, the node uses that URL as its
    public address (managed bots wait for it).

    Stopping: *shutdown_trigger* (e.g. :func:`quart_mesh.wait_for_signal`)
    is awaited from the start; when it returns, when :meth:`Node.aclose` is
    called, or when the caller cancels, the stop is graceful: the listeners
    close, WebSocket clients get close code ``1001`` ("server shutting
    down"), long polls waiting are answered at once (an empty batch and its
    cursor), requests and sends in flight get ``graceful_timeout`` seconds to
    finish (what they write is committed), managed bots get SIGTERM (then
    SIGKILL after a few seconds), and the store is saved and closed. The
    whole stop is bounded: ``graceful_timeout`` plus 10 seconds.

    Cancellation: safe. Once listening, cancelling ``serve`` starts the
    graceful stop above (shielded, bounded), then ``serve`` re-raises
    ``Cancelled``; cancelled before it listens, it stops at once (nothing
    was served; the store is still closed). A second ``KeyboardInterrupt``
    (Ctrl+C) while it stops interrupts the stop if ``serve`` runs in the
    main task (``trio.run``'s function or its nursery's body); elsewhere
    the stop runs to its bound first.

    Raises:
        OSError: the socket cannot be bound (e.g. the port is taken), or
            another process serves this SQLite data folder.
        Unavailable: the store cannot be opened.
        StoreFromNewerRelease: a newer quart-mesh migrated the store.
        Exception: a part of the node failed (see above).
    """
    stop = trio.Event()  # the served tree's own trigger
    # the served tree: shielded once listening, so that a cancel from outside
    # becomes a graceful stop instead of cutting connections (close 1006)
    tree = trio.CancelScope()
    stopped = trio.Event()  # the tree has ended (its store closed)
    done = trio.Event()  # serve is returning: what Node.aclose waits for
    interrupted = False  # the stop itself was interrupted (a second Ctrl+C)

    async def run_tree(*, task_status: trio.TaskStatus[str]) -> None:
        try:
            with tree:
                async with app.node_opened() as node:
                    node.served_by(stop, done)

                    def listening(url: str) -> None:
                        tree.shield = True
                        task_status.started(url)

                    await _serve_node(app, node, host, port, listeners, stop.wait, listening)
            if tree.cancelled_caught and interrupted:
                log.warning("the stop was interrupted: the rest of it was cancelled")
            elif tree.cancelled_caught:
                log.warning(
                    "the node did not stop within %.0f seconds: the rest was cancelled",
                    app.settings.graceful_timeout + STOP_MARGIN,
                )
        finally:
            stopped.set()

    async def trigger(wait: Callable[[], Awaitable[object]]) -> None:
        await wait()
        stop.set()

    try:
        async with trio.open_nursery() as outer:
            try:
                if shutdown_trigger is not None:
                    # from the start: a signal during start-up stops it too
                    outer.start_soon(trigger, shutdown_trigger)
                url: str = await outer.start(run_tree)
                task_status.started(url)
                await stop.wait()
            finally:
                stop.set()
                grace = app.settings.graceful_timeout + STOP_MARGIN
                tree.deadline = min(tree.deadline, trio.current_time() + grace)
                try:
                    with trio.CancelScope(shield=True):
                        await stopped.wait()
                except BaseException:  # KeyboardInterrupt: a second Ctrl+C
                    interrupted = True
                    tree.cancel()
                    raise
                outer.cancel_scope.cancel()  # the trigger, if still waiting
    except BaseExceptionGroup as group:
        # the outer nursery's group of one: raise what it holds (Cancelled,
        # a part's failure) as before, not one level deeper
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    finally:
        if listeners:
            # closed by serving them, but not if it stopped before (a cancel
            # or a failure during start-up)
            await _close_listeners(listeners)
        done.set()


async def _close_listeners(listeners: Sequence[trio.SocketListener]) -> None:
    """Close *listeners* (again: closing is idempotent), even while cancelled."""
    with trio.CancelScope(shield=True):
        for listener in listeners:
            await listener.aclose()


async def _serve_node(
    app: MeshApp,
    node: Node,
    host: str,
    port: int,
    given: Sequence[trio.SocketListener] | None,
    shutdown_trigger: Callable[[], Awaitable[object]],
    listening: Callable[[str], None],
) -> None:
    settings = node.settings
    config = hypercorn_config(settings.graceful_timeout, settings.request_head_timeout)
    server = _Server(app, config, settings.request_head_timeout)
    lifespan = Lifespan(server.asgi, config, server.state)
    stopping = False

    async def run_lifespan(*, task_status: trio.TaskStatus[None]) -> None:
        # hypercorn logs and swallows an error of the app's lifespan (which
        # owns ``app.nursery``); without it the app cannot serve: end the tree
        task_status.started()
        await lifespan.handle_lifespan()
        if not stopping:
            raise RuntimeError("the app's lifespan ended while serving (see the error above)")

    async with trio.open_nursery() as tree:
        if not node.running:  # else whoever opened the node runs it
            await tree.start(node.run)
        await tree.start(run_lifespan)
        await lifespan.wait_for_startup()

        listeners = list(given) if given else await trio.open_tcp_listeners(port, host=host)
        try:
            url = listening_url(listeners)
            node.address.bind(url)
            if not given:
                log.info("quart-mesh listening on %s (data in %s)", url, node.settings.data_dir)
            # before the first connection is accepted
            await claim_node(node, public=not all(_is_loopback(lst) for lst in listeners))
        except BaseException:
            # not served (serving them closes them): close them here
            await _close_listeners(listeners)
            raise

        async with trio.open_nursery() as connections:
            async with trio.open_nursery() as front:
                front.start_soon(
                    partial(
                        trio.serve_listeners, server.handle, listeners, handler_nursery=connections
                    )
                )
                listening(url)
                await shutdown_trigger()
                front.cancel_scope.cancel()  # stop accepting
            # drain: sessions get "going away", idle keep-alives close, the rest has a deadline
            await server.context.terminated.set()
            node.realtime.shut_down()
            node.polling.shut_down()  # long polls are answered, not held then cut
            connections.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
        stopping = True
        await lifespan.wait_for_shutdown()
        tree.cancel_scope.cancel()  # the node's components: the store is closed last
