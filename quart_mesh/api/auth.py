"""Authentication (spec §4.2, §5)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response, g

from ..services.authz import held_permissions, tier_of
from ._common import bearer_token, caller, client_address, node, reply
from .contract import Body, accepts, answers, public
from .objects import Ok, ParticipantView, Session

bp = Blueprint("auth", __name__)


class Credentials(Body):
    #: stored in NFKC (a fullwidth name is its plain letters); a new name that
    #: looks like an existing one (the same skeleton, Unicode TR39) is refused
    #: with 409 `name_confusable`
    name: str
    password: str


class GuestName(Body):
    #: a name of the guest's choosing (one is made up when absent); held to the
    #: same rules as a registered name (409 `name_taken`, `name_confusable`)
    name: str | None = None


class Me(ParticipantView):
    """The caller, with its rank and what it may do."""

    kind: str
    priority: int
    tier: int
    permissions: list[str]


@bp.post("/api/auth/register")
@public()
@accepts(Credentials)
@answers(Session, 201)
async def register(data: Credentials) -> tuple[Any, int]:
    """Register a person (while the mesh's registration is open)."""
    session = await node().accounts.register(data.name, data.password, address=client_address())
    return reply(session.to_json(), 201)


@bp.post("/api/auth/login")
@public()
@accepts(Credentials)
@answers(Session)
async def login(data: Credentials) -> tuple[Any, int]:
    """Sign in with a name and password: a new token.

    After many failed logins for a name, every login for it waits a few
    seconds before it is answered (right password or not); the answer then
    says how long in ``Login-Delay`` (seconds)."""

    def waited(seconds: float) -> None:
        g.login_delay = seconds

    session = await node().accounts.login(
        data.name, data.password, address=client_address(), waited=waited
    )
    return reply(session.to_json())


@bp.after_request
async def _login_delay(response: Response) -> Response:
    delay: float = g.get("login_delay", 0.0)
    if delay > 0:
        response.headers["Login-Delay"] = f"{delay:.3f}"
    return response


@bp.post("/api/auth/guest")
@public()
@accepts(GuestName)
@answers(Session, 201)
async def guest(data: GuestName) -> tuple[Any, int]:
    """Join as a guest (while the mesh allows guests): a short-lived token."""
    session = await node().accounts.guest(data.name, address=client_address())
    return reply(session.to_json(), 201)


@bp.get("/api/auth/me")
@answers(Me)
async def me() -> tuple[Any, int]:
    """The caller: who it is, its role's rank and its permissions."""
    actor = await caller()
    participant = await node().accounts.get(actor, actor.participant_id)
    return reply(
        {
            **participant.to_json(),
            "kind": participant.kind,
            "priority": actor.priority,
            "tier": tier_of(actor.priority),
            "permissions": held_permissions(actor),
        }
    )


@bp.post("/api/auth/logout")
@answers(Ok)
async def logout() -> tuple[Any, int]:
    """Sign this token out (the caller's other tokens stay valid)."""
    actor = await caller()
    await node().accounts.logout(actor, bearer_token())
    return reply({"ok": True})
