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
  A request answered before its body's end closes the connection, but only
  once the client has sent the rest (or closed), read and discarded within
  :data:`DRAIN_TIMEOUT` and the largest body the node accepts plus
  :data:`DRAIN_MARGIN` (``asgi_guards.early_answer``): closed with data
  unread, the connection would be reset under a proxy still sending the
  body, and nginx answers that reset with 502.

Each connection runs under its own exception guard, so no single client can
take the server down (hypercorn #225). The node's components, the app's
lifespan (driven by hypercorn's ``Lifespan``, as under ``hypercorn.trio.serve``)
and the listeners share one nursery: a component that dies of a bug takes
the server down with it (see :func:`serve`).

Open files: at start the soft ``RLIMIT_NOFILE`` is raised to the hard limit,
and the node's own accept loop (not ``trio.serve_listeners``) keeps a reserve
of descriptors (:mod:`quart_mesh.descriptors`): a connection accepted past
``max_fd_share`` of the limit is answered at once — HTTP 503 ``overloaded``
with ``Retry-After``, a WebSocket upgrade a handshake then close 1013, a
health probe (``/api/health/live``, ``/api/health/ready``) served as usual
but on a connection that closes after it — and ``accept`` failing for want
of descriptors is the ``descriptors`` fault, logged once, not a traceback.
While that fault lasts, a connection still waiting for its first request
head has :data:`PRESSED_HEAD_TIMEOUT` (1 s) for it rather than
``request_head_timeout``, and when accepting pauses, those that have waited
:data:`SHED_AFTER` or longer are closed at once: idle connections cannot
hold the node's descriptors, and health probes queued behind them are
accepted (and answered) within a second or so.

Shutdown: when *shutdown_trigger* returns, :meth:`Node.aclose` is called or
the caller cancels :func:`serve`, the listeners close, WebSocket sessions are
told the node is going away (close code 1001), hypercorn closes idle
keep-alive connections, and anything still open after ``graceful_timeout`` is
cancelled; then the node's components stop and its store closes. The served
tree is shielded while it stops, so a cancel from outside takes this same
path (``docs/decisions/0066-graceful-shutdown.md``).
"""

from __future__ import annotations

import json
import logging
import math
import socket
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import AppWrapper, LifespanState
from hypercorn.utils import repr_socket_addr, wrap_app

from .app import MeshApp, largest_body
from .asgi_guards import early_answer
from .client_address import is_loopback
from .descriptors import ACCEPT_CAPACITY_ERRNOS, ACCEPT_RETRY, Reserve, raise_open_file_limit
from .ends import TRY_AGAIN_LATER
from .node import Node
from .realtime.transport import WebSocket

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
#: after an answer given before the request's body ended, the client's
#: connection is closed only once it has sent the rest (or closed), or when
#: this long has passed, or :data:`DRAIN_MARGIN` more than the largest body
#: the node accepts has been read and discarded: whichever comes first
DRAIN_TIMEOUT = 5.0
#: beyond the largest body the node accepts (an upload: 10 MiB + 64 KiB by
#: default), the bytes read and discarded before such a close; a proxy's body
#: limit is meant to be that largest body, rounded up (``client_max_body_size
#: 11m``), and this covers the rounding
DRAIN_MARGIN = 1024 * 1024
#: a connection refused for want of descriptors: its head is awaited this
#: long at most (to tell a health probe or an upgrade), and after the answer
#: the client has this long to close its side
REFUSE_WAIT = 0.5
#: while descriptors run short (the ``descriptors`` fault), a connection has
#: this long from its accept for its first request head
PRESSED_HEAD_TIMEOUT = 1.0
#: when accepting pauses, connections that have waited this long or longer
#: for their first request head are closed at once, oldest first
SHED_AFTER = 0.2
#: the paths a connection past the share is still served for
HEALTH_PROBES = (b"/api/health/live", b"/api/health/ready")
_OVERLOADED_BODY = json.dumps(
    {"error": "the node has too many connections open; try again shortly", "code": "overloaded"}
).encode()
#: the answer to an HTTP connection past the share
OVERLOADED_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"content-type: application/json\r\n"
    b"retry-after: 1\r\n"
    b"content-length: %d\r\n"
    b"connection: close\r\n"
    b"\r\n%s" % (len(_OVERLOADED_BODY), _OVERLOADED_BODY)
)


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
    """A socket stream with bytes already read put back in front.

    Once told to :meth:`linger` (an answer before the request's body
    ended), closing it ends hypercorn's use of it, a read in progress
    included (it raises ``ClosedResourceError``), but leaves the socket
    open: its owner reads the rest of the body (bounded) and then closes it.
    """

    def __init__(self, stream: trio.SocketStream, prefix: bytes) -> None:
        self._stream = stream
        self._prefix = prefix
        self.socket = stream.socket  # hypercorn reads peer and local addresses here
        # every response is sent in several writes: call the socket's own
        # method, not a coroutine that awaits it
        self.send_all = stream.send_all  # type: ignore[method-assign]
        #: closing leaves the socket open for its owner to drain
        self.lingering = False
        self._closed = False
        #: the read in progress, cancelled when the stream is closed
        self._reading: trio.CancelScope | None = None

    def linger(self) -> None:
        """From now on closing leaves the socket open (see the class)."""
        self.lingering = True

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._closed:
            raise trio.ClosedResourceError("the stream was closed")
        if self._prefix:
            data, self._prefix = self._prefix, b""
            await trio.lowlevel.checkpoint()
            return data
        with trio.CancelScope() as self._reading:
            return await self._stream.receive_some(max_bytes)
        # as a socket stream closed by another task: the read ends with this
        raise trio.ClosedResourceError("the stream was closed")

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        self._closed = True
        if self._reading is not None:
            self._reading.cancel()
        if self.lingering:
            await trio.lowlevel.checkpoint()  # the owner drains the socket, then closes it
        else:
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


def _head_complete(data: bytes) -> bool:
    return b"\r\n\r\n" in data or len(data) >= MAX_HEAD_BYTES


async def _read_some_head(stream: trio.SocketStream, deadline: float) -> tuple[bytes, bool]:
    """What the client sent until its first request head ended (possibly
    more), ``MAX_HEAD_BYTES`` were read, or *deadline* passed; and whether
    the client closed before that."""
    data = b""
    with trio.move_on_at(deadline):
        while not _head_complete(data):
            chunk = await stream.receive_some(MAX_HEAD_BYTES)
            if not chunk:
                return data, True
            data += chunk
    return data, False


async def _read_head(stream: trio.SocketStream, deadline: float) -> bytes | None:
    """Bytes up to the end of the first request head (possibly more), or
    ``MAX_HEAD_BYTES`` or more without its end (too large: answered by
    whoever serves it); ``None`` if the client closed, or *deadline* passed,
    before either (then there is nothing to answer)."""
    data, closed = await _read_some_head(stream, deadline)
    return data if not closed and _head_complete(data) else None


def _is_health_probe(head: bytes) -> bool:
    method, _, rest = head.partition(b"\r\n")[0].partition(b" ")
    target = rest.partition(b" ")[0].partition(b"?")[0]
    return method.upper() in (b"GET", b"HEAD") and target in HEALTH_PROBES


def _closing_after_one(head: bytes) -> bytes:
    """*head* with ``Connection: close`` added, so that hypercorn closes the
    connection after its first answer (h11 honours any ``close`` among the
    ``Connection`` values)."""
    line, sep, rest = head.partition(b"\r\n")
    return line + sep + b"connection: close\r\n" + rest


async def _close_gracefully(
    stream: trio.SocketStream, linger: float = CLOSE_LINGER, limit: float = math.inf
) -> None:
    """After a WebSocket connection's close frame, a refusal, or an answer
    before the request's body ended: send EOF, then discard what the client
    still sends until it closes too, for at most *linger* seconds and *limit*
    bytes. Closing with unread data resets the connection, and a reset can
    destroy the answer before the client has read it (a proxy still sending
    the body answers 502 instead). (A connection the transport has reset is
    closed already.)"""
    left = limit
    with trio.move_on_after(linger):
        try:
            await stream.send_eof()
            while left > 0:
                data = await stream.receive_some(int(min(left, 65536)))
                if not data:
                    return
                left -= len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
            pass


class _Heads:
    """The connections still waiting for their first request head, oldest
    first: each one's wait is a cancel scope, whose deadline is shortened
    while descriptors run short and which a pause cancels."""

    def __init__(self, head_timeout: float) -> None:
        self.head_timeout = head_timeout
        #: each waiting connection's scope, and when it was accepted (in that order)
        self._waiting: dict[trio.CancelScope, float] = {}
        #: the deadlines are shortened (at most once while the fault lasts)
        self._hurried = False

    def __len__(self) -> int:
        return len(self._waiting)

    @contextmanager
    def waiting(self, pressed: bool) -> Iterator[None]:
        """The wait for a connection's head (*pressed*: descriptors run
        short); cancelled, by its deadline or by :meth:`shed`, it ends
        quietly (and the connection is dropped)."""
        now = trio.current_time()
        timeout = PRESSED_HEAD_TIMEOUT if pressed else self.head_timeout
        scope = trio.CancelScope(deadline=now + min(timeout, self.head_timeout))
        self._waiting[scope] = now
        try:
            with scope:
                yield
        finally:
            self._waiting.pop(scope, None)

    def pressed(self, pressed: bool) -> None:
        """Whether descriptors run short: when they start to, every waiting
        connection gets at most :data:`PRESSED_HEAD_TIMEOUT` from its accept."""
        if pressed and not self._hurried:
            for scope, accepted_at in self._waiting.items():
                scope.deadline = min(scope.deadline, accepted_at + PRESSED_HEAD_TIMEOUT)
        self._hurried = pressed

    def shed(self) -> None:
        """Accepting is paused: close the connections that have waited
        :data:`SHED_AFTER` or longer for their head."""
        self.pressed(True)
        before = trio.current_time() - SHED_AFTER
        while self._waiting:
            scope, accepted_at = next(iter(self._waiting.items()))
            if accepted_at > before:
                break  # the rest are younger
            del self._waiting[scope]
            scope.cancel()


class _Server:
    def __init__(self, app: MeshApp, config: HypercornConfig, head_timeout: float) -> None:
        self.app = app
        self.config = config
        self.head_timeout = head_timeout
        self.heads = _Heads(head_timeout)
        #: bytes read and discarded at most before closing after an early answer
        self.drain_limit = largest_body(app.settings) + DRAIN_MARGIN
        self.asgi: AppWrapper = wrap_app(app, config.wsgi_max_body_size, None)
        self.context = WorkerContext(None)
        self.state: LifespanState = {}

    async def handle(
        self, stream: trio.SocketStream, *, refuse: bool = False, pressed: bool = False
    ) -> None:
        """Serve one connection; whatever happens stays inside it. One to
        *refuse* (past the descriptor share) is answered at once instead
        (:meth:`_refuse`); while descriptors run short (*pressed*), its head
        has less time (:class:`_Heads`)."""
        try:
            if refuse:
                await self._refuse(stream)
                return
            head = None
            with self.heads.waiting(pressed):
                head = await _read_head(stream, math.inf)
            if head is None:
                return  # dropped: closed, too slow or shed (an upgrade is never read further)
            if _is_websocket_upgrade(head):
                await self.app.node.realtime.serve_websocket(stream, head)
                await _close_gracefully(stream)
            else:
                await self._serve_http(stream, head)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        except Exception:
            log.exception("connection failed; the server goes on")
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()

    async def _serve_http(self, stream: trio.SocketStream, head: bytes) -> None:
        prefixed = PrefixedStream(stream, head)
        # the app's tasks (started from this one) see it
        early_answer.set(prefixed.linger)
        await TCPServer(
            self.asgi,
            self.config,
            self.context,
            self.state.copy(),
            prefixed,  # type: ignore[arg-type]
        )
        if prefixed.lingering:  # hypercorn is done with it: read on, within bounds
            await _close_gracefully(stream, DRAIN_TIMEOUT, self.drain_limit)

    async def _refuse(self, stream: trio.SocketStream) -> None:
        """A connection past the descriptor share: its head is awaited for
        at most :data:`REFUSE_WAIT`; a health probe is served (on a
        connection closed after it), a WebSocket upgrade gets a handshake
        then close 1013 ``overloaded``, anything else (a head that did not
        come in time too) 503 ``overloaded``; then the connection closes."""
        head, closed = await _read_some_head(stream, trio.current_time() + REFUSE_WAIT)
        if closed:
            return
        complete = _head_complete(head)
        if complete and _is_health_probe(head):
            await self._serve_http(stream, _closing_after_one(head))
            return
        # a few hundred bytes to a new connection's empty buffer: bounded all the same
        with trio.move_on_after(REFUSE_WAIT + CLOSE_LINGER):
            if complete and _is_websocket_upgrade(head):
                ws = WebSocket(stream, max_message_bytes=self.app.settings.max_frame_bytes)
                if await ws.accept(head):
                    await ws.close(TRY_AGAIN_LATER, "overloaded")  # RFC 6455: try again later
            else:
                await stream.send_all(OVERLOADED_RESPONSE)
            await _close_gracefully(stream, REFUSE_WAIT)


async def _accept(
    listener: trio.SocketListener,
    server: _Server,
    reserve: Reserve,
    connections: trio.Nursery,
) -> None:
    """Accept on *listener* until cancelled (then close it), each connection
    served in *connections*. ``accept`` failing for want of descriptors is
    reported (the ``descriptors`` fault) and tried again shortly, as
    ``trio.serve_listeners`` does, but without a traceback each time."""
    async with listener:
        while True:
            await reserve.wait_for_room(server.heads.shed)
            try:
                stream = await listener.accept()
            except OSError as error:
                if error.errno not in ACCEPT_CAPACITY_ERRNOS:
                    raise
                reserve.accept_failed(error)
                await trio.sleep(ACCEPT_RETRY)
                continue
            refuse = reserve.opened()
            server.heads.pressed(reserve.pressed)  # a refusal starts the fault
            connections.start_soon(_serve_counted, server, reserve, stream, refuse, reserve.pressed)


async def _serve_counted(
    server: _Server, reserve: Reserve, stream: trio.SocketStream, refuse: bool, pressed: bool
) -> None:
    try:
        await server.handle(stream, refuse=refuse, pressed=pressed)
    finally:
        reserve.closed()


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

    It raises the process's soft open-file limit to the hard one first (and
    logs ``open files: soft limit raised from A to B`` if it was lower), and
    keeps ``max_fd_share`` of that limit for connections: past it, new ones
    are refused at once (HTTP 503 ``overloaded``, WebSocket close 1013).

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
    raise_open_file_limit()

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

        reserve = Reserve(node.faults, settings.max_fd_share)
        async with trio.open_nursery() as connections:
            async with trio.open_nursery() as front:
                front.start_soon(reserve.watch)
                for listener in listeners:
                    front.start_soon(_accept, listener, server, reserve, connections)
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
