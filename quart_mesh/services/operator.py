"""The operator's chores: create a user or an admin, reset a password, unlock
a name's logins, list
and revoke a participant's tokens, show the setup status.

Who may: whoever can run ``quart-mesh`` on the node's machine with access
to its data folder (or, on PostgreSQL, its database). That is the node's own
authority, the one that could edit the store directly; there is no
participant acting, so these do not go through :func:`authorize`, and no
request reaches them: only the ``quart-mesh user|tokens|status`` commands,
in their own process (the node stopped, or PostgreSQL) or through the
running node's control socket (``quart_mesh/control.py``: a Unix socket in
the data folder, its peer's uid checked). An import-linter contract keeps
``api/``, ``realtime/`` and ``web/`` from importing this module.

Each chore is written once, here, and reaches the running processes the way
a sign-out does: through the store's outbox (``invalidate``, ``disconnect``,
``disconnect_token``), so caches and open sessions see it at once
(docs/decisions/0046-operator-chores.md).

:meth:`Operator.perform` is the one entry point both paths use: a request as
a JSON object in, an answer as a JSON object out.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import sqlalchemy as sa

from ..config import Settings
from ..errors import BadRequest, MeshError, NotFound
from ..records import Participant, iso
from ..security import Passwords
from ..store import Database
from ..store import accounts as repo
from ..store import limits as limits_repo
from ..store import tokens as tokens_repo
from ..store.tokens import IssuedToken
from .accounts import Accounts
from .validation import check_password

__all__ = ["OPERATIONS", "Operator"]

#: the chores :meth:`Operator.perform` knows, with the fields of each
#: (name -> (type, required))
OPERATIONS: dict[str, dict[str, tuple[type, bool]]] = {
    "create_user": {"name": (str, True), "password": (str, True), "role": (str, False)},
    "reset_password": {
        "name": (str, True),
        "password": (str, True),
        "revokeTokens": (bool, False),
    },
    "unlock_user": {"name": (str, True)},
    "list_tokens": {"name": (str, True)},
    "revoke_tokens": {"name": (str, True), "tokenId": (str, False), "all": (bool, False)},
    "setup_status": {},
}


class Operator:
    """The chores, on a node's services (see the module docstring for who may)."""

    def __init__(
        self, settings: Settings, db: Database, accounts: Accounts, passwords: Passwords
    ) -> None:
        self._settings = settings
        self._db = db
        self._accounts = accounts
        self._passwords = passwords

    async def perform(self, request: Any) -> dict[str, Any]:
        """Run the chore *request* names (``{"op": ..., fields...}``).

        Returns ``{"ok": true, "result": ...}``, or ``{"ok": false, "error":
        message, "code": code}`` for a request that is malformed or refused
        (unknown participant, name taken, weak password, not set up). Other
        errors (a bug, the store unavailable) propagate.
        """
        try:
            op, fields = _parse(request)
            chores: dict[str, Callable[..., Awaitable[Any]]] = {
                "create_user": self._create_user,
                "reset_password": self._reset_password,
                "unlock_user": self._unlock_user,
                "list_tokens": self._list_tokens,
                "revoke_tokens": self._revoke_tokens,
                "setup_status": self._setup_status,
            }
            return {"ok": True, "result": await chores[op](**fields)}
        except MeshError as error:
            return {"ok": False, **error.to_json()}

    # the chores --------------------------------------------------------------

    async def create_user(self, name: str, password: str, role: str = "member") -> Participant:
        """A new human participant with *role* (any role but ``owner``).

        Raises:
            Forbidden: the mesh is not set up.
            Conflict: the name is taken.
            BadRequest: an invalid name, a weak password, an unknown role.
        """
        if role == "owner" or role not in self._accounts.policy.roles:
            raise BadRequest(f"no role {role!r} to give (owner is given only at setup)", "bad_role")
        return await self._accounts.add_human(name, password, role)

    async def reset_password(self, name: str, password: str, *, revoke_tokens: bool = True) -> int:
        """Give the human *name* a new password; unless *revoke_tokens* is
        false, sign it out everywhere in the same transaction. Returns how
        many listed tokens were revoked.

        Raises:
            NotFound: no participant *name*.
            BadRequest: not a human (no password), or a weak password.
        """
        participant = await self._participant(name)
        if participant.kind != "human" or participant.origin is not None:
            raise BadRequest(
                f"{participant.name} is a {participant.kind} of this mesh with no password",
                "no_password",
            )
        check_password(password, participant.name, self._settings.limits)
        password_hash = await self._passwords.hash(password)
        if revoke_tokens:
            return await self._accounts.sign_out_everywhere(
                participant.participant_id, password_hash=password_hash
            )
        await self._db.write(
            lambda conn: repo.set_password(conn, participant.participant_id, password_hash)
        )
        return 0

    async def unlock_user(self, name: str) -> int:
        """Forget the failed logins of *name*: its logins are no longer slowed
        down, and refused from no address (decision 0055). Returns how many
        counters went.

        Raises:
            NotFound: no participant *name*.
        """
        participant = await self._participant(name)
        return await self._db.write(lambda conn: limits_repo.clear_login(conn, participant.name))

    async def list_tokens(self, name: str) -> list[IssuedToken]:
        """*name*'s tokens that have not expired, oldest first (those issued
        before the node kept a list, migration 0020, are not there).

        Raises:
            NotFound: no participant *name*.
        """
        participant = await self._participant(name)
        now = int(time.time())
        return list(
            await self._db.read(
                lambda conn: tokens_repo.list_tokens(
                    conn, participant.participant_id, now, participant.tokens_not_before
                )
            )
        )

    async def revoke_tokens(self, name: str, token_id: str | None) -> int:
        """Revoke *name*'s token *token_id*, or with ``None`` all its tokens
        (unlisted ones too); how many listed tokens that were valid it revoked.

        Raises:
            NotFound: no participant *name*, or no valid token *token_id* of it.
        """
        participant = await self._participant(name)
        if token_id is None:
            return await self._accounts.sign_out_everywhere(participant.participant_id)
        tokens = await self.list_tokens(participant.name)
        found = [t for t in tokens if t.token_id == token_id and not t.revoked]
        if not found:
            raise NotFound(
                f"{participant.name} has no valid token {token_id!r} (see: quart-mesh tokens list)",
                "token_not_found",
            )
        await self._accounts.revoke_tokens(
            participant.participant_id, [(t.token_id, t.expires_at) for t in found]
        )
        return len(found)

    async def setup_status(self) -> dict[str, Any]:
        """Whether the mesh is set up, its name and owner, how many
        participants of each kind and role, the store and data folder."""
        mesh = self._accounts.mesh
        counts = await self._db.read(repo.count_by_kind_and_role)
        by_kind: Counter[str] = Counter()
        by_role: Counter[str] = Counter()
        for kind, role, n in counts:
            by_kind[kind] += n
            by_role[role] += n
        owner = None
        if mesh is not None:
            found = await self._db.read(lambda conn: repo.get_participant(conn, mesh.owner_id))
            owner = found.name if found is not None else None
        url = sa.make_url(self._db.url)
        return {
            "initialized": mesh is not None,
            "meshName": mesh.name if mesh else None,
            "owner": owner,
            "visibility": mesh.visibility if mesh else None,
            "registrationMode": mesh.registration_mode if mesh else None,
            "participants": {
                "total": sum(by_kind.values()),
                "byKind": dict(sorted(by_kind.items())),
                "byRole": dict(sorted(by_role.items())),
            },
            "store": {
                "backend": self._db.backend,
                "url": url.render_as_string(hide_password=True),
            },
            "dataDir": str(self._settings.data_dir.resolve()),
        }

    async def _participant(self, name: str) -> Participant:
        found = await self._db.read(lambda conn: repo.get_participant_by_name(conn, name))
        if found is None:
            raise NotFound(f"no participant named {name!r}", "participant_not_found")
        return found[0]

    # perform's adapters: JSON in, JSON out -------------------------------------

    async def _create_user(self, name: str, password: str, role: str = "member") -> dict[str, Any]:
        participant = await self.create_user(name, password, role)
        return _participant_json(participant)

    async def _reset_password(
        self, name: str, password: str, revokeTokens: bool = True
    ) -> dict[str, Any]:
        revoked = await self.reset_password(name, password, revoke_tokens=revokeTokens)
        return {"name": name, "revokedTokens": revoked, "signedOut": revokeTokens}

    async def _unlock_user(self, name: str) -> dict[str, Any]:
        return {"name": name, "cleared": await self.unlock_user(name)}

    async def _list_tokens(self, name: str) -> list[dict[str, Any]]:
        return [_token_json(t) for t in await self.list_tokens(name)]

    async def _revoke_tokens(
        self, name: str, tokenId: str | None = None, all: bool = False
    ) -> dict[str, Any]:
        if (tokenId is None) == (not all):
            raise BadRequest("name one token, or all of them", "bad_request")
        revoked = await self.revoke_tokens(name, None if all else tokenId)
        return {"name": name, "revokedTokens": revoked, "all": all}

    async def _setup_status(self) -> dict[str, Any]:
        return await self.setup_status()


def _parse(request: Any) -> tuple[str, dict[str, Any]]:
    """The operation and its fields, checked against :data:`OPERATIONS`.

    Raises:
        BadRequest: not an object, an unknown operation, a missing, unknown
            or mistyped field.
    """
    if not isinstance(request, dict):
        raise BadRequest("a request is a JSON object", "bad_request")
    op = request.get("op")
    if not isinstance(op, str) or op not in OPERATIONS:
        raise BadRequest(f"unknown operation {op!r}", "unknown_operation")
    spec = OPERATIONS[op]
    fields = {k: v for k, v in request.items() if k != "op"}
    for key, value in fields.items():
        if key not in spec:
            raise BadRequest(f"{op}: unknown field {key!r}", "bad_request")
        kind, _ = spec[key]
        if not isinstance(value, kind):
            raise BadRequest(f"{op}: {key} must be a {kind.__name__}", "bad_request")
    for key, (_, required) in spec.items():
        if required and key not in fields:
            raise BadRequest(f"{op}: {key} is required", "bad_request")
    return op, fields


def _participant_json(participant: Participant) -> dict[str, Any]:
    return {
        "participantId": participant.participant_id,
        "name": participant.name,
        "kind": participant.kind,
        "role": participant.role,
    }


def _token_json(token: IssuedToken) -> dict[str, Any]:
    return {
        "tokenId": token.token_id,
        "kind": token.kind,
        "issuedAt": iso(token.issued_at * 1000),
        "expiresAt": iso(token.expires_at * 1000),
        "revoked": token.revoked,
    }
