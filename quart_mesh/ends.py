"""Why a subscription ended, and what each path tells its client then.

A subscription (``broker.py``) ends for one of the reasons of
:class:`EndReason`; whoever owns it — a WebSocket session, a long poll, a
webhook delivery, an MCP listen stream, an A2A stream, an in-process event
stream — reads the reason and acts on it. What each reason means to them
is decided once, here, in :data:`ENDINGS`: the WebSocket's close code,
error code and text, whether the caller's access ended (a waiting request
is refused), and whether the feed lost its place (its owner follows again
from its cursor, losing nothing).

The values are the strings stored in the cluster stream's ``disconnect``
changes and written to the session log (``reason=``), so they never change.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .errors import Unauthorized

__all__ = ["ENDINGS", "POLICY_VIOLATION", "TRY_AGAIN_LATER", "EndReason", "Ending"]

#: WebSocket close codes (RFC 6455 §7.4.1)
NORMAL_CLOSURE = 1000
POLICY_VIOLATION = 1008
TRY_AGAIN_LATER = 1013


class EndReason(StrEnum):
    """Why a subscription ended."""

    #: its owner closed it (the client went, the request ended) or the node stopped
    CLOSED = "closed"
    #: its buffer filled: the owner could not keep up
    LAGGING = "lagging"
    #: its participant was deleted
    REMOVED = "removed"
    #: the token the owner authenticated with expired
    EXPIRED = "expired"
    #: a guest's access ended (the mesh stopped being public)
    REVOKED = "revoked"
    #: its token (or every token of its participant) was signed out
    SIGNED_OUT = "signed_out"
    #: the node's delivery started over (the store was unavailable)
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True, slots=True)
class Ending:
    """What one :class:`EndReason` means to the owners of a subscription."""

    #: the WebSocket close code (1000 for a normal close)
    close_code: int
    #: the close frame's reason
    close_reason: str
    #: the error code of the ``error`` frame sent before closing, or None: no
    #: error frame (where the access ended, an MCP listen stream ends with
    #: this code and :attr:`text` too)
    code: str | None
    #: that frame's text
    text: str
    #: the caller's access ended: a request waiting on the feed is refused
    #: with :attr:`refusal`, an in-process stream raises ``AccessEnded``
    access_ended: bool = False
    #: the feed lost its place but the caller may go on: follow again from
    #: the cursor (``StreamLagged`` in process, the bus started over)
    lost_place: bool = False
    #: what was queued before the end is still handed to the owner
    #: (``Subscription.take``); otherwise it is dropped (the cursor covers it)
    keeps_queue: bool = False
    #: the request-path error (long poll, A2A) for an ended access, as REST
    #: answers a request with such a token
    refusal: tuple[str, str] | None = None

    @property
    def farewell(self) -> bool:
        """Whether a WebSocket client is told (an error frame or a close
        code of its own); a ``closed`` subscription's session just ends."""
        return self.close_code != NORMAL_CLOSURE

    def refused(self) -> Unauthorized | None:
        """The error a request waiting on the feed answers with when the
        caller's access ended (:attr:`refusal`), else None."""
        if self.refusal is None:
            return None
        text, code = self.refusal
        return Unauthorized(text, code)


_SIGNED_OUT_REFUSAL = ("this token was signed out", "token_revoked")

#: what each reason means (one table for every path)
ENDINGS: dict[EndReason, Ending] = {
    EndReason.CLOSED: Ending(NORMAL_CLOSURE, "", None, "", keeps_queue=True),
    EndReason.LAGGING: Ending(
        TRY_AGAIN_LATER,
        "lagging",
        "lagging",
        "this connection fell too far behind; reconnect with since=<last cursor>",
        lost_place=True,
    ),
    EndReason.UNAVAILABLE: Ending(
        TRY_AGAIN_LATER,
        "unavailable",
        None,
        "the node's event stream was interrupted: listen again",
        lost_place=True,
        keeps_queue=True,
    ),
    EndReason.REMOVED: Ending(
        POLICY_VIOLATION,
        "removed",
        "removed",
        "this participant was removed",
        access_ended=True,
        refusal=("the token's participant no longer exists", "invalid_token"),
    ),
    EndReason.EXPIRED: Ending(
        POLICY_VIOLATION,
        "token_expired",
        "token_expired",
        "the token has expired; authenticate again with a new one",
    ),
    EndReason.REVOKED: Ending(
        POLICY_VIOLATION,
        "token_revoked",
        "token_revoked",
        "guest access to this mesh has ended",
        access_ended=True,
        refusal=_SIGNED_OUT_REFUSAL,
    ),
    EndReason.SIGNED_OUT: Ending(
        POLICY_VIOLATION,
        "token_revoked",
        "token_revoked",
        "this token was signed out",
        access_ended=True,
        refusal=_SIGNED_OUT_REFUSAL,
    ),
}
