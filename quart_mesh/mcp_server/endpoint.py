"""The MCP endpoint: ``/mcp`` (Streamable HTTP) in front of the Quart app.

The official ``mcp`` SDK speaks the protocol (:class:`McpEndpoint` builds
its ``MCPServer`` and uses its ``StreamableHTTPSessionManager``); this
module is what the node adds around it, in front of the app as ASGI:

- **Auth on every request.** Each request to ``/mcp`` is authenticated with
  its bearer token by ``Accounts.authenticate`` (a signed-out token, or a
  deleted participant's, is refused at once), before the SDK sees it: 401
  with ``WWW-Authenticate: Bearer … resource_metadata="…"`` pointing at the
  OAuth protected-resource metadata (RFC 9728), which this endpoint serves
  at ``/.well-known/oauth-protected-resource/mcp``. The caller goes to the
  tools in the request's scope (:class:`~.tools.Caller`), and to the SDK as
  its authenticated user, whose identity (the participant) owns the
  session: the SDK answers 404 to a request for a session with another
  participant's token.
- **Sessions per participant** at most ``max_mcp_sessions_per_participant``
  (429 ``too_many_sessions`` beyond): a seat taken by each request that
  comes without a session (2026 requests too, while they run), kept by the
  session its ``initialize`` opened until the SDK tears it down.
- **One tree.** :meth:`McpEndpoint.run` runs the session manager (its task
  group holds every session) and the subscription tasks; the app starts it
  in its lifespan, beside the node, so a failure there ends the server.
- **Several workers** (``quart-mesh serve --workers N``): a session lives
  in the process that opened it, and the kernel may hand the client's next
  connection to another; the handshake revisions are then served without
  sessions (the SDK's stateless mode: no GET stream, so no
  ``resources/subscribe`` notifications; ``subscriptions/listen`` of the
  2026 revision, a request like any other, still works).
- Each request gets the access record and HTTP metrics the app's routes
  get (route ``/mcp``; a stream's duration is its life).
- The SDK's DNS-rebinding guard is off: it guards servers that trust
  whoever reaches them on localhost, and every request here carries a
  token; a browser's cross-site request is refused by its ``Origin`` instead
  (not this node's own).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.auth import ProtectedResourceMetadata
from mcp_types import CallToolResult, InputRequiredResult
from starlette.authentication import AuthCredentials

from .._version import __version__
from ..errors import MeshError, RateLimited, Unauthorized, Unavailable, error_body
from ..logs import log_request, request_id_from
from .rooms import RoomSubscriptions, behaviour, connection_of, register_rooms
from .tools import CALLER, Caller, Dropped, ToolBox, register, tool_error

if TYPE_CHECKING:
    from ..config import Settings
    from ..node import Node

__all__ = ["METADATA_PATH", "PATH", "McpEndpoint"]

log = logging.getLogger(__name__)

PATH = "/mcp"
METADATA_PATH = "/.well-known/oauth-protected-resource/mcp"
#: the same document where a client looks for the host's (RFC 9728 §3.1 fallback)
_ROOT_METADATA_PATH = "/.well-known/oauth-protected-resource"
_SESSION_HEADER = b"mcp-session-id"
#: where the opening request's seat is in its ASGI scope
_SEAT = "quart_mesh.mcp.seat"

ASGIApp = Callable[[Scope, ASGIReceiveCallable, ASGISendCallable], Awaitable[None]]


class _MeshMCP(MCPServer[Any]):
    """The SDK's server, answering a mesh error as the tool's error result
    (the SDK would report it as a crash, without its text)."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Any = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:
            if isinstance(error.__cause__, MeshError):
                return tool_error(error.__cause__)
            raise


@contextlib.contextmanager
def _logging_left_alone() -> Iterator[None]:
    """``MCPServer()`` calls ``logging.basicConfig`` (a Rich handler at INFO
    on the root logger) when the root has no handler yet: the node's logging
    is the node's (``logs.py``), so the root has one while it is built."""
    root = logging.getLogger()
    guard = logging.NullHandler()
    root.addHandler(guard)
    try:
        yield
    finally:
        root.removeHandler(guard)


class _Seat:
    """One of a participant's MCP session seats: taken by a request that
    opens no session yet, kept by the session that request opened (then
    given back at its teardown), given back once either way."""

    __slots__ = ("_pid", "_seats", "kept")

    def __init__(self, seats: Counter[str], pid: str) -> None:
        self._seats = seats
        self._pid = pid
        self.kept = False
        seats[pid] += 1

    def release(self) -> None:
        self._seats[self._pid] -= 1
        if self._seats[self._pid] <= 0:
            del self._seats[self._pid]


class _Record:
    """What the access record of one request says."""

    __slots__ = ("address", "participant_id", "status")

    def __init__(self) -> None:
        #: 500 until an answer begins (none begun: the request failed)
        self.status = 500
        self.participant_id: str | None = None
        #: the client's address, behind trusted proxies the forwarded one
        self.address: str | None = None


def _route(scope: Scope) -> str | None:
    """The endpoint's route *scope* asks for, if any."""
    if scope["type"] != "http":
        return None
    path = scope["path"]
    if path in (PATH, PATH + "/"):
        return PATH
    if path in (METADATA_PATH, _ROOT_METADATA_PATH):
        return path
    return None


class McpEndpoint:
    """``/mcp`` for one app: the SDK's server and session manager, the auth
    and session seats around them (see the module docstring)."""

    def __init__(self, settings: Settings, node_of: Callable[[], Node]) -> None:
        """Build the MCP server (no I/O). *node_of* returns the serving node."""
        self._settings = settings
        self._node_of = node_of
        self._nursery: trio.Nursery | None = None
        #: the app's HTTP metrics (``observe(method, route, status, seconds)``)
        self.observe: Callable[[str, str, int, float], None] | None = None
        #: MCP sessions open per participant, and requests opening one
        self._seats: Counter[str] = Counter()
        tools = ToolBox()
        register(tools, node_of)
        with _logging_left_alone():
            self.mcp = _MeshMCP(
                name="quart-mesh",
                title="quart-mesh",
                version=__version__,
                instructions=behaviour(settings),
                # the SDK's subscriptions/listen fans every resource event out to
                # every listener, whoever may read the room: ours follows each
                # caller's feed instead (rooms.py)
                subscriptions=False,
                tools=tools.tools,
            )
        register_rooms(self.mcp, node_of, settings, RoomSubscriptions(node_of, self._nursery_of))
        self.mcp.middleware.append(self._count_session)
        #: serve the handshake revisions without sessions (several workers)
        self.stateless = settings.workers > 1
        self._manager = self._new_manager()
        self._manager_ran = False

    def _new_manager(self) -> StreamableHTTPSessionManager:
        """A session manager of the SDK's (one runs only once); its
        Starlette app is not used (see the module docstring)."""
        limits = self._settings.limits
        self.mcp.streamable_http_app(
            streamable_http_path=PATH,
            # a session lives in the process that opened it; with several
            # workers the next request may reach another: no sessions then
            stateless_http=self.stateless,
            max_request_body_size=limits.max_body_bytes,
            session_idle_timeout=limits.mcp_session_idle_seconds,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        return self.mcp.session_manager

    @property
    def running(self) -> bool:
        return self._nursery is not None

    def _nursery_of(self) -> trio.Nursery:
        if self._nursery is None:
            raise RuntimeError("the MCP endpoint is not running")
        return self._nursery

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the SDK's session manager (every MCP session is a task of it)
        and the subscription tasks until cancelled; report started when
        requests can be served. Cancelling it ends every session; it may run
        again after (an app served twice), with a new manager.
        """
        if self._manager_ran:
            self._manager = self._new_manager()
        self._manager_ran = True
        try:
            async with self._manager.run(), trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None

    def wrap(self, app: ASGIApp) -> ASGIApp:
        """*app* with ``/mcp`` and its resource metadata served in front of it."""

        async def wrapped(
            scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
        ) -> None:
            route = _route(scope)
            if route is None:
                await app(scope, receive, send)
                return
            assert scope["type"] == "http"
            record = _Record()

            async def sending(message: Any) -> None:
                if message["type"] == "http.response.start":
                    record.status = message["status"]
                await send(message)

            started = time.perf_counter()
            try:
                if route == PATH:
                    await self._serve(scope, receive, sending, record)
                else:
                    await self._metadata(scope, sending)
            finally:
                self._log(scope, route, record, time.perf_counter() - started)

        return wrapped

    def _log(self, scope: HTTPScope, route: str, record: _Record, seconds: float) -> None:
        """The access record and the HTTP metrics, as the app writes them for
        its routes (the route, not the path; a stream's duration is its life)."""
        method = scope["method"]
        header = next((v for k, v in scope["headers"] if k == b"x-request-id"), None)
        request_id = request_id_from(header.decode("latin-1") if header else None)
        client = record.address or _client_host(scope)
        log_request(
            method, route, record.status, seconds, record.participant_id, request_id, client
        )
        if self.observe is not None:
            self.observe(method, route, record.status, seconds)

    async def _serve(
        self,
        scope: HTTPScope,
        receive: ASGIReceiveCallable,
        send: ASGISendCallable,
        record: _Record,
    ) -> None:
        if not self.running:
            await _json(send, 503, error_body("the node is starting or stopping", "unavailable"))
            return
        if not _same_origin(scope):
            body = error_body("cross-origin requests to /mcp are refused", "forbidden")
            await _json(send, 403, body)
            return
        token = _bearer(scope)
        node = self._node_of()
        try:
            actor = await node.accounts.authenticate(token)
            token_id = node.tokens.check(token).token_id
        except Unauthorized as error:
            await self._unauthorized(scope, send, error, token_sent=bool(token))
            return
        except Unavailable as error:
            await _json(send, error.status, error.to_json())
            return
        pid = record.participant_id = actor.participant_id
        address = record.address = node.client_addresses.resolve(
            _client_host(scope), _headers(scope, node.client_addresses.header)
        )
        user = AuthenticatedUser(AccessToken(token=token, client_id=pid, subject=pid, scopes=[]))
        dropped = Dropped()
        receive = _watching(receive, dropped)
        authed: dict[str, Any] = {
            **scope,
            CALLER: Caller(actor, token_id, token, address, dropped),
            "user": user,
            "auth": AuthCredentials([]),
        }
        if any(name == _SESSION_HEADER for name, _ in scope["headers"]):
            await self._handle(authed, receive, send)
            return
        # no session yet: an initialize (or a 2026 request, which opens none)
        cap = self._settings.limits.max_mcp_sessions_per_participant
        if self._seats[pid] >= cap:
            refused = RateLimited(
                f"you have {cap} MCP sessions open, the most allowed: close one first",
                1.0,
                "too_many_sessions",
            )
            await _json(send, 429, refused.to_json(), [(b"retry-after", b"1")])
            return
        seat = authed[_SEAT] = _Seat(self._seats, pid)
        try:
            await self._handle(authed, receive, send)
        finally:
            if not seat.kept:  # no session came of it
                seat.release()

    async def _handle(
        self, scope: dict[str, Any], receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        """The SDK serves the request; an error of its own (a session torn
        down under a request, a client gone mid-answer) is logged here and
        answered 500 without internals if no answer had begun."""
        started = False

        async def sending(message: Any) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await self._manager.handle_request(scope, receive, sending)  # type: ignore[arg-type]
        except Exception:
            log.exception("the MCP SDK failed on a request")
            if not started:
                body = error_body("internal error in the MCP endpoint", "internal_error")
                with contextlib.suppress(Exception):  # the connection may be gone too
                    await _json(send, 500, body)

    async def _count_session(
        self, ctx: ServerRequestContext[Any, Any], call_next: Callable[[Any], Awaitable[Any]]
    ) -> Any:
        """SDK middleware: a session whose ``initialize`` succeeded keeps the
        seat its opening request took until the SDK tears the session down."""
        result = await call_next(ctx)
        if ctx.method == "initialize":
            connection = connection_of(ctx)
            seat = getattr(ctx.request, "scope", {}).get(_SEAT)
            if connection.session_id is not None and isinstance(seat, _Seat):
                seat.kept = True
                connection.exit_stack.callback(seat.release)
        return result

    def sessions_of(self, participant_id: str) -> int:
        """MCP sessions *participant_id* holds open now (and requests opening one)."""
        return self._seats[participant_id]

    def _base_url(self, scope: HTTPScope) -> str:
        """The node's URL as the client reached it (``public_url`` if set)."""
        configured = self._settings.public_url
        if configured:
            return configured.rstrip("/")
        host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), None)
        if host is None:
            server = scope.get("server") or ("localhost", None)
            host = str(server[0]) if server[1] is None else f"{server[0]}:{server[1]}"
        return f"{scope.get('scheme', 'http')}://{host}"

    async def _metadata(self, scope: HTTPScope, send: ASGISendCallable) -> None:
        """RFC 9728 protected-resource metadata for ``/mcp``: the node is
        the resource and where its tokens come from; tokens go in the header."""
        base = self._base_url(scope)
        document = ProtectedResourceMetadata.model_validate(
            {
                "resource": f"{base}{PATH}",
                "authorization_servers": [base],
                "bearer_methods_supported": ["header"],
                "resource_name": "quart-mesh MCP server",
                "resource_documentation": f"{base}/skill.md",
            }
        )
        body = document.model_dump(mode="json", exclude_none=True)
        await _json(send, 200, body)

    async def _unauthorized(
        self, scope: HTTPScope, send: ASGISendCallable, error: MeshError, *, token_sent: bool
    ) -> None:
        # RFC 6750 §3: no error attribute when no token was sent
        parts = ['error="invalid_token"'] if token_sent else []
        description = error.message.replace('"', "'")
        parts.append(f'error_description="{description}"')
        parts.append(f'resource_metadata="{self._base_url(scope)}{METADATA_PATH}"')
        challenge = ("Bearer " + ", ".join(parts)).encode()
        await _json(send, 401, error.to_json(), [(b"www-authenticate", challenge)])


def _watching(receive: ASGIReceiveCallable, dropped: Dropped) -> ASGIReceiveCallable:
    """*receive*, telling *dropped* when the client goes away."""

    async def watched() -> Any:
        message = await receive()
        if message["type"] == "http.disconnect":
            dropped.fire()
        return message

    return watched


def _bearer(scope: HTTPScope) -> str:
    header = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
    scheme, _, token = header.decode("latin-1").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _headers(scope: HTTPScope, name: str) -> list[str]:
    key = name.lower().encode("latin-1")
    return [v.decode("latin-1") for k, v in scope["headers"] if k == key]


def _client_host(scope: HTTPScope) -> str | None:
    client = scope.get("client")
    return str(client[0]) if client else None


def _same_origin(scope: HTTPScope) -> bool:
    """No ``Origin`` (not a browser), or this node's own origin."""
    origin = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"origin"), None)
    if origin is None:
        return True
    host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), None)
    return host is not None and urlsplit(origin).netloc.lower() == host.lower()


async def _json(
    send: ASGISendCallable,
    status: int,
    body: dict[str, Any],
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    data = json.dumps(body, ensure_ascii=False).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *(headers or []),
            ],
            "trailers": False,
        }
    )
    await send({"type": "http.response.body", "body": data, "more_body": False})
