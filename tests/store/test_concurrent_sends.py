"""Sends and membership changes that commit concurrently, on PostgreSQL
(decision 0080): a send no longer takes the mesh's write lock, so its
membership check must hold the member's row until it commits. A removal
committed first wins (the send waits for it, then finds no membership);
a send that checked first keeps the removal waiting until it commits.

Both paths are checked: the plain post (``messages.post_message``: the
check is in its ``INSERT ... SELECT``, ``FOR KEY SHARE OF room_members``)
and the full send's check (``rooms.kind_and_membership``).

Each race opens a first transaction and, while it is open, runs the second
on a worker thread until PostgreSQL shows it waiting for a lock (or it
ended: then it did not wait); then the first commits.

Skipped on SQLite: one writer at a time there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest
import sqlalchemy as sa
import trio
from sqlalchemy.engine import Connection, Engine

from quart_mesh.records import now_ms
from quart_mesh.store import Database, outbox, rooms
from quart_mesh.store import messages as messages_repo
from quart_mesh.store import schema as s
from tests import stores
from tests.store import rows

pytestmark = pytest.mark.timeout(60)


@dataclass
class _Room:
    engine: Engine
    room: str
    bob: str

    def post(self, conn: Connection) -> Any:
        message = replace(rows.message(self.room, "hello"), sender_id=self.bob, sender_name="bob")
        return messages_repo.post_message(conn, message)

    def remove(self, conn: Connection) -> bool:
        return rooms.remove_member(conn, self.room, self.bob)

    def check(self, conn: Connection) -> tuple[str, bool] | None:
        return rooms.kind_and_membership(conn, self.room, self.bob)

    def messages(self) -> int:
        with self.engine.connect() as conn:
            query = sa.select(sa.func.count()).where(s.messages.c.room_id == self.room)
            return int(conn.execute(query).scalar_one())

    def member(self) -> bool:
        with self.engine.connect() as conn:
            return rooms.is_member(conn, self.room, self.bob)


@pytest.fixture
def lobby(cluster: stores.Cluster, opened: Database) -> _Room:
    """A room bob is a member of."""
    with opened.engine.begin() as conn:
        bob = rows.participant(conn, "bob")
        room = rows.room(conn, "lobby")
        rooms.add_member(conn, room, bob, now_ms())
    return _Room(opened.engine, room, bob)


async def _second_behind_first(
    engine: Engine, first: Callable[[Connection], Any], second: Callable[[Connection], Any]
) -> tuple[Any, Any, bool]:
    """Run *first* in a transaction and, while it is open, *second* in
    another on a worker thread, until the second waits for a lock or ends;
    then commit the first. Both results, and whether the second waited."""

    def waiting_or_done() -> bool:
        return bool(rows.lock_waiters(engine)) or bool(out)

    def run_second() -> None:
        with engine.begin() as conn:
            out.append(second(conn))

    out: list[Any] = []
    with engine.connect() as conn:
        transaction = conn.begin()
        try:
            result = first(conn)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, run_second)
                try:
                    with trio.fail_after(20):
                        while not waiting_or_done():
                            await trio.sleep(0.01)
                    waited = not out
                finally:
                    transaction.commit()  # the worker thread goes on in any case
        finally:
            if transaction.is_active:
                transaction.rollback()
    return result, out[0], waited


async def test_a_post_waits_for_a_removal_in_flight_and_is_refused_once_it_commits(
    lobby: _Room,
) -> None:
    removed, posted, waited = await _second_behind_first(lobby.engine, lobby.remove, lobby.post)
    assert removed
    assert waited, "the post did not wait for the removal of its sender's membership"
    assert posted is None  # nothing written: bob was no longer a member
    assert lobby.messages() == 0


async def test_a_removal_waits_for_a_post_in_flight(lobby: _Room) -> None:
    posted, removed, waited = await _second_behind_first(lobby.engine, lobby.post, lobby.remove)
    assert posted is not None
    assert waited, "the removal did not wait for the post that checked bob's membership"
    assert removed
    assert (lobby.messages(), lobby.member()) == (1, False)


async def test_a_send_checked_while_a_removal_is_in_flight_finds_no_membership(
    lobby: _Room,
) -> None:
    removed, checked, waited = await _second_behind_first(lobby.engine, lobby.remove, lobby.check)
    assert removed
    assert waited, "the send's check did not wait for the removal"
    assert checked == ("room", False)


async def test_a_removal_waits_for_a_send_that_checked_membership(lobby: _Room) -> None:
    checked, removed, waited = await _second_behind_first(lobby.engine, lobby.check, lobby.remove)
    assert checked == ("room", True)
    assert waited, "the removal did not wait for the send that checked bob's membership"
    assert removed
    assert not lobby.member()


async def test_a_room_deleted_while_a_send_is_in_flight_waits_for_it_without_a_deadlock(
    lobby: _Room,
) -> None:
    """The send holds its membership, then its message's reference to the
    room; the deletion removes the members, then the room: the same order,
    so the deletion waits for the send (a deadlock before: the deletion
    locked the room first and the send's message then waited for it)."""
    deleted: list[bool] = []

    def delete() -> None:
        with lobby.engine.begin() as conn:
            deleted.append(rooms.delete_room(conn, lobby.room))

    def waiting() -> bool:
        return bool(rows.lock_waiters(lobby.engine))

    with lobby.engine.connect() as conn:
        transaction = conn.begin()
        assert lobby.check(conn) == ("room", True)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, delete)
            with trio.fail_after(20):
                while not waiting():
                    await trio.sleep(0.01)
            assert deleted == []  # the deletion waits for the send
            message = replace(rows.message(lobby.room, "hi"), sender_id=lobby.bob)
            messages_repo.insert_message(conn, message)  # refers to the room
            transaction.commit()
    assert deleted == [True]
    assert lobby.messages() == 0  # gone with the room


async def test_two_replies_with_one_client_id_at_once_both_get_the_first_ones_message(
    lobby: _Room, opened: Database
) -> None:
    """The same send through two processes (a client retrying on a new
    connection) on the full path (here a reply): the second waits for the
    first's commit on the clientId's unique index, then answers with its
    message, as a retry after it would; not 409."""
    from quart_mesh.broker import Broker
    from quart_mesh.config import Limits
    from quart_mesh.services.authz import Actor
    from quart_mesh.services.messages import Messages

    with opened.engine.begin() as conn:
        root = messages_repo.insert_message(conn, rows.message(lobby.room, "root"))
    bob = Actor(lobby.bob, "bob", "human", "human", "member")
    messages = Messages(opened, Limits(), Broker())

    def reply() -> Any:
        draft = replace(
            rows.message(lobby.room, "a reply"),
            sender_id=lobby.bob,
            sender_name="bob",
            client_id="retry-1",
        )
        unit = messages._storer(bob, draft, None, root.message_id, (), source=None)

        def run(conn: Connection) -> Any:
            outbox.begin(conn)  # (as the store's writer runs a unit)
            try:
                return unit(conn)
            finally:
                outbox.take(conn)

        return run

    first, second, waited = await _second_behind_first(rows.writing(lobby.engine), reply(), reply())
    assert waited
    assert first[1] is True
    assert second[1] is False
    assert second[0].message_id == first[0].message_id
    assert lobby.messages() == 2  # the root and one reply
