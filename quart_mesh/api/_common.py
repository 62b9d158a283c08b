"""Helpers every blueprint uses: the node, the caller, the JSON body, replies."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from quart import current_app, g, request

from ..services.authz import Actor
from ..wire import Fields, parse_json_object

if TYPE_CHECKING:
    from ..node import Node

__all__ = ["bearer_token", "body", "caller", "client_address", "node", "reply", "token_sent"]


def node() -> Node:
    """The node serving this request (``MeshApp`` keeps it in its extensions)."""
    return cast("Node", current_app.extensions["quart_mesh.node"])


def client_address() -> str | None:
    """The address of the client making this request: the peer's, or what a
    trusted proxy forwarded (``quart_mesh/client_address.py``)."""
    resolver = node().client_addresses
    return resolver.resolve(request.remote_addr, request.headers.getlist(resolver.header))


def token_sent() -> bool:
    """Whether the request carries an ``Authorization`` header with something
    in it (an empty one is no token)."""
    return bool(request.headers.get("Authorization", "").strip())


def bearer_token() -> str:
    """The request's bearer token (``""`` if there is none)."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


async def caller() -> Actor:
    """The authenticated participant making this request (checked every request).

    Raises:
        Unauthorized: missing, malformed, expired or revoked token.
    """
    actor: Actor | None = g.get("actor")
    if actor is None:
        actor = await node().accounts.authenticate(bearer_token())
        g.actor = actor
    return actor


async def body() -> Fields:
    """The request's JSON object body; an empty body counts as ``{}``.

    Raises:
        BadRequest: malformed JSON or not an object.
        RequestEntityTooLarge: over ``max_body_bytes`` (rendered as 413).
    """
    raw = await request.get_data(cache=False)
    if not raw.strip():
        return Fields({})
    return Fields(parse_json_object(raw))


def reply(data: Any, status: int = 200) -> tuple[Any, int]:
    return data, status
