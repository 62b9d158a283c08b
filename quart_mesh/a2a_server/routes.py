"""The A2A routes (Starlette, the SDK's JSON-RPC dispatcher) in front of the
Quart app.

:func:`with_a2a` wraps the app's ASGI callable: HTTP requests for the agent
cards and the JSON-RPC interfaces (``cards.py`` has the layout) go to a
small Starlette app, everything else to Quart. Starlette and sse-starlette
run on anyio, so they run under the node's Trio; the SDK's dispatcher takes
any ``RequestHandler``, and ours (``handler.py``) is Trio-native
(decision 0062 has the probe).

Before the dispatcher sees a call, it is authenticated here with the mesh
token, like every REST request (a deleted participant's token fails at
once): no token or a bad one is a 401 with ``WWW-Authenticate: Bearer``
and a JSON-RPC error body. The body is read first, up to the node's body
limit (``max_body_bytes``), so a refused request leaves nothing unread.
A bot's interface or card that is not an A2A agent (or no bot) is a 404.
The token itself stays here: the handler gets a :class:`Caller` that can
authenticate it again (its waits do, at every re-read).

Each request has its access record and HTTP metrics as the app's routes
do (:func:`with_a2a`): the route, not the path; a stream's duration is its
life.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, Scope
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..errors import MeshError, Unauthorized, error_body
from ..ids import new_id
from ..logs import log_request, request_id_from
from .cards import AGENTS_PREFIX, CARD_PATH, NODE_RPC_PATH, agent_card, node_card
from .handler import Caller, MeshRequestHandler

if TYPE_CHECKING:
    from ..node import Node
    from ..services.authz import Actor

__all__ = ["a2a_app", "is_a2a_path", "with_a2a"]

log = logging.getLogger(__name__)

ASGIApp = Callable[[Scope, ASGIReceiveCallable, ASGISendCallable], Awaitable[None]]
#: the app's HTTP metrics: ``observe(method, route, status, seconds)``
Observe = Callable[[str, str, int, float], None]

#: the request scope's keys this module sets for the handler
_CALLER = "quart_mesh.a2a.caller"
_AGENT = "quart_mesh.a2a.agent_id"
#: set when the request failed and was answered (and logged) already
_FAILED = "quart_mesh.a2a.failed"


def is_a2a_path(path: str) -> bool:
    """Whether *path* is one of the A2A routes."""
    return path in (CARD_PATH, NODE_RPC_PATH) or path.startswith(AGENTS_PREFIX)


def _rpc_error(
    status: int,
    message: str,
    code: str,
    *,
    rpc_code: int = -32600,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": rpc_code, "message": message, "data": {"code": code}},
    }
    return JSONResponse(body, status_code=status, headers=headers)


def _not_found(message: str) -> JSONResponse:
    return JSONResponse(error_body(message, "agent_not_found"), status_code=404)


async def _http_error(request: Request, error: Exception) -> Response:
    """Starlette's own refusals (an unknown path under ``/a2a``, a method a
    route does not take) as JSON, like Quart's."""
    assert isinstance(error, HTTPException)
    status = error.status_code
    message, code = {
        404: ("no such endpoint", "not_found"),
        405: ("method not allowed on this endpoint", "method_not_allowed"),
    }.get(status, (error.detail, "http_error"))
    return JSONResponse(error_body(message, code), status_code=status, headers=error.headers)


async def _mesh_error(request: Request, error: Exception) -> Response:
    """A service's refusal outside a JSON-RPC call (a card while the store is
    unavailable) as the REST API answers it."""
    assert isinstance(error, MeshError)
    return JSONResponse(error.to_json(), status_code=error.status)


class _ContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's context, plus who calls and which bot's interface it is."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        # the token stays out of the handler's state (and any log of it)
        context.state["headers"] = {
            k: v for k, v in request.headers.items() if k.lower() != "authorization"
        }
        context.state["mesh_caller"] = request.scope.get(_CALLER)
        context.state["mesh_agent_id"] = request.scope.get(_AGENT)
        return context


def a2a_app(node: Callable[[], Node]) -> Starlette:
    """The Starlette app of the cards and interfaces over *node*'s services.

    Args:
        node: returns the open node (the app opens it when served).
    """
    dispatcher = JsonRpcDispatcher(MeshRequestHandler(node), _ContextBuilder())

    def base_url(request: Request) -> str:
        return node().address.url or str(request.base_url).rstrip("/")

    def mesh_name() -> str:
        mesh = node().accounts.mesh
        return mesh.name if mesh is not None else "quart-mesh"

    async def get_node_card(request: Request) -> Response:
        agents = await node().agents.a2a_agents()
        if not agents:
            # A2A 1.0 requires a card's skills; the node's are its bots
            return JSONResponse(
                error_body(
                    "no bot of this mesh is an A2A agent yet (managed bots are; "
                    "others opt in with a2a: true)",
                    "no_a2a_agents",
                ),
                status_code=404,
                headers={"Cache-Control": "no-cache"},
            )
        card = node_card(mesh_name(), base_url(request), agents)
        return JSONResponse(agent_card_to_dict(card), headers={"Cache-Control": "no-cache"})

    async def get_agent_card(request: Request) -> Response:
        agent = await node().agents.a2a_agent(request.path_params["agent_id"])
        if agent is None:
            return _not_found("no such A2A agent: the bot does not exist or is not an A2A agent")
        card = agent_card(mesh_name(), base_url(request), agent)
        return JSONResponse(agent_card_to_dict(card), headers={"Cache-Control": "no-cache"})

    async def rpc(request: Request) -> Response:
        mesh_node = node()
        limit = mesh_node.settings.limits.max_body_bytes
        body = bytearray()
        async with contextlib.aclosing(request.stream()) as chunks:
            async for chunk in chunks:
                body += chunk
                if len(body) > limit:
                    break
        if len(body) > limit:
            return _rpc_error(
                413,
                f"the request body is over {limit} bytes",
                "too_large",
                headers={"Connection": "close"},
            )
        request._body = bytes(body)  # the dispatcher reads it from here
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        token = token.strip() if scheme.lower() == "bearer" else ""
        accounts = mesh_node.accounts
        try:
            actor = await accounts.authenticate(token)
            token_id = mesh_node.tokens.check(token).token_id
        except Unauthorized as error:
            return _rpc_error(
                401,
                f"{error.message} (send Authorization: Bearer <mesh token>)",
                error.code,
                headers={"WWW-Authenticate": 'Bearer realm="mesh"'},
            )
        except MeshError as error:
            return _rpc_error(error.status, error.message, error.code, rpc_code=-32603)
        agent_id = request.path_params.get("agent_id")
        if agent_id is not None:
            if await mesh_node.agents.a2a_agent(agent_id) is None:
                return _rpc_error(
                    404,
                    "no such A2A agent: the bot does not exist or is not an A2A agent",
                    "agent_not_found",
                )
            request.scope[_AGENT] = agent_id
        resolver = mesh_node.client_addresses
        address = resolver.resolve(
            request.client.host if request.client else None,
            request.headers.getlist(resolver.header),
        )

        async def authenticate() -> Actor:
            return await accounts.authenticate(token)

        request.scope[_CALLER] = Caller(actor, token_id, address, authenticate)
        return await dispatcher.handle_requests(request)

    async def unexpected(request: Request, error: Exception) -> Response:
        request_id = new_id()
        request.scope[_FAILED] = True
        log.error("unhandled error in A2A request %s", request_id, exc_info=error)
        return _rpc_error(
            500, f"internal error (request id {request_id})", "internal_error", rpc_code=-32603
        )

    return Starlette(
        exception_handlers={
            HTTPException: _http_error,
            MeshError: _mesh_error,
            Exception: unexpected,
        },
        routes=[
            Route(CARD_PATH, get_node_card, methods=["GET"]),
            Route(NODE_RPC_PATH, rpc, methods=["POST"]),
            Route(AGENTS_PREFIX + "{agent_id}" + CARD_PATH, get_agent_card, methods=["GET"]),
            Route(AGENTS_PREFIX + "{agent_id}", rpc, methods=["POST"]),
        ],
    )


#: the routes as the access records and metrics name them (the app's rule syntax)
_AGENT_ROUTE = AGENTS_PREFIX + "<agent_id>"


def _route_of(path: str) -> str:
    """The route *path* matches, as the access record names it (``-``: none)."""
    if path in (CARD_PATH, NODE_RPC_PATH):
        return path
    agent_id, _, rest = path.removeprefix(AGENTS_PREFIX).partition("/")
    if agent_id and (not rest or "/" + rest == CARD_PATH):
        return _AGENT_ROUTE + ("/" + rest if rest else "")
    return "-"


def with_a2a(app: ASGIApp, node: Callable[[], Node], *, observe: Observe | None = None) -> ASGIApp:
    """*app* with the A2A routes in front: their HTTP requests go to
    :func:`a2a_app`, the rest (and every WebSocket) to *app*.

    Each A2A request has its access record (``log_request``) and, with
    *observe* (the app's HTTP metrics), its metrics, as the app's routes do.
    An error the A2A app does not answer itself is logged with an id and
    answered 500 without internals, as Quart's are (the dispatcher answers
    the handler's as JSON-RPC errors itself); Starlette raises it again
    after answering, and it ends here."""
    a2a = a2a_app(node)

    async def asgi(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] != "http" or not is_a2a_path(scope["path"]):
            await app(scope, receive, send)
            return
        status = 500  # no answer started: the server answers 500

        async def sending(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        started = time.perf_counter()
        try:
            await a2a(scope, receive, sending)  # type: ignore[arg-type]
        except Exception:
            if not scope.get(_FAILED):
                raise
        finally:
            _log(scope, status, time.perf_counter() - started, observe)

    return asgi


def _log(scope: Scope, status: int, seconds: float, observe: Observe | None) -> None:
    """The access record and the metrics of one A2A request."""
    assert scope["type"] == "http"
    method, route = scope["method"], _route_of(scope["path"])
    header = next((v for k, v in scope["headers"] if k == b"x-request-id"), None)
    request_id = request_id_from(header.decode("latin-1") if header else None)
    caller = scope.get(_CALLER)
    caller = caller if isinstance(caller, Caller) else None
    client = scope.get("client")
    address = caller.address if caller is not None else (client[0] if client else None)
    participant_id = caller.actor.participant_id if caller is not None else None
    log_request(method, route, status, seconds, participant_id, request_id, address)
    if observe is not None:
        observe(method, route, status, seconds)
