"""Repository: the tokens the node issued, until they expire.

Tokens are stateless JWTs (decision 0004): this table is not read when a
token is checked. It lets an operator list a participant's tokens and
revoke them (decision 0046); tokens issued before migration 0020 are not in
it (a participant's ``tokens_not_before`` still ends them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .schema import issued_tokens, revoked_tokens

__all__ = ["IssuedToken", "list_tokens", "prune_tokens", "record_token", "set_last_used"]


@dataclass(frozen=True, slots=True)
class IssuedToken:
    token_id: str
    participant_id: str
    #: how it was issued: setup, register, login, guest, bot, did, managed
    kind: str
    #: unix seconds
    issued_at: int
    expires_at: int
    #: signed out (one token, or everything issued before a "sign out everywhere")
    revoked: bool = False
    #: the User-Agent of the request that signed it in (None: not recorded)
    user_agent: str | None = None
    #: when it was last used, unix seconds, to ``last_seen_interval`` (None: not known)
    last_used_at: int | None = None


def record_token(conn: Connection, token: IssuedToken) -> None:
    conn.execute(
        issued_tokens.insert().values(
            token_id=token.token_id,
            participant_id=token.participant_id,
            kind=token.kind,
            issued_at=token.issued_at,
            expires_at=token.expires_at,
            user_agent=token.user_agent,
            last_used_at=token.last_used_at,
        )
    )


def set_last_used(conn: Connection, used: dict[str, int]) -> None:
    """Note when each token (id -> unix seconds) was last used; a token not
    listed (issued before migration 0020, or expired and pruned) is skipped."""
    for token_id, at in used.items():
        conn.execute(
            issued_tokens.update()
            .where(issued_tokens.c.token_id == token_id)
            .values(last_used_at=at)
        )


def list_tokens(
    conn: Connection, participant_id: str, now: int, not_before: int | None = None
) -> Sequence[IssuedToken]:
    """*participant_id*'s tokens that have not expired, oldest first, each
    marked revoked if it was signed out or issued before *not_before*."""
    query = (
        sa.select(issued_tokens, revoked_tokens.c.token_id.label("revoked_id"))
        .select_from(
            issued_tokens.outerjoin(
                revoked_tokens, revoked_tokens.c.token_id == issued_tokens.c.token_id
            )
        )
        .where(issued_tokens.c.participant_id == participant_id)
        .where(issued_tokens.c.expires_at > now)
        .order_by(issued_tokens.c.issued_at, issued_tokens.c.token_id)
    )
    return [
        IssuedToken(
            token_id=row.token_id,
            participant_id=row.participant_id,
            kind=row.kind,
            issued_at=int(row.issued_at),
            expires_at=int(row.expires_at),
            revoked=row.revoked_id is not None
            or (not_before is not None and row.issued_at < not_before),
            user_agent=row.user_agent,
            last_used_at=None if row.last_used_at is None else int(row.last_used_at),
        )
        for row in conn.execute(query)
    ]


def prune_tokens(conn: Connection, now: int) -> None:
    """Forget tokens that have expired (an index range: cheap when there are none)."""
    conn.execute(issued_tokens.delete().where(issued_tokens.c.expires_at <= now))
