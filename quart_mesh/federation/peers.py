"""This node's peers as shared rooms and the relay meet them: the connection
behind an admin's connection id or behind a peer's signed call, and the
``@handle`` that a peer's rooms and participants are named with here."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy.engine import Connection

from ..errors import BadRequest, Conflict, Forbidden, NotFound
from ..ids import is_ulid
from ..store import Database
from ..store import connections as connections_repo

__all__ = [
    "DISCONNECTED_PATH",
    "accepted_connection",
    "get_connection",
    "handle_of",
    "peer_connection",
    "require_accepted",
]

_SLUG = re.compile(r"[^a-z0-9]+")
#: where a node is told that a connection with it ended (node-to-node)
DISCONNECTED_PATH = "/api/connections/disconnected"


def handle_of(node_name: str) -> str:
    """The ``@handle`` a node's participants and rooms get here: its name, slugged."""
    slug = _SLUG.sub("-", node_name.casefold()).strip("-")[:32].strip("-")
    return slug or "peer"


async def get_connection(db: Database, connection_id: str) -> connections_repo.ConnectionRow:
    """The connection *connection_id*.

    Raises:
        NotFound: ``connection_not_found`` (also for a malformed id).
    """
    row = None
    if is_ulid(connection_id):
        row = await db.read(lambda c: connections_repo.get_connection(c, connection_id))
    if row is None:
        raise NotFound("no such connection", "connection_not_found")
    return row


async def accepted_connection(db: Database, connection_id: str) -> connections_repo.ConnectionRow:
    """The connection *connection_id*, which must be accepted.

    Raises:
        NotFound: ``connection_not_found``.
        Conflict: ``not_accepted``.
    """
    row = await get_connection(db, connection_id)
    if row.status != "accepted":
        raise Conflict(f"this connection is {row.status}, not accepted", "not_accepted")
    return row


async def peer_connection(
    db: Database, did: str, fields: dict[str, Any], *, accepted: bool = True
) -> connections_repo.ConnectionRow:
    """The connection a peer's signed call names (``connectionId`` in
    *fields*), which must be with the node that signed it (*did*) and, if
    *accepted*, accepted.

    Raises:
        BadRequest: ``invalid_field``.
        NotFound: ``connection_not_found`` (also for another node's connection).
        Forbidden: ``not_connected``.
    """
    connection_id = fields.get("connectionId")
    if not isinstance(connection_id, str) or not is_ulid(connection_id):
        raise BadRequest("connectionId must be a ULID", "invalid_field")
    row = await db.read(lambda c: connections_repo.get_connection(c, connection_id))
    if row is None or row.peer_did != did:
        raise NotFound("no such connection with this node", "connection_not_found")
    if accepted and row.status != "accepted":
        raise Forbidden(f"this connection is {row.status}, not accepted", "not_connected")
    return row


def require_accepted(conn: Connection, connection_id: str) -> None:
    """Inside a unit of work: raises Conflict (``not_accepted``) unless the
    connection is accepted now."""
    row = connections_repo.get_connection(conn, connection_id)
    if row is None or row.status != "accepted":
        raise Conflict("this connection is not accepted", "not_accepted")
