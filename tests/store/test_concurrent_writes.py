"""Writes that one writer made safe stay safe with several (issue 15): the
same row added by two writers at once is added once, and a write that
refers to a row deleted meanwhile is a 404, never a 500.

Each race opens a first transaction that writes and holds, runs the same
write in a second transaction on another thread, then commits the first
(``rows.race``). On PostgreSQL the second really runs while the first is
open (the case select-then-insert got wrong: it saw nothing, inserted, and
failed with a unique violation); on SQLite it waits for the write lock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa
import trio
from sqlalchemy.engine import Connection

from quart_mesh.errors import Conflict, NotFound
from quart_mesh.ids import new_id
from quart_mesh.permissions import Override, Role
from quart_mesh.records import now_ms
from quart_mesh.store import (
    Database,
    accounts,
    identity_keys,
    messages,
    model_registry,
    pins,
    registry,
    roles,
    rooms,
    state,
)
from quart_mesh.store import schema as s
from tests.store import rows


@dataclass
class Case:
    #: writes what both writes need; returns their arguments
    setup: Callable[[Connection], dict[str, Any]]
    first: Callable[..., Any]
    second: Callable[..., Any]
    #: the results of the first and the second write
    results: tuple[Any, Any]
    #: checks the rows after both committed
    check: Callable[..., None]


def _message(conn: Connection) -> dict[str, Any]:
    room_id = rows.room(conn)
    return {"message_id": messages.insert_message(conn, rows.message(room_id)).message_id}


def _member(conn: Connection) -> dict[str, Any]:
    room_id, pid = rows.room(conn), rows.participant(conn)
    return {"room_id": room_id, "pid": pid}


def _joined(conn: Connection) -> dict[str, Any]:
    found = _member(conn)
    rooms.add_member(conn, found["room_id"], found["pid"], now_ms())
    return found


def _count(conn: Connection, table: sa.Table) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


def _role(name: str) -> Role:
    return Role(name, 50, frozenset({"messages.send"}), new_id(), "", now_ms())


def _override(room_id: str, effect: str) -> Override:
    return Override(new_id(), room_id, "role", "member", "messages.send", effect)


def _model(name: str, url: str) -> model_registry.StoredModel:
    return model_registry.StoredModel(name, url, None, None, None, now_ms())


def _beat(members: int) -> registry.RegistryRow:
    return registry.RegistryRow("did:key:z1", "m", "", "http://m", members, 0, "1", now_ms())


def _usage(conn: Connection, pid: str) -> None:
    model_registry.add_usage(
        conn, pid, "gpt", error=False, prompt_tokens=3, completion_tokens=4, at=now_ms()
    )


CASES = {
    "reaction": Case(
        _message,
        lambda conn, message_id: messages.add_reaction(conn, message_id, "p", "+1", now_ms()),
        lambda conn, message_id: messages.add_reaction(conn, message_id, "p", "+1", now_ms()),
        (True, False),
        lambda conn, message_id: _count(conn, s.reactions) == 1 or pytest.fail("two reactions"),
    ),
    "join": Case(
        _member,
        lambda conn, room_id, pid: rooms.add_member(conn, room_id, pid, now_ms()),
        lambda conn, room_id, pid: rooms.add_member(conn, room_id, pid, now_ms()),
        (True, False),
        lambda conn, room_id, pid: rooms.is_member(conn, room_id, pid) or pytest.fail("no"),
    ),
    "read position": Case(
        _joined,
        lambda conn, room_id, pid: state.advance_reads(conn, pid, {room_id: 7}),
        lambda conn, room_id, pid: state.advance_reads(conn, pid, {room_id: 5}),
        (None, None),
        lambda conn, room_id, pid: (
            state.unread_summary(conn, pid, "x")[room_id][2] == 7
            or pytest.fail("the read position went back")
        ),
    ),
    "world position": Case(
        _member,
        lambda conn, room_id, pid: state.set_position(
            conn, state.Position(pid, room_id, 1, 1, 1), now_ms()
        ),
        lambda conn, room_id, pid: state.set_position(
            conn, state.Position(pid, room_id, 2, 2, 2), now_ms()
        ),
        (None, None),
        lambda conn, room_id, pid: (
            state.list_positions(conn)[pid].x == 2 or pytest.fail("the later position was lost")
        ),
    ),
    "model usage": Case(
        lambda conn: {"pid": rows.participant(conn)},
        _usage,
        _usage,
        (None, None),
        lambda conn, pid: (
            model_registry.list_usage(conn)[0].requests == 2
            or pytest.fail("a request was not counted")
        ),
    ),
    "custom role": Case(
        lambda conn: {},
        lambda conn: roles.insert_role(conn, _role("mods"), None),
        lambda conn: roles.insert_role(conn, _role("mods"), None),
        (True, False),
        lambda conn: _count(conn, s.custom_roles) == 1 or pytest.fail("two roles"),
    ),
    "room rule": Case(
        lambda conn: {"room_id": rows.room(conn)},
        lambda conn, room_id: roles.put_override(conn, _override(room_id, "deny"), "p", now_ms()),
        lambda conn, room_id: roles.put_override(conn, _override(room_id, "allow"), "p", now_ms()),
        ("deny", "allow"),
        lambda conn, room_id: _count(conn, s.room_overrides) == 1 or pytest.fail("two rules"),
    ),
    "model": Case(
        lambda conn: {},
        lambda conn: model_registry.insert_model(conn, _model("gpt", "http://a")),
        lambda conn: model_registry.insert_model(conn, _model("gpt", "http://b")),
        (True, False),
        lambda conn: (
            model_registry.list_models(conn)[0].base_url == "http://a"
            or pytest.fail("the model was replaced")
        ),
    ),
    "signed-out token": Case(
        lambda conn: {},
        lambda conn: accounts.revoke_token(conn, "t1", "p", 2**40),
        lambda conn: accounts.revoke_token(conn, "t1", "p", 2**40),
        (None, None),
        lambda conn: _count(conn, s.revoked_tokens) == 1 or pytest.fail("two rows"),
    ),
    "registry heartbeat": Case(
        lambda conn: {},
        lambda conn: registry.upsert_entry(conn, _beat(1), max_entries=10, cutoff=0),
        lambda conn: registry.upsert_entry(conn, _beat(2), max_entries=10, cutoff=0),
        (True, True),
        lambda conn: (
            registry.list_recent(conn, 0, 10)[0].members == 2
            or pytest.fail("the later heartbeat was lost")
        ),
    ),
    "DID link": Case(
        lambda conn: {"pid": rows.participant(conn)},
        lambda conn, pid: identity_keys.link(conn, pid, "did:key:zA", None, now_ms()),
        lambda conn, pid: identity_keys.link(conn, pid, "did:key:zB", None, now_ms()),
        (None, None),
        lambda conn, pid: (
            identity_keys.get_for_participant(conn, pid).did == "did:key:zB"
            or pytest.fail("the later link was lost")
        ),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_same_row_added_by_two_writers_at_once(opened: Database, name: str) -> None:
    case = CASES[name]
    with rows.writing(opened.engine).begin() as conn:
        args = case.setup(conn)
    first, second = rows.race(
        opened.engine, lambda conn: case.first(conn, **args), lambda conn: case.second(conn, **args)
    )
    if isinstance(second, Exception):
        raise second
    if name == "room rule":  # one rule, under the id it was first stored with
        assert first.override_id == second.override_id
        first, second = first.effect, second.effect
    assert (first, second) == case.results
    with opened.engine.connect() as conn:
        case.check(conn, **args)


async def test_a_write_that_refers_to_a_deleted_row_is_not_found(store_url: str) -> None:
    db = Database(store_url)
    await db.open()
    try:

        def setup(conn: Connection) -> tuple[str, str, str]:
            found = _member(conn)
            return found["room_id"], found["pid"], _message(conn)["message_id"]

        room_id, pid, message_id = await db.write(setup)
        # deleted by another process, whose caches this one has not heard of yet
        await db.write(
            lambda conn: conn.execute(
                s.participants.delete().where(s.participants.c.participant_id == pid)
            )
        )
        await db.write(lambda conn: messages.delete_message(conn, message_id))
        with pytest.raises(NotFound) as joined:
            await db.write(lambda conn: rooms.add_member(conn, room_id, pid, now_ms()))
        with pytest.raises(NotFound) as reacted:
            await db.write(lambda conn: messages.add_reaction(conn, message_id, pid, "+", 1))
        if db.backend == "postgresql":  # SQLite does not name the constraint
            assert joined.value.code == "participant_not_found"
            assert reacted.value.code == "message_not_found"

        # the same in a group commit: the failing unit fails alone, as a 404
        async with trio.open_nursery() as nursery:
            await nursery.start(db.run)
            other = await db.write(rows.participant)
            waits = [
                db.submit(lambda conn: rooms.add_member(conn, room_id, other, now_ms())),
                db.submit(lambda conn: rooms.add_member(conn, room_id, pid, now_ms())),
                db.submit(lambda conn: rows.send(conn, room_id)),
            ]
            assert await waits[0] is True
            with pytest.raises(NotFound):
                await waits[1]
            assert await waits[2] > 0
            nursery.cancel_scope.cancel()
    finally:
        await db.close()


async def test_a_unique_violation_that_escapes_a_unit_is_a_conflict(store_url: str) -> None:
    db = Database(store_url)
    await db.open()
    try:
        await db.write(lambda conn: rows.room(conn, "lobby"))
        with pytest.raises(Conflict):
            await db.write(lambda conn: rows.room(conn, "lobby"))
    finally:
        await db.close()


def test_two_writers_pinning_at_once_never_overshoot_the_cap(opened: Database) -> None:
    """A room one pin short of its cap: two transactions pin two different
    messages at once. On PostgreSQL the second really runs while the first
    is open; before the pins were counted under the sequence lock each saw
    only its own new pin and both committed (51 of 50)."""
    cap = 50
    with rows.writing(opened.engine).begin() as conn:
        room_id = rows.room(conn)
        ids = [
            messages.insert_message(conn, rows.message(room_id, f"m{i}")).message_id
            for i in range(cap + 1)
        ]
        for message_id in ids[: cap - 1]:
            assert pins.pin(conn, pins.Pin(message_id, room_id, "p", now_ms()), cap=cap)

    def pin(message_id: str) -> Callable[[Connection], bool | None]:
        return lambda conn: pins.pin(conn, pins.Pin(message_id, room_id, "p", now_ms()), cap=cap)

    first, second = rows.race(opened.engine, pin(ids[cap - 1]), pin(ids[cap]))
    assert (first, second) == (True, None)
    with opened.engine.connect() as conn:
        assert pins.count_pins(conn, room_id) == cap
        # a pinned message pinned again in the full room: idempotent, not full
        assert pins.pin(conn, pins.Pin(ids[0], room_id, "p", now_ms()), cap=cap) is False
