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
  (429 ``too_many_sessions`` beyond): counted from the SDK's ``initialize``
  to the session's teardown, plus requests that open none while they run.
- **One tree.** :meth:`McpEndpoint.run` runs the session manager (its task
  group holds every session) and the subscription tasks; the app starts it
  in its lifespan, beside the node, so a failure there ends the server.
- The SDK's DNS-rebinding guard is off: it guards servers that trust
  whoever reaches them on localhost, and every request here carries a
  token; a browser's cross-site request is refused by its ``Origin`` instead
  (not this node's own).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
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
from .rooms import RoomSubscriptions, behaviour, connection_of, register_rooms
from .tools import CALLER, Caller, register, request_caller, tool_error

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


class McpEndpoint:
    """``/mcp`` for one app: the SDK's server and session manager, the auth
    and session seats around them (see the module docstring)."""

    def __init__(self, settings: Settings, node_of: Callable[[], Node]) -> None:
        """Build the MCP server (no I/O). *node_of* returns the serving node."""
        self._settings = settings
        self._node_of = node_of
        self._nursery: trio.Nursery | None = None
        #: MCP sessions open per participant, and requests opening one
        self._sessions: Counter[str] = Counter()
        self._opening: Counter[str] = Counter()
        self.mcp = _MeshMCP(
            name="quart-mesh",
            title="quart-mesh",
            version=__version__,
            instructions=behaviour(settings),
            # the 2026 revision's subscriptions/listen fans every resource
            # event out to every listener, whoever may read the room: off
            subscriptions=False,
        )
        register(self.mcp, node_of)
        register_rooms(self.mcp, node_of, settings, RoomSubscriptions(node_of, self._nursery_of))
        self.mcp.middleware.append(self._count_session)
        self.mcp.streamable_http_app(
            streamable_http_path=PATH,
            max_request_body_size=settings.limits.max_body_bytes,
            session_idle_timeout=settings.limits.mcp_session_idle_seconds,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self._manager: StreamableHTTPSessionManager = self.mcp.session_manager

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
        requests can be served. Cancelling it ends every session.

        Raises:
            RuntimeError: it ran before (the SDK's manager runs once).
        """
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
            if scope["type"] == "http":
                path = scope["path"]
                if path in (PATH, PATH + "/"):
                    await self._serve(scope, receive, send)
                    return
                if path in (METADATA_PATH, _ROOT_METADATA_PATH):
                    await self._metadata(scope, send)
                    return
            await app(scope, receive, send)

        return wrapped

    async def _serve(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
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
        pid = actor.participant_id
        address = node.client_addresses.resolve(
            _client_host(scope), _headers(scope, node.client_addresses.header)
        )
        user = AuthenticatedUser(AccessToken(token=token, client_id=pid, subject=pid, scopes=[]))
        authed: dict[str, Any] = {
            **scope,
            CALLER: Caller(actor, token_id, address),
            "user": user,
            "auth": AuthCredentials([]),
        }
        if any(name == _SESSION_HEADER for name, _ in scope["headers"]):
            await self._manager.handle_request(authed, receive, send)  # type: ignore[arg-type]
            return
        # no session yet: an initialize (or a 2026 request, which opens none)
        cap = self._settings.limits.max_mcp_sessions_per_participant
        if self._sessions[pid] + self._opening[pid] >= cap:
            refused = RateLimited(
                f"you have {cap} MCP sessions open, the most allowed: close one first",
                1.0,
                "too_many_sessions",
            )
            await _json(send, 429, refused.to_json(), [(b"retry-after", b"1")])
            return
        self._opening[pid] += 1
        try:
            await self._manager.handle_request(authed, receive, send)  # type: ignore[arg-type]
        finally:
            self._opening[pid] -= 1
            if not self._opening[pid]:
                del self._opening[pid]

    async def _count_session(
        self, ctx: ServerRequestContext[Any, Any], call_next: Callable[[Any], Awaitable[Any]]
    ) -> Any:
        """SDK middleware: a session whose ``initialize`` succeeded holds a
        seat of its participant until the SDK tears it down."""
        result = await call_next(ctx)
        if ctx.method == "initialize":
            connection = connection_of(ctx)
            if connection.session_id is not None:
                pid = request_caller(ctx).actor.participant_id
                self._sessions[pid] += 1
                connection.exit_stack.callback(self._session_ended, pid)
        return result

    def _session_ended(self, pid: str) -> None:
        self._sessions[pid] -= 1
        if self._sessions[pid] <= 0:
            del self._sessions[pid]

    def sessions_of(self, participant_id: str) -> int:
        """MCP sessions *participant_id* holds open now."""
        return self._sessions[participant_id]

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
