"""Rows the store's tests need, written with the store's own functions."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Connection, Engine

from quart_mesh.ids import new_id
from quart_mesh.records import Message, Participant, Room, now_ms
from quart_mesh.store import accounts, messages, rooms

#: how long a test lets a second transaction run before it concludes the
#: second one waits for the first (it is never a sleep that must be long
#: enough for something to happen: only for something not to)
WAITS = 0.5


def lock_waiters(engine: Engine) -> int:
    """How many of the database's sessions wait for a lock now (PostgreSQL)."""
    with engine.connect() as conn:
        return int(
            conn.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).scalar_one()
        )


def participant(conn: Connection, name: str | None = None) -> str:
    pid = new_id()
    who = Participant(pid, name or f"p{pid[-8:]}", "human", "human", "member", now_ms())
    accounts.insert_participant(conn, who, None)
    return pid


def room(conn: Connection, name: str | None = None) -> str:
    room_id = new_id()
    rooms.insert_room(conn, Room(room_id, "room", name or f"r{room_id[-8:]}", "", None, now_ms()))
    return room_id


def message(room_id: str, content: str = "hi") -> Message:
    return Message(0, new_id(), room_id, new_id(), "alice", content, now_ms())


def send(conn: Connection, room_id: str, content: str = "hi") -> int:
    """Insert a message into *room_id*; its cursor."""
    return messages.insert_message(conn, message(room_id, content)).seq


def writing(engine: Engine) -> Engine:
    """*engine* beginning its transactions as the store's writer does."""
    return engine.execution_options(mesh_write=True)


def race(
    engine: Engine,
    first: Callable[[Connection], Any],
    second: Callable[[Connection], Any],
) -> tuple[Any, Any]:
    """Run *first* in a transaction and, while it is still open, *second* in
    another transaction on another thread; then commit the first.

    Returns both results (the second's exception, if it raised, as its result).
    """
    outcome: dict[str, Any] = {}

    def run_second() -> None:
        try:
            with writing(engine).begin() as conn:
                outcome["second"] = second(conn)
        except Exception as exc:
            outcome["second"] = exc

    thread = threading.Thread(target=run_second)
    with writing(engine).begin() as conn:
        result = first(conn)
        thread.start()
        thread.join(WAITS)  # the second runs as far as it can
    thread.join(30)
    assert not thread.is_alive()
    return result, outcome["second"]
