"""Elected singletons: a component that runs on one process of the mesh at a
time (docs/decisions/0035-elected-singletons.md).

On PostgreSQL several processes serve one mesh; the bot supervisor, webhook
delivery, the federation link tasks and the registry heartbeat must each run
once in the whole mesh. :func:`run_elected` runs such a component only while
this process holds its *role*: a session-level advisory lock
(``pg_try_advisory_lock``) on a connection of its own, outside the pool.

- A process that does not hold the lock asks for it again every
  :data:`POLL_INTERVAL` seconds.
- The holder checks its connection as often; when the connection is lost
  (or does not answer within :data:`CHECK_TIMEOUT`), it cancels the
  component and starts asking again on a new connection.
- PostgreSQL releases a session's locks when its connection ends, so when
  the holder dies — ``kill -9`` included — another process takes the role
  over at its next poll.

On SQLite (one process per data folder) there is nothing to elect: the
component simply runs.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import trio
from sqlalchemy.exc import DBAPIError

from ..errors import Unavailable
from ..faults import STORE_UNAVAILABLE
from ..retry import Backoff, retrying
from .database import Database

__all__ = [
    "BOT_SUPERVISOR",
    "CHECK_TIMEOUT",
    "FEDERATION_LINKS",
    "POLL_INTERVAL",
    "REGISTRY_HEARTBEAT",
    "SEARCH_INDEXER",
    "TASK_RECONCILER",
    "WEBHOOK_DELIVERY",
    "Role",
    "run_elected",
]

log = logging.getLogger(__name__)

#: how often a process asks for a role it does not hold, and the holder
#: checks that its connection (and so its lock) is still there
POLL_INTERVAL = 1.0
#: a check the holder's connection does not answer within this is a lost lock
CHECK_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class Role:
    """A singleton's name (for logs) and its advisory lock key (64-bit,
    fixed; ``dialect.py`` holds the store's own keys, ``0x6D657368_0000_00xx``)."""

    name: str
    key: int


BOT_SUPERVISOR = Role("bot supervisor", 0x6D65_7368_0000_0101)
WEBHOOK_DELIVERY = Role("webhook delivery", 0x6D65_7368_0000_0102)
FEDERATION_LINKS = Role("federation links", 0x6D65_7368_0000_0103)
REGISTRY_HEARTBEAT = Role("registry heartbeat", 0x6D65_7368_0000_0104)
SEARCH_INDEXER = Role("search indexer", 0x6D65_7368_0000_0105)
TASK_RECONCILER = Role("task reconciler", 0x6D65_7368_0000_0106)

Component = Callable[..., Awaitable[None]]


class _Lease:
    """A connection of its own (outside the pool) that holds one advisory
    lock while it lives. Every method blocks: call it in a worker thread."""

    def __init__(self, db: Database) -> None:
        raw = db.engine.raw_connection()
        conn: Any = raw.driver_connection
        raw.detach()  # closing it really closes it (and releases the lock)
        self._raw = raw
        conn.autocommit = True
        self._conn = conn  # never idle in a transaction
        # the server notices a holder whose host died or was cut off within
        # seconds (the lock goes with the session), not after the kernel's
        # two hours; ignored on a Unix socket
        for setting in (
            "tcp_keepalives_idle = 5",
            "tcp_keepalives_interval = 2",
            "tcp_keepalives_count = 3",
            "tcp_user_timeout = 15000",  # PostgreSQL 12 and later
        ):
            try:
                conn.execute(f"SET {setting}")
            except Exception as error:
                if conn.closed or "Operational" in type(error).__name__:
                    # the connection is gone (the server stopping, say): the
                    # caller retries, as a store fault, not a traceback a try
                    with contextlib.suppress(Exception):
                        conn.close()
                    raise
                # an older server: the lease works without it
                log.info("the lease connection could not SET %s (%s)", setting, error)

    def try_lock(self, key: int) -> bool:
        row = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
        return bool(row[0])

    def check(self) -> None:
        self._conn.execute("SELECT 1").fetchone()

    def close(self) -> None:
        try:
            # the driver's own close: the pool's would roll back first, and log
            # a traceback when the connection is lost already
            self._conn.close()
        except Exception:  # already broken: nothing left to release
            log.debug("closing a lease connection failed", exc_info=True)


async def _blocking(fn: Callable[[], Any], *, give_up_after: float | None = None) -> Any:
    """Run *fn* in a thread, its database errors as :class:`Unavailable`;
    with *give_up_after* (seconds), give up on it (the thread is left to
    finish alone: a call blocked on a dead network cannot be interrupted)."""

    def call() -> Any:
        try:
            return fn()
        except (DBAPIError, OSError) as error:
            raise Unavailable(f"lease connection: {error}"[:300], "storage_unavailable") from None
        except Exception as error:
            # psycopg's own errors when not wrapped by SQLAlchemy
            if type(error).__module__.startswith("psycopg"):
                raise Unavailable(
                    f"lease connection: {error}"[:300], "storage_unavailable"
                ) from None
            raise

    if give_up_after is None:
        return await trio.to_thread.run_sync(call)
    with trio.move_on_after(give_up_after):
        return await trio.to_thread.run_sync(call, abandon_on_cancel=True)
    raise Unavailable("the lease connection did not answer", "storage_unavailable")


async def _close(lease: _Lease) -> None:
    with trio.CancelScope(shield=True):
        await trio.to_thread.run_sync(lease.close, abandon_on_cancel=True)


async def run_elected(
    db: Database,
    role: Role,
    component: Component,
    *,
    poll_interval: float = POLL_INTERVAL,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``component(task_status=...)`` while this process holds *role*;
    run until cancelled.

    On SQLite this is ``await component(task_status=task_status)``. On
    PostgreSQL it reports started once the first election is decided: with
    the component started if this process won it (so a lone process is as
    ready as on SQLite), at once otherwise. Losing the lock cancels the
    component; it starts again (from scratch) when the lock is won again.

    A component that raises (a bug) ends this too: the node fails loudly.
    The lease connection's faults are retried (``retry.retrying``).
    """
    if db.backend != "postgresql":
        await component(task_status=task_status)
        return
    reported = False

    def report() -> None:
        nonlocal reported
        if not reported:
            reported = True
            task_status.started()

    backoff = Backoff(poll_interval, 30.0)
    while True:
        lease: _Lease = await retrying(
            f"opening the {role.name} lease connection",
            lambda: _blocking(lambda: _Lease(db)),
            backoff=backoff,
            logger=log,
            fault=(db.faults, STORE_UNAVAILABLE, ""),
        )
        failed: Unavailable | None = None
        try:
            while not await _blocking(
                partial(lease.try_lock, role.key), give_up_after=CHECK_TIMEOUT
            ):
                report()
                backoff.reset()
                await trio.sleep(poll_interval)
            backoff.reset()
            log.info("this process now runs the %s", role.name)
            async with trio.open_nursery() as nursery:
                # watched from the start: a component may wait (for the store) to start
                nursery.start_soon(_watch, lease, role, nursery.cancel_scope, poll_interval)
                await nursery.start(component)
                report()
            # the watch found the lock lost: a new connection asks again
        except Unavailable as error:
            failed = error
        finally:
            await _close(lease)
        if failed is not None:
            report()
            delay = backoff.next()
            db.faults.failed(STORE_UNAVAILABLE, str(failed))  # logged once for the outage
            log.debug(
                "%s: the lease connection failed (%s); again in %.1f s", role.name, failed, delay
            )
            await trio.sleep(delay)


async def _watch(lease: _Lease, role: Role, scope: trio.CancelScope, poll_interval: float) -> None:
    """Check the holder's connection every *poll_interval*; when it is gone
    (the lock with it), cancel the component's nursery (*scope*)."""
    while True:
        await trio.sleep(poll_interval)
        try:
            await _blocking(lease.check, give_up_after=CHECK_TIMEOUT)
        except Unavailable as error:
            log.warning("lost the %s role (%s): stopping it here", role.name, error)
            scope.cancel()
            return
