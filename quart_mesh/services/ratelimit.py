"""Rate limits: one limiter that every domain service consults.

The services call it, not the handlers, so REST, WebSocket, polling and
webhook bots share one budget per participant. The rules and their defaults
are :class:`~quart_mesh.config.RateLimits` (``docs/rate-limits.md``); an admin
can change them while the node runs (:meth:`RateLimiter.configure`).

The algorithm is GCRA, the generic cell rate algorithm, which is a token
bucket that keeps one number per key. That number is the time at which the
key's bucket will be full again. A rule of ``count`` per ``per`` seconds in
bursts of ``burst`` allows an action when that time is at most
``(burst - 1) * per / count`` seconds ahead. Each allowed action moves the time
``per / count`` further on. A key whose time has passed has a full bucket,
which is the same as not being remembered at all. So idle keys are forgotten
(least recently used first), and memory stays bounded by ``max_keys``. Under
pressure a key that is not idle may be forgotten too, which only lets that
key off lightly.

The clock is Trio's (``trio.current_time``), so tests can use an autojump clock.

Several processes on one PostgreSQL database (decision 0036): the rules
whose point is security (:data:`SHARED_RULES`: login attempts per name and
per address, registrations per address, which DID verifications and guest
sessions count against too) keep their buckets in the store, so an attacker
gains nothing by spreading attempts over processes. The same algorithm runs
there, as one atomic upsert per hit (``store/limits.py``), on a clock all
processes share: the wall clock when this limiter first counts there, moved
on by the limiter's clock since (so an autojump clock moves it in tests).
The chat rules (messages, reactions, typing, models) and ``federation_relay``
stay in each process's memory: sharing them would cost a database round trip
per message, and what they protect (the node's capacity) is per process too.
On SQLite (one process) the other rules stay in memory.

Logins (decision 0055): :meth:`RateLimiter.login_attempt` refuses per
address (``login_address``) and per (name, address) (``login_name``), never
per name alone; failures per name (``login_slowdown``,
:meth:`RateLimiter.login_failed`) become a bounded wait before the password
is checked. The two login rules (:data:`LOGIN_RULES`) are kept in the store
on every backend, SQLite too, so that ``quart-mesh user unlock`` clears them
for the running node and every process.
"""

from __future__ import annotations

import collections
import ipaddress
import math
import time
from collections.abc import Callable
from typing import Final

import trio
from sqlalchemy.engine import Connection

from ..client_address import ip_of
from ..config import RateLimits
from ..errors import RateLimited
from ..store import Database
from ..store import limits as repo
from .authz import Actor

__all__ = ["RULE_MESSAGES", "SHARED_RULES", "RateLimiter", "address_key"]

#: what a refusal says, per rule
RULE_MESSAGES: Final = {
    "messages": "you are sending messages too fast",
    "reactions": "you are reacting too fast",
    "typing": "you are sending typing too fast",
    "models": "too many model requests",
    "search": "you are searching too fast",
    "link_previews": "you are asking for too many link previews",
    "profile": "you are changing your settings too fast",
    "login_name": "too many login attempts for this name from your address",
    "login_slowdown": "too many failed logins for this name",
    "login_address": "too many login attempts from your address",
    "registration_address": "too many registrations from your address",
    "challenge_address": "too many identity challenges from your address",
    "federation_relay": "this node relays too many events",
    "federation_stranger_address": (
        "too many signed requests from your address by nodes that are not peers here"
    ),
    "registry_did": "this node sends too many heartbeats",
    "registry_address": "too many meshes checked for your address",
}
#: rules counted in the store when several processes may serve the mesh
SHARED_RULES: Final = frozenset(
    {
        "login_name",
        "login_address",
        "registration_address",
        "federation_stranger_address",
        "registry_did",
        "registry_address",
    }
)
#: login rules kept in the store on every backend (SQLite too), so that
#: ``quart-mesh user unlock`` clears them for a running node
LOGIN_RULES: Final = frozenset({"login_name", "login_slowdown"})
#: idle keys examined for eviction per action (amortized sweeping)
_SWEEP = 2
#: how often a process deletes the full buckets from the store (seconds)
_PRUNE_EVERY = 60.0
_Address = ipaddress.IPv4Network | ipaddress.IPv6Network


def address_key(address: str) -> str:
    """What a per-address rule counts a client address as: an IPv4 address
    itself, an IPv6 address by its /64 (one subscriber's network: anyone
    holding one has 2^64 addresses to rotate through)."""
    ip = ip_of(address)  # an IPv4-mapped IPv6 address as its IPv4 address
    if ip is None:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class RateLimiter:
    """Decides whether an action is allowed now; remembers recent actions."""

    def __init__(
        self,
        config: RateLimits | None = None,
        *,
        clock: Callable[[], float] | None = None,
        db: Database | None = None,
    ) -> None:
        """Args:
        clock: seconds, for the rules kept in memory (default Trio's).
        db: the store; on PostgreSQL, :data:`SHARED_RULES` are counted
            there (on SQLite it is not used: one process, memory is enough).
        """
        self._clock = clock or trio.current_time
        self._db = db if db is not None and db.backend == "postgresql" else None
        #: where the login rules are counted (any backend), ``None``: memory
        self._login_db = db
        self._next_prune = 0.0
        #: wall clock minus the limiter's clock (seconds), fixed at the first shared hit
        self._wall_offset: float | None = None
        #: (rule, key) -> when that key's bucket is full again (least recently used first)
        self._full_at: collections.OrderedDict[tuple[str, str], float] = collections.OrderedDict()
        self._refused: collections.Counter[str] = collections.Counter()
        self._exempt: tuple[_Address, ...] = ()
        self.config = config or RateLimits()
        self.configure(self.config)

    def configure(self, config: RateLimits) -> None:
        """Use *config* from now on; what was remembered still counts."""
        self.config = config
        self._exempt = tuple(ipaddress.ip_network(a, strict=False) for a in config.exempt_addresses)

    # checks -------------------------------------------------------------------

    def participant(self, rule: str, actor: Actor, scope: str = "") -> None:
        """Count one *rule* action by *actor* (in *scope*, e.g. a room).

        Raises:
            RateLimited: over the actor's limit; ``retry_after`` says for how long.
        """
        wait = self._participant(rule, actor, scope)
        if wait:
            self._refuse(rule, wait)

    def participant_allowed(self, rule: str, actor: Actor, scope: str = "") -> bool:
        """Like :meth:`participant`, for actions dropped silently when over the limit."""
        return not self._participant(rule, actor, scope)

    @property
    def shared(self) -> bool:
        """Whether :data:`SHARED_RULES` are counted in the store (PostgreSQL)."""
        return self._db is not None

    async def address(self, rule: str, address: str | None) -> None:
        """Count one *rule* action from a client address. ``None`` (not over
        HTTP) and exempt addresses are not limited.

        Raises:
            RateLimited: over the limit.
            Unavailable, Overloaded: a shared rule, and the store cannot count
                it (the action is refused, not let through uncounted).
        """
        if address is None or self.is_exempt(address):
            return
        await self.key(rule, address_key(address))

    async def key(self, rule: str, key: str) -> None:
        """Count one *rule* action for *key* (e.g. a casefolded login name).

        Cancellation: a shared hit handed to the store is counted even if the
        caller is cancelled meanwhile.

        Raises:
            RateLimited: over the limit.
            Unavailable, Overloaded: as :meth:`address`.
        """
        if self._db is not None and rule in SHARED_RULES:
            wait = await self._take_shared(self._db, rule, key)
        else:
            wait = self._take(rule, key, 1.0)
        if wait:
            self._refuse(rule, wait)

    async def login_attempt(self, name: str, address: str | None) -> float:
        """Count one login attempt for *name* from *address* (decision 0055).

        Refused: more than ``login_address`` attempts from the address (any
        names; not for exempt addresses), or more than ``login_name`` for
        this name from this address. Never refused for the name alone:
        failed logins for it from anywhere (:meth:`login_failed`) beyond
        ``login_slowdown`` make every attempt for it wait instead, at most
        ``login_max_delay`` seconds, so nobody can lock the owner out.

        Returns:
            The seconds the attempt must wait before its password is checked.

        Raises:
            RateLimited: over ``login_address`` or ``login_name``.
            Unavailable, Overloaded: as :meth:`address`.
        """
        await self.address("login_address", address)
        name_key = repo.login_name_key(name)
        where = "-" if address is None else address_key(address)
        await self._login_take("login_name", f"{name_key} {where}")
        rate = self.config.login_slowdown
        if rate is None or not self.config.enabled:
            return 0.0
        if self._login_db is not None:
            db = self._login_db
            found = await db.read(lambda conn: repo.peek(conn, "login_slowdown", name_key))
            full_at = None if found is None else found / 1000
            now = self._wall_now()
        else:
            full_at = self._full_at.get(("login_slowdown", name_key))
            now = self._clock()
        if full_at is None:
            return 0.0
        tolerance = rate.per / rate.count * (max(1, rate.burst) - 1)
        return max(0.0, min(self.config.login_max_delay, full_at - now - tolerance))

    async def login_failed(self, name: str) -> None:
        """A login for *name* failed: count it towards its slowdown.

        Cancellation: a failure handed to the store is counted even if the
        caller is cancelled meanwhile.
        """
        rate = self.config.login_slowdown
        if rate is None or not self.config.enabled:
            return
        key = repo.login_name_key(name)
        interval = rate.per / rate.count
        tolerance = interval * (max(1, rate.burst) - 1)
        # the debt never runs more than one window past the tolerance: a
        # slowdown ends at most `per` seconds after the failures stop
        ceiling = tolerance + rate.per
        if self._login_db is not None:
            now_ms = int(self._wall_now() * 1000)
            step, top = max(1, round(interval * 1000)), round(ceiling * 1000)
            await self._login_db.write(
                lambda conn: repo.add(
                    conn, "login_slowdown", key, now=now_ms, interval=step, ceiling=top
                )
            )
            return
        now = self._clock()
        slot = ("login_slowdown", key)
        memory = self._full_at
        full_at = max(memory.pop(slot, now), now)
        memory[slot] = min(full_at + interval, now + ceiling)
        self._forget_idle(now)

    async def _login_take(self, rule: str, key: str) -> None:
        db = self._login_db
        if db is not None:
            wait = await self._take_shared(db, rule, key)
        else:
            wait = self._take(rule, key, 1.0)
        if wait:
            self._refuse(rule, wait)

    def _wall_now(self) -> float:
        """The clock of buckets in the store (seconds): see the module's docstring."""
        if self._wall_offset is None:
            self._wall_offset = time.time() - self._clock()
        return self._clock() + self._wall_offset

    def multiplier(self, role: str) -> float:
        """How many times the base limits *role* gets (``inf`` for the owner)."""
        if role == "owner":
            return math.inf
        return self.config.role_multipliers.get(role, 1.0)

    def statistics(self) -> dict[str, object]:
        return {
            "enabled": self.config.enabled,
            # in this process's memory (shared rules on PostgreSQL are not)
            "trackedKeys": len(self._full_at),
            "refused": dict(sorted(self._refused.items())),
        }

    # the algorithm --------------------------------------------------------------

    def _participant(self, rule: str, actor: Actor, scope: str) -> float:
        # typing is a signal's rate, not a budget: the same for every role
        factor = 1.0 if rule == "typing" else self.multiplier(actor.role)
        if factor == math.inf:
            return 0.0
        key = actor.participant_id if not scope else f"{actor.participant_id} {scope}"
        return self._take(rule, key, factor)

    def _take(self, rule: str, key: str, factor: float) -> float:
        """Count one action; 0 if allowed, else the seconds until it would be."""
        config = self.config
        rate = config.rule(rule)
        if rate is None or not config.enabled:
            return 0.0
        now = self._clock()
        interval = rate.per / (rate.count * factor)
        tolerance = interval * (max(1.0, rate.burst * factor) - 1)
        memory = self._full_at
        slot = (rule, key)
        full_at = max(memory.pop(slot, now), now)
        if full_at - now > tolerance + 1e-9:
            memory[slot] = full_at
            return full_at - tolerance - now
        memory[slot] = full_at + interval
        self._forget_idle(now)
        return 0.0

    async def _take_shared(self, db: Database, rule: str, key: str) -> float:
        """:meth:`_take` in the store, on the wall clock (ms), for every process."""
        config = self.config
        rate = config.rule(rule)
        if rate is None or not config.enabled:
            return 0.0
        interval = max(1, round(rate.per * 1000 / rate.count))
        tolerance = interval * (max(1, rate.burst) - 1)
        now = int(self._wall_now() * 1000)
        # full buckets are the same as none: each process deletes them now and then
        prune = now / 1000 >= self._next_prune
        if prune:
            self._next_prune = now / 1000 + _PRUNE_EVERY

        def hit(conn: Connection) -> int:
            if prune:
                repo.prune(conn, now)
            return repo.take(conn, rule, key, now=now, interval=interval, tolerance=tolerance)

        return await db.write(hit) / 1000

    def _forget_idle(self, now: float) -> None:
        memory = self._full_at
        for _ in range(_SWEEP):
            if not memory:
                return
            slot, full_at = next(iter(memory.items()))
            if full_at > now:
                break
            del memory[slot]
        while len(memory) > self.config.max_keys:
            memory.popitem(last=False)

    def is_exempt(self, address: str) -> bool:
        """Whether *address* is never limited per address (``exempt_addresses``,
        as configured now: admins may change it at run time)."""
        if not self._exempt:
            return False
        ip = ip_of(address)
        return ip is not None and any(ip in network for network in self._exempt)

    def _refuse(self, rule: str, wait: float) -> None:
        self._refused[rule] += 1
        message = f"{RULE_MESSAGES[rule]}: try again in {max(wait, 0.1):.1f} s"
        # rounded up: a client that waits what it is told is never refused again
        raise RateLimited(message, retry_after=math.ceil(wait * 1000) / 1000)
