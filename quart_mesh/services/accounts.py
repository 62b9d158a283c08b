"""Accounts: first-run setup, registration, login, guests, token checks."""

from __future__ import annotations

import enum
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import trio
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from ..broker import Broker
from ..config import Settings
from ..ends import EndReason
from ..errors import (
    BadRequest,
    Conflict,
    Forbidden,
    MeshError,
    NotFound,
    Unauthorized,
    Unavailable,
)
from ..events import ParticipantUpdated
from ..ids import is_ulid, new_id
from ..records import MeshConfig, Participant, Room, iso, now_ms
from ..security import Passwords, Tokens
from ..store import Database, outbox
from ..store import accounts as repo
from ..store import receipts as receipts_repo
from ..store import rooms as rooms_repo
from ..store import tokens as tokens_repo
from ..store.tokens import IssuedToken
from .authz import Actor, Policy, authorize
from .presence import Presence
from .ratelimit import RateLimiter
from .setup_claim import SetupClaim
from .validation import (
    check_description,
    check_display_name,
    check_name,
    check_password,
    check_room_name,
    name_refused,
)

__all__ = [
    "Accounts",
    "Keep",
    "SignInSession",
    "SignedIn",
    "check_mesh_name",
    "check_registration_mode",
    "check_visibility",
]

VISIBILITIES = ("public", "private")
_KNOWN_MAX = 10_000
REGISTRATION_MODES = ("open", "closed")
#: the room setup creates for everyone to start in (as Mattermost's Town Square)
DEFAULT_ROOM_NAME = "Town Square"
#: the longest User-Agent recorded with a token (characters)
_USER_AGENT_CHARS = 300


def clean_user_agent(user_agent: str | None) -> str | None:
    """What is recorded of a User-Agent header: printable, at most 300
    characters; None for none."""
    if not user_agent:
        return None
    cleaned = "".join(ch for ch in user_agent if 32 <= ord(ch) < 127 or ord(ch) > 159).strip()
    return cleaned[:_USER_AGENT_CHARS] or None


def _revoke(conn: Connection, participant_id: str, token_id: str, expires_at: int) -> None:
    """Record *token_id* of *participant_id* signed out, in the unit of work
    of *conn*, and tell every process to refuse it (its cache of revoked
    tokens) once the unit commits."""
    repo.revoke_token(conn, token_id, participant_id, expires_at)
    outbox.change(conn, outbox.Invalidate("revoked", f"{token_id} {expires_at}"))


class Keep(enum.Enum):
    """A setting left as it is (:meth:`Accounts.change_settings`)."""

    KEEP = "keep"


@dataclass(frozen=True, slots=True)
class SignInSession:
    """One of a participant's tokens, as the list of its sessions shows it."""

    token: IssuedToken
    #: the token of the request that asked
    current: bool

    def to_json(self) -> dict[str, object]:
        token = self.token
        return {
            "tokenId": token.token_id,
            "kind": token.kind,
            "createdAt": iso(token.issued_at * 1000),
            "lastUsedAt": None if token.last_used_at is None else iso(token.last_used_at * 1000),
            "expiresAt": iso(token.expires_at * 1000),
            "userAgent": token.user_agent,
            "current": self.current,
        }


def check_mesh_name(mesh_name: str) -> str:
    """The mesh name without surrounding spaces.

    Raises:
        BadRequest: empty, over 200 characters, or with control characters.
    """
    mesh_name = mesh_name.strip()
    if not mesh_name or len(mesh_name) > 200:
        raise BadRequest("meshName must be 1 to 200 characters", "invalid_mesh_name")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in mesh_name):
        raise BadRequest("meshName must not contain control characters", "invalid_mesh_name")
    return mesh_name


def check_visibility(visibility: str) -> None:
    if visibility not in VISIBILITIES:
        raise BadRequest("visibility must be 'public' or 'private'", "invalid_visibility")


def check_registration_mode(registration_mode: str) -> None:
    if registration_mode not in REGISTRATION_MODES:
        raise BadRequest("registrationMode must be 'open' or 'closed'", "invalid_registration_mode")


@dataclass(frozen=True, slots=True)
class SignedIn:
    """A participant and a fresh token for it."""

    participant: Participant
    token: str

    def to_json(self) -> dict[str, str]:
        return {
            "participantId": self.participant.participant_id,
            "token": self.token,
            "name": self.participant.name,
        }


class Accounts:
    """Owns the mesh configuration (cached) and participants' credentials."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        passwords: Passwords,
        tokens: Tokens,
        presence: Presence,
        policy: Policy | None = None,
        rate_limits: RateLimiter | None = None,
        broker: Broker | None = None,
    ) -> None:
        self._settings = settings
        #: routes events; told of the owner joining the default room, and ends
        #: the sessions of signed-out tokens
        self._broker = broker or Broker()
        #: the node's rate limiter (logins, registrations, guests; shared with
        #: the other services)
        self.rate_limits = rate_limits or RateLimiter(settings.rate_limits)
        #: the node's roles and room rules, carried by every actor
        self.policy = policy or Policy()
        self._limits = settings.limits
        self._db = db
        self._passwords = passwords
        self._tokens = tokens
        self._mesh: MeshConfig | None = None
        self._presence = presence
        #: participants by id, for the token check of every request (see forget)
        self._known: dict[str, Participant] = {}
        #: counts forgets: a participant read before one is not cached after it
        self._generation = 0
        #: signed-out tokens (token id -> expiry, unix seconds), until they expire
        self._revoked: dict[str, int] = {}
        #: when this process last pruned expired issued tokens (unix seconds)
        self._pruned_at = 0
        #: the token whose unit last pruned (its reruns prune too)
        self._pruned_for: str | None = None
        #: when this process last wrote each token's last use (token id -> unix
        #: seconds), the most recent last (see _note_used)
        self._token_used: dict[str, int] = {}
        #: the setup code a node reachable from the network asks for
        self.claim = SetupClaim(settings)

    async def load(self) -> None:
        """Read the mesh configuration and the signed-out tokens; called once
        the store is open."""
        self._mesh = await self._db.read(repo.get_mesh_config)
        self._revoked = await self._db.read(
            lambda conn: repo.list_revoked_tokens(conn, int(time.time()))
        )

    @property
    def mesh(self) -> MeshConfig | None:
        return self._mesh

    def mesh_changed(self, mesh: MeshConfig) -> None:
        """Use *mesh*, just stored (``services/admin.py``), from now on."""
        self._mesh = mesh

    @property
    def guests_allowed(self) -> bool:
        """Guests may have sessions: on public meshes only (else their tokens are refused)."""
        return self._mesh is not None and self._mesh.visibility == "public"

    def setup_status(self, server_host: str | None = None) -> dict[str, object]:
        """Whether the mesh is set up; *server_host*: the server's address
        the asker reached (whether the setup would need the code)."""
        mesh = self._mesh
        return {
            "initialized": mesh is not None,
            "codeRequired": mesh is None and self.claim.required(server_host),
            "registrationMode": mesh.registration_mode if mesh else "closed",
            "visibility": mesh.visibility if mesh else "private",
            "meshName": mesh.name if mesh else None,
            "defaultRoomId": mesh.default_room_id if mesh else None,
        }

    async def init_setup(
        self,
        *,
        name: str,
        password: str,
        mesh_name: str,
        description: str = "",
        visibility: str = "public",
        registration_mode: str = "open",
        default_room_name: str = DEFAULT_ROOM_NAME,
        setup_code: str | None = None,
        address: str | None = None,
        server_host: str | None = None,
    ) -> SignedIn:
        """Create the owner, the mesh configuration and the mesh's default
        room (the owner its first member), in one transaction. Allowed once.
        A node reachable from the network (*server_host*: the server's
        address the caller reached) asks for its *setup_code*
        (``services/setup_claim.py``); attempts then count against
        ``login_address`` for the client's *address*.

        Raises:
            Conflict: the mesh is already initialized (``already_initialized``).
            Forbidden: the setup code is missing or wrong.
            RateLimited: too many attempts from *address*.
            BadRequest: a value is invalid.
        """
        if self._mesh is not None:
            raise Conflict("the mesh is already initialized", "already_initialized")
        if self.claim.required(server_host):
            await self.rate_limits.address("login_address", address)
            self.claim.check(setup_code, server_host)
        name = check_name(name, self._limits)
        check_password(password, name, self._limits)
        mesh_name = check_mesh_name(mesh_name)
        check_description(description, self._limits)
        check_visibility(visibility)
        check_registration_mode(registration_mode)
        try:
            default_room_name = check_room_name(default_room_name, self._limits)
        except MeshError as error:
            raise BadRequest(f"defaultRoomName: {error.message}", "invalid_default_room") from None
        password_hash = await self._passwords.hash(password)
        now = now_ms()
        owner = Participant(new_id(), name, "human", "human", "owner", now)
        room = Room(new_id(), "room", default_room_name, "", owner.participant_id, now)
        session, issued = self._mint(owner, "setup")
        mesh = MeshConfig(
            name=mesh_name,
            description=description,
            visibility=visibility,
            registration_mode=registration_mode,
            guests_can_send=False,
            owner_id=owner.participant_id,
            created_at=now,
            default_room_id=room.room_id,
        )

        def write(conn: Connection) -> None:
            if repo.get_mesh_config(conn) is not None:
                raise Conflict("the mesh is already initialized", "already_initialized")
            self._insert(conn, owner, password_hash)
            self._record(conn, issued)
            rooms_repo.insert_room(conn, room)
            rooms_repo.add_member(conn, room.room_id, owner.participant_id, now)
            repo.insert_mesh_config(conn, mesh)
            outbox.change(conn, outbox.Join(room.room_id, owner.participant_id))
            outbox.change(conn, outbox.Invalidate("mesh", ""))

        await self._db.write(write)
        self._mesh = mesh
        await self.claim.discard()
        return session

    async def register(
        self,
        name: str,
        password: str,
        *,
        address: str | None = None,
        user_agent: str | None = None,
    ) -> SignedIn:
        """Register a human participant with role ``member``; *address* is the
        client's (rate-limited per address).

        Raises:
            Forbidden: before setup, or registration is closed.
            RateLimited: too many registrations from *address*.
            Conflict: the name is taken.
            BadRequest: invalid name or weak password.
        """
        mesh = self._mesh
        if mesh is None:
            raise Forbidden("the mesh is not set up yet", "not_initialized")
        if mesh.registration_mode != "open":
            raise Forbidden("registration is closed on this mesh", "registration_closed")
        await self.rate_limits.address("registration_address", address)
        _, session = await self._new_human(
            name, password, "member", via="register", user_agent=user_agent
        )
        assert session is not None
        return session

    async def add_human(self, name: str, password: str, role: str) -> Participant:
        """Create a human participant with *role*, signed in nowhere: for the
        operator's chores (``services/operator.py``), whose authority is the
        node's own; the caller decides who may (this checks no permission).

        Raises:
            Forbidden: before setup.
            Conflict: the name is taken.
            BadRequest: invalid name or weak password.
        """
        if self._mesh is None:
            raise Forbidden("the mesh is not set up yet", "not_initialized")
        participant, _ = await self._new_human(name, password, role, via=None)
        return participant

    async def _new_human(
        self, name: str, password: str, role: str, *, via: str | None, user_agent: str | None = None
    ) -> tuple[Participant, SignedIn | None]:
        """A new human participant; with *via*, signed in (recorded so)."""
        name = check_name(name, self._limits)
        check_password(password, name, self._limits)
        found = await self._db.read(lambda conn: repo.name_conflict(conn, name))
        if found is not None:  # before spending argon2 on the password
            raise name_refused(found)
        password_hash = await self._passwords.hash(password)
        participant = Participant(new_id(), name, "human", "human", role, now_ms())
        session, issued = (
            self._mint(participant, via, user_agent) if via is not None else (None, None)
        )

        def write(conn: Connection) -> None:
            self._insert(conn, participant, password_hash)
            if issued is not None:
                self._record(conn, issued)

        await self._db.write(write)
        return participant, session

    async def login(
        self,
        name: str,
        password: str,
        *,
        address: str | None = None,
        waited: Callable[[float], None] | None = None,
        user_agent: str | None = None,
    ) -> SignedIn:
        """Log in; *address* is the client's. A name with many failed logins
        is slowed down, never locked (decision 0055): the attempt waits up to
        ``login_max_delay`` seconds before its password is checked, right or
        wrong, and *waited* is told how long.

        Cancellation: safe; a failure is counted before it is answered.

        Raises:
            RateLimited: too many attempts from *address*, or for *name* from
                *address* (every attempt counts, known name or not).
            Unauthorized: one message for unknown names and wrong passwords.
        """
        delay = await self.rate_limits.login_attempt(name, address)
        if waited is not None:
            waited(delay)
        if delay > 0:
            await trio.sleep(delay)
        if len(password) > self._limits.max_password_chars or len(name) > 200:
            # no account has such a password: refuse without spending argon2 on it
            await self.rate_limits.login_failed(name)
            raise Unauthorized("wrong name or password", "invalid_credentials")
        found = await self._db.read(lambda conn: repo.get_participant_by_name(conn, name))
        participant, password_hash = found if found is not None else (None, None)
        ok = await self._passwords.verify(password_hash, password)
        if participant is None or not ok:
            await self.rate_limits.login_failed(name)
            raise Unauthorized("wrong name or password", "invalid_credentials")
        return await self.sign_in(
            participant, "login", password_hash=password_hash, user_agent=user_agent
        )

    async def guest(
        self,
        name: str | None = None,
        *,
        address: str | None = None,
        user_agent: str | None = None,
    ) -> SignedIn:
        """A guest (role ``spectator``) on a public mesh; *address* is the
        client's (rate-limited per address, like registrations).

        Raises:
            Forbidden: the mesh is private or not set up.
            RateLimited: too many registrations from *address*.
            Conflict: the requested name is taken.
        """
        if not self.guests_allowed:
            raise Forbidden("guest access is only allowed on public meshes", "guests_not_allowed")
        await self.rate_limits.address("registration_address", address)
        if name is None:
            name = f"guest-{secrets.token_hex(4)}"
        name = check_name(name, self._limits)
        participant = Participant(new_id(), name, "guest", "guest", "spectator", now_ms())
        session, issued = self._mint(participant, "guest", user_agent)

        def write(conn: Connection) -> None:
            self._insert(conn, participant, None)
            self._record(conn, issued)

        await self._db.write(write)
        return session

    async def create_bot(
        self,
        name: str,
        bot_type: str,
        role: str,
        description: str,
        also: Callable[[Connection, Participant], None],
        *,
        via: str = "bot",
    ) -> SignedIn:
        """Create a bot participant (kind ``bot``) and, in the same transaction,
        run ``also(conn, participant)`` (the agent's own record).

        Raises:
            Forbidden: the mesh is not set up.
            Conflict: the name is taken.
            BadRequest: invalid name or description.
        """
        if self._mesh is None:
            raise Forbidden("the mesh is not set up yet", "not_initialized")
        name = check_name(name, self._limits)
        check_description(description, self._limits)
        participant = Participant(
            new_id(), name, "bot", bot_type, role, now_ms(), description=description
        )
        session, issued = self._mint(participant, via)

        def write(conn: Connection) -> None:
            self._insert(conn, participant, None)
            also(conn, participant)
            self._record(conn, issued)

        await self._db.write(write)
        return session

    async def authenticate(self, token: str | None) -> Actor:
        """Resolve a bearer token to the acting participant.

        Raises:
            Unauthorized: no token, a bad or expired token, a token whose
                participant no longer exists, or a guest's token while the
                mesh is private (``token_revoked``).
        """
        if not token:
            raise Unauthorized("a bearer token is required", "unauthorized")
        claims = self._tokens.check(token)
        if not is_ulid(claims.participant_id):
            raise Unauthorized("the token is not valid", "invalid_token")
        if claims.token_id in self._revoked:
            raise Unauthorized("this token was signed out", "token_revoked")
        participant = self._known.get(claims.participant_id)
        if participant is None:
            generation = self._generation
            participant = await self._db.read(
                lambda conn: repo.get_participant(conn, claims.participant_id)
            )
            if participant is None:
                raise Unauthorized("the token's participant no longer exists", "invalid_token")
            self._remember(participant, generation)
        not_before = participant.tokens_not_before
        if not_before is not None and claims.issued_at < not_before:
            raise Unauthorized("this token was signed out", "token_revoked")
        now = now_ms()
        interval = self._settings.last_seen_interval
        last = participant.last_seen_at
        seen_due = last is None or now - last > interval * 1000
        used = self._token_used.get(claims.token_id)
        used_due = used is None or now // 1000 - used > interval
        if seen_due or used_due:
            generation = self._generation
            token_id = claims.token_id

            def write(conn: Connection) -> None:
                if seen_due:
                    repo.set_last_seen(conn, {participant.participant_id: now})
                if used_due:
                    tokens_repo.set_last_used(conn, {token_id: now // 1000})

            try:
                await self._db.write(write)
            except Unavailable:
                # a stamp, not the request: a full disk or a busy writer does
                # not refuse reads (the next request tries again)
                pass
            else:
                if seen_due:
                    self._remember(replace(participant, last_seen_at=now), generation)
                if used_due:
                    self._note_used(token_id, now // 1000)
        # after the last await: the caller subscribes before the mesh can change
        if participant.kind == "guest" and not self.guests_allowed:
            raise Unauthorized("guest access to this mesh has ended", "token_revoked")
        return self.actor_for(participant)

    async def logout(self, actor: Actor, token: str) -> None:
        """Sign *token* (the actor's own, just authenticated) out: it is refused
        from now on (401 ``token_revoked``) and the WebSocket sessions opened
        with it end. The participant's other tokens stay valid."""
        claims = self._tokens.check(token)
        await self.revoke_tokens(actor.participant_id, [(claims.token_id, claims.expires_at)])

    async def change_settings(
        self,
        actor: Actor,
        *,
        display_name: str | Keep | None = Keep.KEEP,
        read_receipts: bool | None = None,
    ) -> tuple[Participant, bool]:
        """Change the actor's own settings (``PATCH /api/auth/me``): its
        display name (None or blank: clear), shown as ``displayName`` beside
        its unique name, and whether it shares read receipts in DMs (and
        sees others', decision 0071); :data:`Keep.KEEP` / None: unchanged.
        Counts against the ``profile`` rate. A display name that changed is
        told to everyone who shares a room or DM with the actor, the actor
        included (``participant_updated``, one per room or DM it is in), in
        the same unit of work.

        Returns:
            The participant as it is now and whether it shares read receipts.

        Raises:
            RateLimited: over the ``profile`` rule.
            BadRequest: too long, or with control characters (``invalid_display_name``).
            NotFound: the actor was deleted meanwhile.
        """
        self.rate_limits.participant("profile", actor)
        name = None if isinstance(display_name, Keep) else display_name
        new_name = not isinstance(display_name, Keep)
        if new_name:
            name = check_display_name(name, self._limits)
        participant_id = actor.participant_id

        def write(conn: Connection) -> tuple[Participant, bool] | None:
            found = repo.get_participant(conn, participant_id)
            if found is None:
                return None
            if read_receipts is not None:
                receipts_repo.set_receipts(conn, participant_id, read_receipts)
            if new_name and name != found.display_name:
                outbox.change(conn, outbox.Invalidate("participant", participant_id))
                updated = repo.set_display_name(conn, participant_id, name)
                assert updated is not None
                found = updated
                # an event per room or DM it is in (not per person who
                # shares one: a big room would make one frame per member)
                shown = self.with_presence(found)
                for room_id in sorted(rooms_repo.member_room_ids(conn, participant_id)):
                    outbox.emit(conn, ParticipantUpdated(room_id, participant=shown))
            return found, receipts_repo.receipts_on(conn, participant_id)

        changed = await self._db.write(write)
        self.forget(participant_id)
        if changed is None:
            raise NotFound("no such participant", "participant_not_found")
        participant, receipts = changed
        return self.with_presence(participant), receipts

    async def read_receipts(self, actor: Actor) -> bool:
        """Whether the actor shares read receipts in DMs (decision 0071)."""
        participant_id = actor.participant_id
        return await self._db.read(lambda conn: receipts_repo.receipts_on(conn, participant_id))

    async def change_password(
        self, actor: Actor, token: str, current: str, new: str, *, address: str | None = None
    ) -> int:
        """Change the actor's password from *current* to *new* (argon2id) and
        sign out every other token of the actor, keeping *token* (the one of
        this request, just authenticated): the other tokens are refused from
        now on and their WebSocket sessions end (``signed_out``). Attempts
        count as logins for the actor's name (a wrong *current* slows its
        logins down as a failed login does). Returns how many other tokens
        were signed out.

        Raises:
            Forbidden: a wrong *current* password, or a participant without
                one (guests, bots): ``wrong_password``.
            BadRequest: a weak or invalid *new* password.
            RateLimited: too many attempts from *address* for the name.
        """
        claims = self._tokens.check(token)
        delay = await self.rate_limits.login_attempt(actor.name, address)
        if delay > 0:
            await trio.sleep(delay)
        if len(current) > self._limits.max_password_chars:
            await self.rate_limits.login_failed(actor.name)
            raise Forbidden("the current password is wrong", "wrong_password")
        check_password(new, actor.name, self._limits)
        participant_id = actor.participant_id
        found = await self._db.read(lambda conn: repo.password_hash_of(conn, participant_id))
        old_hash = found[0] if found is not None else None
        if not await self._passwords.verify(old_hash, current):
            await self.rate_limits.login_failed(actor.name)
            raise Forbidden("the current password is wrong", "wrong_password")
        new_hash = await self._passwords.hash(new)

        def write(conn: Connection) -> list[IssuedToken]:
            now = int(time.time())
            hashed = repo.password_hash_of(conn, participant_id)
            if hashed is None or hashed[0] != old_hash:  # changed meanwhile: it wins
                raise Forbidden("the current password is wrong", "wrong_password")
            participant = repo.get_participant(conn, participant_id)
            assert participant is not None
            listed = tokens_repo.list_tokens(
                conn, participant_id, now, participant.tokens_not_before
            )
            # this token may have been signed out while the password was
            # verified (one session, or everywhere): then it changes nothing
            # (nor lowers "not before" below a sign-out-everywhere's)
            not_before = participant.tokens_not_before
            if (not_before is not None and claims.issued_at < not_before) or any(
                t.token_id == claims.token_id and t.revoked for t in listed
            ):
                raise Unauthorized("this token was signed out", "token_revoked")
            repo.set_password(conn, participant_id, new_hash)
            # tokens issued before this one are refused by "not before" (also
            # those issued before the token list existed); those of its own
            # second or later, but this one, one by one
            others = [t for t in listed if not t.revoked and t.token_id != claims.token_id]
            repo.prune_revoked_tokens(conn, now)
            repo.set_tokens_not_before(conn, participant_id, claims.issued_at)
            for other in others:
                if other.issued_at >= claims.issued_at:
                    _revoke(conn, participant_id, other.token_id, other.expires_at)
                outbox.change(
                    conn,
                    outbox.DisconnectToken(participant_id, other.token_id, EndReason.SIGNED_OUT),
                )
            outbox.change(conn, outbox.Invalidate("participant", participant_id))
            return others

        def then(others: list[IssuedToken]) -> None:
            self.forget(participant_id)
            self.revoked_all(
                [(t.token_id, t.expires_at) for t in others if t.issued_at >= claims.issued_at]
            )

        others = await self._db.write(write, then=then)
        return len(others)

    async def list_sessions(self, actor: Actor, token: str) -> list[SignInSession]:
        """The actor's own tokens that are still good, oldest first, the one
        of this request (*token*) marked ``current``. Tokens issued before
        the node listed them (migration 0020) are not shown."""
        claims = self._tokens.check(token)
        participant_id = actor.participant_id

        def read(conn: Connection) -> list[IssuedToken]:
            participant = repo.get_participant(conn, participant_id)
            if participant is None:
                return []
            tokens = tokens_repo.list_tokens(
                conn, participant_id, int(time.time()), participant.tokens_not_before
            )
            return [t for t in tokens if not t.revoked and t.token_id not in self._revoked]

        return [SignInSession(t, t.token_id == claims.token_id) for t in await self._db.read(read)]

    async def sign_out_session(self, actor: Actor, token: str, token_id: str) -> None:
        """Sign out one of the actor's own tokens (*token_id*, as
        :meth:`list_sessions` lists it; the current one too, as a logout):
        it is refused from now on and its WebSocket sessions end.

        Raises:
            NotFound: not one of the actor's good tokens (``session_not_found``).
        """
        for session in await self.list_sessions(actor, token):
            if session.token.token_id == token_id:
                await self.revoke_tokens(
                    actor.participant_id, [(token_id, session.token.expires_at)]
                )
                return
        raise NotFound("no such session", "session_not_found")

    async def revoke_tokens(self, participant_id: str, tokens: Sequence[tuple[str, int]]) -> None:
        """Sign *participant_id*'s *tokens* (token id, expiry) out: each is
        refused from now on, by every process (401 ``token_revoked``), and the
        WebSocket sessions opened with it end. Its other tokens stay valid.
        Checks no permission: the caller's (``logout``, the operator)."""
        now = int(time.time())

        def write(conn: Connection) -> None:
            repo.prune_revoked_tokens(conn, now)
            for token_id, expires_at in tokens:
                _revoke(conn, participant_id, token_id, expires_at)
                outbox.change(
                    conn, outbox.DisconnectToken(participant_id, token_id, EndReason.SIGNED_OUT)
                )

        def then(_: None) -> None:
            self.revoked_all(tokens)

        await self._db.write(write, then=then)

    async def sign_out_everywhere(
        self, participant_id: str, *, password_hash: str | None = None
    ) -> int:
        """Refuse every token of *participant_id* issued until now, listed
        (``issued_tokens``) or not (issued before the list existed: refused by
        its ``tokens_not_before``), and end all its sessions; with
        *password_hash*, set its password in the same transaction. Checks no
        permission: the caller's (the operator). Returns how many listed
        tokens were still valid.

        Raises:
            NotFound: no such participant.
        """

        def write(conn: Connection) -> tuple[list[IssuedToken], list[IssuedToken]]:
            now = int(time.time())  # when the unit runs, not when it was asked for
            participant = repo.get_participant(conn, participant_id)
            if participant is None:
                raise NotFound("no such participant", "participant_not_found")
            if password_hash is not None:
                repo.set_password(conn, participant_id, password_hash)
            # "not before" counts whole seconds, and a token issued later in
            # this second (a login with the new password) must stay good: so
            # the tokens of this very second are revoked one by one (the
            # older ones are refused by "not before")
            tokens = tokens_repo.list_tokens(
                conn, participant_id, now, participant.tokens_not_before
            )
            valid = [t for t in tokens if not t.revoked]
            listed = [t for t in valid if t.issued_at >= now]
            repo.prune_revoked_tokens(conn, now)
            repo.set_tokens_not_before(conn, participant_id, now)
            for token in listed:
                _revoke(conn, participant_id, token.token_id, token.expires_at)
            outbox.change(conn, outbox.Invalidate("participant", participant_id))
            outbox.change(conn, outbox.Disconnect(participant_id, EndReason.SIGNED_OUT))
            return valid, listed

        def then(result: tuple[list[IssuedToken], list[IssuedToken]]) -> None:
            self.forget(participant_id)
            self.revoked_all([(token.token_id, token.expires_at) for token in result[1]])

        valid, _ = await self._db.write(write, then=then)
        return len(valid)

    def revoked(self, token_id: str, expires_at: int) -> None:
        """Refuse *token_id* from now on (signed out here or on another process)."""
        self.revoked_all([(token_id, expires_at)])

    def revoked_all(self, tokens: Sequence[tuple[str, int]]) -> None:
        """Refuse each of *tokens* (token id, expiry) from now on."""
        now = int(time.time())
        revoked = {t: exp for t, exp in self._revoked.items() if exp > now}
        revoked.update(tokens)
        self._revoked = revoked

    def _note_used(self, token_id: str, at: int) -> None:
        """Remember that *token_id*'s last use at *at* (unix seconds) is stored."""
        used = self._token_used
        used.pop(token_id, None)
        used[token_id] = at
        if len(used) > _KNOWN_MAX:
            del used[next(iter(used))]  # the least recently written

    def _remember(self, participant: Participant, generation: int) -> None:
        """Cache *participant*, read when :attr:`_generation` was *generation*:
        unless something was forgotten meanwhile (the read may predate it)."""
        if generation != self._generation:
            return
        known = self._known
        known.pop(participant.participant_id, None)
        known[participant.participant_id] = participant
        if len(known) > _KNOWN_MAX:
            del known[next(iter(known))]  # the least recently fetched

    async def set_role(self, participant_id: str, role: str) -> Participant | None:
        """Store *participant_id*'s new role (checks are the caller's: see
        ``services/roles.py``); the new role applies to its next request."""

        def write(conn: Connection) -> Participant | None:
            outbox.change(conn, outbox.Invalidate("participant", participant_id))
            return repo.set_role(conn, participant_id, role)

        updated = await self._db.write(write)
        self.forget(participant_id)
        return updated

    def forget(self, participant_id: str) -> None:
        """Drop a cached participant: call on every change to who it is or
        what it may do (deletion, role change), so tokens see it at once."""
        self._known.pop(participant_id, None)
        self._generation += 1

    def forget_all(self) -> None:
        """Drop every cached participant (this process may have missed changes)."""
        self._known.clear()
        self._generation += 1

    async def delete_participant(self, actor: Actor, participant_id: str) -> None:
        """Delete a participant (admin and above): its tokens stop working at
        once and its open sessions are closed. The owner cannot be deleted.

        Raises:
            Forbidden: not an admin, or the owner is the target.
            NotFound: no such participant.
        """
        authorize(actor, "participants.delete")
        mesh = self._mesh
        if mesh is not None and participant_id == mesh.owner_id:
            raise Forbidden("the mesh owner cannot be deleted", "is_owner")

        def write(conn: Connection) -> bool:
            if not repo.delete_participant(conn, participant_id):
                return False
            # its sessions end everywhere; other processes forget it
            outbox.change(conn, outbox.Invalidate("participant", participant_id))
            outbox.change(conn, outbox.DropParticipant(participant_id))
            return True

        if not await self._db.write(write):
            raise NotFound("no such participant", "participant_not_found")
        self.forget(participant_id)

    async def actor_of(self, participant_id: str) -> Actor | None:
        """The participant as an actor now (role changes included), or ``None``
        if it no longer exists: for work the node does on a participant's
        behalf (a webhook bot's reply)."""
        participant = self._known.get(participant_id)
        if participant is None:
            generation = self._generation
            participant = await self._db.read(
                lambda conn: repo.get_participant(conn, participant_id)
            )
            if participant is None:
                return None
            self._remember(participant, generation)
        return self.actor_for(participant)

    def actor_for(self, participant: Participant) -> Actor:
        """*participant* as an actor, carrying the node's roles and room rules
        and the mesh's ``guests_can_send``: for a program embedding the node
        that acts on behalf of a participant it holds. Checks and reads
        nothing (no token; the record is taken as it is)."""
        mesh = self._mesh
        return Actor(
            participant_id=participant.participant_id,
            name=participant.name,
            kind=participant.kind,
            type=participant.type,
            role=participant.role,
            guests_can_send=mesh.guests_can_send if mesh else False,
            policy=self.policy,
        )

    async def get(self, actor: Actor, participant_id: str) -> Participant:
        """One participant with its live ``online`` flag, for anyone who may
        read participants (``participants.read``).

        Raises:
            Forbidden: the actor may not read participants.
            NotFound: no such participant (``participant_not_found``).
        """
        authorize(actor, "participants.read")
        participant = await self._db.read(lambda conn: repo.get_participant(conn, participant_id))
        if participant is None:
            raise NotFound("no such participant", "participant_not_found")
        return self.with_presence(participant)

    async def list_participants(self, actor: Actor) -> list[Participant]:
        """Every participant, by name, each with its live ``online`` flag, for
        anyone who may read participants (``participants.read``).

        Raises:
            Forbidden: the actor may not read participants.
        """
        authorize(actor, "participants.read")
        return [self.with_presence(p) for p in await self._db.read(repo.list_participants)]

    def with_presence(self, participant: Participant) -> Participant:
        """The participant with its live ``online`` flag."""
        return self._presence.mark(participant)

    def _insert(
        self, conn: Connection, participant: Participant, password_hash: str | None
    ) -> None:
        """Insert *participant*, or refuse its name: 409 ``name_taken`` or
        ``name_confusable`` (it looks like an existing name: decision 0056).
        The store's unique keys decide, so two processes racing for lookalike
        names cannot both win."""
        found = repo.name_conflict(conn, participant.name)
        if found is not None:
            raise name_refused(found)
        try:
            with conn.begin_nested():
                repo.insert_participant(conn, participant, password_hash)
        except IntegrityError:
            found = repo.name_conflict(conn, participant.name)
            raise name_refused(found or ("name_taken", participant.name)) from None

    def token_ttl(self, kind: str) -> int:
        """How long a token of a participant of *kind* lasts, seconds."""
        settings = self._settings
        return {
            "bot": settings.bot_token_ttl_seconds,
            "guest": settings.guest_token_ttl_seconds,
        }.get(kind, settings.token_ttl_seconds)

    async def sign_in(
        self,
        participant: Participant,
        via: str,
        *,
        password_hash: str | None = None,
        user_agent: str | None = None,
    ) -> SignedIn:
        """A fresh token for *participant* (known to exist), recorded as
        issued *via* (``login``, ``did``...) so that it can be listed.
        *password_hash*: the one the password was checked against, which must
        still be the participant's when the token is recorded (a reset that
        committed meanwhile wins: the old password signs nobody in).

        Raises:
            Unauthorized: the participant was deleted, or its password
                changed, meanwhile.
        """
        session, issued = self._mint(participant, via, user_agent)

        def write(conn: Connection) -> None:
            if password_hash is not None:
                current = repo.password_hash_of(conn, participant.participant_id)
                if current is None or current[0] != password_hash:
                    raise Unauthorized("wrong name or password", "invalid_credentials")
            try:
                with conn.begin_nested():
                    self._record(conn, issued)
            except IntegrityError:  # deleted since it was read
                raise Unauthorized("wrong name or password", "invalid_credentials") from None

        # not quick: with several processes it takes the write lock, so a
        # password change that commits meanwhile is not passed by a token
        # issued on the old password (decision 0080)
        await self._db.write(write)
        return session

    def _mint(
        self, participant: Participant, via: str, user_agent: str | None = None
    ) -> tuple[SignedIn, IssuedToken]:
        """A token for *participant*, and its row for ``issued_tokens``
        (:meth:`_record` it in the unit that creates or signs it in), with
        the *user_agent* that asked for it."""
        token, claims = self._tokens.mint(
            participant.participant_id, participant.kind, self.token_ttl(participant.kind)
        )
        issued = IssuedToken(
            claims.token_id,
            participant.participant_id,
            via,
            claims.issued_at,
            claims.expires_at,
            user_agent=clean_user_agent(user_agent),
            last_used_at=claims.issued_at,
        )
        return SignedIn(participant, token), issued

    def _record(self, conn: Connection, issued: IssuedToken) -> None:
        """Record *issued* in the unit of work on *conn*, and (once a minute
        per process) prune the expired ones."""
        tokens_repo.record_token(conn, issued)
        self._note_used(issued.token_id, issued.issued_at)
        # the unit may run again (``Database.write``) and only its last run
        # commits: a rerun for the same token prunes again
        if issued.issued_at - self._pruned_at >= 60 or issued.token_id == self._pruned_for:
            self._pruned_at = issued.issued_at
            self._pruned_for = issued.token_id
            tokens_repo.prune_tokens(conn, issued.issued_at)
