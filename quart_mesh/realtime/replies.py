"""The session's own frames to its client: errors in answer to a frame."""

from __future__ import annotations

from typing import Any

from ..errors import MeshError, Overloaded, RateLimited
from ..events import frame_of
from ..services.validation import is_client_id

__all__ = ["error_reply", "retry_after"]


def error_reply(
    message: str,
    code: str,
    frame_type: Any,
    retry_after: float | None = None,
    client_id: Any = None,
) -> str:
    """An ``error`` frame answering a client frame of *frame_type* (named in
    its ``frame`` field when it is a string), with the ``clientId`` the
    client gave it (when valid) and ``retryAfter`` if it may be sent again."""
    payload: dict[str, Any] = {"type": "error", "message": message, "code": code}
    if isinstance(frame_type, str):
        payload["frame"] = frame_type[:40]
    if retry_after is not None:
        payload["retryAfter"] = retry_after
    if isinstance(client_id, str) and is_client_id(client_id):
        # which send failed, for a client that gave its sends ids
        payload["clientId"] = client_id
    return frame_of(payload)


def retry_after(error: MeshError) -> float | None:
    """Seconds until a refused frame would be accepted (``retryAfter``): rate
    limits, and a store with too many writes waiting (``overloaded``)."""
    return error.retry_after if isinstance(error, (RateLimited, Overloaded)) else None
