"""Authentication (spec §4.2, §5)."""

from __future__ import annotations

from typing import Any

import msgspec
from quart import Blueprint, Response, g, request

from ..records import Participant
from ..services.accounts import Keep
from ..services.authz import Actor, held_permissions, tier_of
from ._common import bearer_token, caller, client_address, node, reply
from .contract import Body, Shape, accepts, answers, public
from .objects import Ok, ParticipantView, Session, Timestamp

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


class MeChange(Body):
    #: a name shown beside the unique name: spaces allowed, at most as long
    #: as a name, no control characters; ``null`` or ``""`` clears it;
    #: absent: no change
    display_name: str | msgspec.UnsetType | None = msgspec.UNSET
    #: whether one's read position in DMs is shown to the other members;
    #: off, one sees theirs no more either (decision 0071); absent: no change
    read_receipts: bool | msgspec.UnsetType = msgspec.UNSET


class PasswordChange(Body):
    #: the password now
    current: str
    #: the new password, held to the rules of a registration's
    new: str


class PasswordChanged(Ok):
    """The password was changed; the caller's other tokens were signed out."""

    #: how many other tokens were signed out
    signed_out: int


class SignInSessionView(Shape):
    """One of the caller's tokens that is still good (a signed-in session)."""

    #: what ``DELETE /api/auth/sessions/{tokenId}`` takes
    token_id: str
    #: how it was issued: setup, register, login, guest, bot, did, managed
    kind: str
    created_at: Timestamp
    #: to about a minute; null: not known (not used since the node recorded uses)
    last_used_at: Timestamp | None
    expires_at: Timestamp
    #: the User-Agent that signed it in; null: not recorded
    user_agent: str | None
    #: the token of this request
    current: bool


class Me(ParticipantView):
    """The caller, with its rank and what it may do."""

    kind: str
    priority: int
    tier: int
    permissions: list[str]
    #: whether the caller shares read receipts in DMs (and sees others')
    read_receipts: bool


@bp.post("/api/auth/register")
@public()
@accepts(Credentials)
@answers(Session, 201)
async def register(data: Credentials) -> tuple[Any, int]:
    """Register a person (while the mesh's registration is open)."""
    session = await node().accounts.register(
        data.name, data.password, address=client_address(), user_agent=_user_agent()
    )
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
        data.name,
        data.password,
        address=client_address(),
        waited=waited,
        user_agent=_user_agent(),
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
    session = await node().accounts.guest(
        data.name, address=client_address(), user_agent=_user_agent()
    )
    return reply(session.to_json(), 201)


def _user_agent() -> str | None:
    return request.headers.get("User-Agent")


@bp.get("/api/auth/me")
@answers(Me)
async def me() -> tuple[Any, int]:
    """The caller: who it is, its role's rank and its permissions."""
    actor = await caller()
    accounts = node().accounts
    participant = await accounts.get(actor, actor.participant_id)
    return reply(_me(actor, participant, await accounts.read_receipts(actor)))


def _me(actor: Actor, participant: Participant, read_receipts: bool) -> dict[str, Any]:
    return {
        **participant.to_json(),
        "kind": participant.kind,
        "priority": actor.priority,
        "tier": tier_of(actor.priority),
        "permissions": held_permissions(actor),
        "readReceipts": read_receipts,
    }


@bp.patch("/api/auth/me")
@accepts(MeChange)
@answers(Me)
async def change_me(data: MeChange) -> tuple[Any, int]:
    """Change the caller's own settings (its display name, whether it
    shares read receipts in DMs); answers the caller as ``GET
    /api/auth/me`` does. Limited by the ``profile`` rate rule; a new
    display name reaches everyone who shares a room or DM with the caller
    as ``participant_updated``."""
    actor = await caller()
    participant, receipts = await node().accounts.change_settings(
        actor,
        display_name=Keep.KEEP if data.display_name is msgspec.UNSET else data.display_name,
        read_receipts=None if data.read_receipts is msgspec.UNSET else data.read_receipts,
    )
    return reply(_me(actor, participant, receipts))


@bp.post("/api/auth/password")
@accepts(PasswordChange)
@answers(PasswordChanged)
async def change_password(data: PasswordChange) -> tuple[Any, int]:
    """Change the caller's password (403 ``wrong_password`` for a wrong
    current one; attempts count as logins for the caller's name). Every
    other token of the caller is signed out (their WebSocket sessions end);
    this request's token stays good."""
    actor = await caller()
    signed_out = await node().accounts.change_password(
        actor, bearer_token(), data.current, data.new, address=client_address()
    )
    return reply({"ok": True, "signedOut": signed_out})


@bp.get("/api/auth/sessions")
@answers(list[SignInSessionView])
async def sessions() -> tuple[Any, int]:
    """The caller's tokens that are still good (its signed-in sessions),
    oldest first; the one of this request is ``current``."""
    actor = await caller()
    found = await node().accounts.list_sessions(actor, bearer_token())
    return reply([session.to_json() for session in found])


@bp.delete("/api/auth/sessions/<token_id>")
@answers(Ok)
async def sign_out_session(token_id: str) -> tuple[Any, int]:
    """Sign one of the caller's tokens out (404 ``session_not_found`` if it
    is not one of its good tokens): it is refused from now on and its
    WebSocket sessions end. The current one too (as a logout)."""
    actor = await caller()
    await node().accounts.sign_out_session(actor, bearer_token(), token_id)
    return reply({"ok": True})


@bp.post("/api/auth/logout")
@answers(Ok)
async def logout() -> tuple[Any, int]:
    """Sign this token out (the caller's other tokens stay valid)."""
    actor = await caller()
    await node().accounts.logout(actor, bearer_token())
    return reply({"ok": True})
