"""PostgreSQL ``LISTEN``/``NOTIFY``, read without a thread.

:class:`Listener` owns one autocommit psycopg connection that listens on a
few channels. Waiting is done by Trio on the connection's socket
(``trio.lowlevel.wait_readable``); once it is readable the input is
consumed and the notifications taken, all without blocking the event loop.
Connecting and ``LISTEN`` (a round trip each, once) and sending
(:meth:`Notifier.notify`) run in a worker thread, as every other database
call does.

A lost connection raises :class:`~quart_mesh.errors.Unavailable` from
:meth:`Listener.wait`; the caller connects again (and reads what it may
have missed from the store: a notification is only a wake-up).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlalchemy as sa
import trio

from ..errors import Unavailable

if TYPE_CHECKING:  # an optional extra: quart-mesh[postgres]
    import psycopg

__all__ = ["Listener", "Notification", "Notifier", "libpq_url"]

log = logging.getLogger(__name__)

#: the largest payload PostgreSQL accepts is 8000 bytes; keep a margin
MAX_PAYLOAD = 7000


def libpq_url(url: str) -> str:
    """The libpq connection URI of a SQLAlchemy ``postgresql+psycopg://`` URL."""
    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@dataclass(frozen=True, slots=True)
class Notification:
    channel: str
    payload: str


def _connect(url: str) -> psycopg.Connection[tuple[object, ...]]:
    import psycopg

    try:
        # keepalives: a peer that vanished without closing is noticed
        return psycopg.connect(
            libpq_url(url),
            autocommit=True,
            keepalives=1,
            keepalives_idle=5,
            keepalives_interval=2,
            keepalives_count=3,
            connect_timeout=10,
        )
    except psycopg.Error as exc:
        raise Unavailable(f"cannot reach the database: {exc}", "storage_unavailable") from exc


class Listener:
    """One listening connection. Use as ``async with Listener(url, channels)``."""

    def __init__(self, url: str, channels: Iterable[str]) -> None:
        self._url = url
        self._channels = tuple(channels)
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None

    async def __aenter__(self) -> Listener:
        import psycopg
        from psycopg import sql

        def connect() -> psycopg.Connection[tuple[object, ...]]:
            conn = _connect(self._url)
            try:
                for channel in self._channels:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            except psycopg.Error as exc:
                conn.close()
                raise Unavailable(f"cannot listen: {exc}", "storage_unavailable") from exc
            return conn

        self._conn = await trio.to_thread.run_sync(connect)
        return self

    async def __aexit__(self, *exc: object) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(conn.close)

    async def wait(self) -> list[Notification]:
        """Wait for one or more notifications and take them.

        Raises:
            Unavailable: the connection was lost.
        """
        import psycopg

        conn = self._conn
        if conn is None:
            raise RuntimeError("the listener is not open")
        pgconn = conn.pgconn
        while True:
            found = self._take(pgconn)
            if found:
                return found
            try:
                await trio.lowlevel.wait_readable(pgconn.socket)
                pgconn.consume_input()
            except (OSError, psycopg.Error) as exc:
                raise Unavailable(
                    f"lost the listening connection: {exc}", "storage_unavailable"
                ) from exc

    @staticmethod
    def _take(pgconn: psycopg.pq.abc.PGconn) -> list[Notification]:
        found: list[Notification] = []
        while (notify := pgconn.notifies()) is not None:
            found.append(
                Notification(
                    notify.relname.decode(errors="replace"),
                    notify.extra.decode(errors="replace"),
                )
            )
        return found


class Notifier:
    """Sends notifications on its own autocommit connection (in a thread),
    connecting again after a failure."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._limiter = trio.CapacityLimiter(1)

    async def notify(self, channel: str, payloads: list[str]) -> None:
        """Send each payload on *channel*, in order, in one round trip.

        Raises:
            Unavailable: the database could not be reached (nothing or part sent).
        """

        import psycopg

        def send() -> None:
            if self._conn is None or self._conn.closed:
                self._conn = _connect(self._url)
            try:
                with self._conn.transaction():
                    for payload in payloads:
                        self._conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))
            except psycopg.Error as exc:
                self._conn.close()
                self._conn = None
                raise Unavailable(f"cannot notify: {exc}", "storage_unavailable") from exc

        await trio.to_thread.run_sync(send, limiter=self._limiter)

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(conn.close, limiter=self._limiter)
