"""Errors of quart-mesh, and the one place they become HTTP responses.

The tree::

    MeshError(status, code, message)      anything a client may be told
    ├── BadRequest           400  bad_request, invalid_json, invalid_field, ...
    ├── Unauthorized         401  unauthorized, invalid_token, invalid_credentials
    ├── Forbidden            403  forbidden, registration_closed, not_member, ...
    ├── NotFound             404  not_found, room_not_found, ...
    ├── Conflict             409  conflict, name_taken, name_confusable, ...,
    │                             already_initialized
    ├── PayloadTooLarge      413  too_large, content_too_large
    ├── RateLimited          429  rate_limited (carries retry_after)
    └── Unavailable          503  storage_unavailable
        └── Overloaded       503  overloaded (the store's write queue is full;
                                  carries retry_after)
    ConfigError                   bad settings at start-up; never reaches a client
    Transient                     a peer, receiver or registry failed in a way worth
                                  trying again (carries after); never reaches a client
    StreamLagged                  an in-process event stream lost its place (fell behind);
                                  carries the cursor to resume from; never reaches a client
    AccessEnded                   an in-process event stream's participant lost its
                                  access (deleted, signed out); never reaches a client

Long-lived loops retry :class:`Unavailable` and :class:`Transient` with
``retry.retrying``; any other exception escaping them is a bug that ends the
process (``docs/architecture.md``, "One tree").

Domain services raise these; transports render them with :func:`error_body`
(REST: JSON body and status; WebSocket: an ``error`` frame). Anything else
that escapes a handler is a bug: it is logged with a request id and the client
gets a 500 without internals.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "AccessEnded",
    "BadGateway",
    "BadRequest",
    "ConfigError",
    "Conflict",
    "Forbidden",
    "GatewayTimeout",
    "InsufficientStorage",
    "MeshError",
    "NotFound",
    "Overloaded",
    "PayloadTooLarge",
    "RateLimited",
    "StoreCorrupt",
    "StoreFromNewerRelease",
    "StreamLagged",
    "Transient",
    "Unauthorized",
    "Unavailable",
    "error_body",
]


class ConfigError(Exception):
    """Settings that cannot be used; reported at start-up."""


class StoreFromNewerRelease(ConfigError):
    """The store was migrated by a newer quart-mesh than this one: it is left
    as it is (downgrades are not supported, ``docs/upgrading.md``)."""


class StoreCorrupt(ConfigError):
    """The SQLite store failed its integrity check at start: the node does
    not serve it (``quart-mesh check`` says what is wrong; ``quart-mesh
    restore`` puts the newest backup back, ``docs/operations.md``)."""


class Transient(Exception):
    """Something the node called failed in a way worth trying again later
    (unreachable, timed out, 5xx). *after*: the least wait the other side
    asked for (its ``Retry-After``), in seconds."""

    def __init__(self, reason: str, after: float = 0.0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.after = after


class StreamLagged(Exception):
    """An event stream (:meth:`Node.events <quart_mesh.Node.events>`) lost
    its place: it fell behind (more events arrived than its buffer holds
    while its consumer did not read, and the node dropped what was queued
    rather than block the publisher), or the node's delivery started over
    (on PostgreSQL, when it could not follow the other processes' commits).
    Nothing is lost for good: every message is stored before it
    is published, so a new stream opened with ``since=error.cursor``
    delivers every message after the last one this stream handed out, in
    order.

    Other events missed meanwhile (edits, reactions, presence, typing) are
    not replayed, as on a WebSocket resume: read current state from the
    services if you need it.
    """

    def __init__(self, cursor: int) -> None:
        super().__init__(f"the event stream fell behind; resume with since={cursor}")
        #: the sequence number of the last message the stream handed out (or
        #: the cursor it started from): open the next stream with ``since=`` this
        self.cursor = cursor


class AccessEnded(Exception):
    """The participant an event stream (:meth:`Node.events
    <quart_mesh.Node.events>`) was opened for lost its access: it was
    deleted (*reason* ``removed``), signed out everywhere (``signed_out``),
    or, a guest, its access ended (``revoked``). A deleted participant's
    next stream fails at once with this; one signed out may open another.
    """

    def __init__(self, reason: str, cursor: int) -> None:
        super().__init__(f"the participant's access ended ({reason})")
        #: ``removed``, ``signed_out`` or ``revoked``
        self.reason = reason
        #: where the stream was (as :attr:`StreamLagged.cursor`)
        self.cursor = cursor


class MeshError(Exception):
    """An error a client may see: an HTTP status, a machine code, a message."""

    status: ClassVar[int] = 400
    default_code: ClassVar[str] = "error"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code

    def to_json(self) -> dict[str, Any]:
        return error_body(self.message, self.code)


class BadRequest(MeshError):
    """The request is malformed or a value is invalid (400)."""

    status = 400
    default_code = "bad_request"


class Unauthorized(MeshError):
    """No token, an invalid or expired one, or wrong credentials (401)."""

    status = 401
    default_code = "unauthorized"


class Forbidden(MeshError):
    """The actor may not do this: its role, the room's rules, the mesh's settings (403)."""

    status = 403
    default_code = "forbidden"


class NotFound(MeshError):
    """No such thing, or none the actor may see (404)."""

    status = 404
    default_code = "not_found"


class Conflict(MeshError):
    """The change conflicts with what is stored: a name taken, already done (409)."""

    status = 409
    default_code = "conflict"


class PayloadTooLarge(MeshError):
    """A body, message or upload over its limit (413)."""

    status = 413
    default_code = "too_large"


class RateLimited(MeshError):
    """Too many attempts: try again in *retry_after* seconds (429)."""

    status = 429
    default_code = "rate_limited"

    def __init__(self, message: str, retry_after: float, code: str | None = None) -> None:
        super().__init__(message, code)
        self.retry_after = retry_after


class InsufficientStorage(MeshError):
    """The data folder's free space is below the node's floor
    (``MESH_DISK_FLOOR``): what would add files (uploads, app sources) is
    refused so that the store keeps room for its own writes (507)."""

    status = 507
    default_code = "insufficient_storage"


class BadGateway(MeshError):
    """Something the node called (a model upstream) failed or answered nonsense."""

    status = 502
    default_code = "upstream_error"


class GatewayTimeout(MeshError):
    """Something the node called did not answer in time."""

    status = 504
    default_code = "upstream_timeout"


class Unavailable(MeshError):
    """The store (or another part the node needs) cannot be used now; worth trying again (503)."""

    status = 503
    default_code = "unavailable"


class Overloaded(Unavailable):
    """Too much is waiting to be written: come back in *retry_after* seconds
    (REST: 503 with ``Retry-After``; WebSocket: an ``overloaded`` error frame)."""

    default_code = "overloaded"

    def __init__(self, message: str, retry_after: float = 1.0, code: str | None = None) -> None:
        super().__init__(message, code)
        self.retry_after = retry_after


def error_body(message: str, code: str) -> dict[str, Any]:
    """The JSON body of every REST error: ``{"error": ..., "code": ...}``."""
    return {"error": message, "code": code}
