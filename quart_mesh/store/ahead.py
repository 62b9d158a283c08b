"""Statements run ahead for a run of units of work (PostgreSQL).

A write batch (``Database``'s group commit) often holds many units that
each run the same one-row statement: a run of plain message sends each
inserts one message. On PostgreSQL every statement is a round trip from the
writer's thread, with the driver's work around it; a batch of 16 sends was
16 of them, one after the other, while the batch's transaction stayed open.

A unit may therefore name, when it is submitted, a *statement ahead*: a
function of the connection and the items of a run of consecutive units
naming the same function, which runs them all in one multi-row statement
and keeps each item's outcome here (:func:`keep`). Each unit then runs as
it would alone, and the statement it would have run looks its own outcome
up first (:func:`take`). The unit stays the one implementation of what is
done; the run ahead only does its first statement for several units at
once, in their order (positions are taken in the order of the units, as one
by one).

Outcomes live in the connection's ``info`` for one attempt at a batch:
``Database`` clears them when that attempt ends (committed or rolled back),
and a batch run again unit by unit (a unit failed) runs nothing ahead.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from sqlalchemy.engine import Connection

__all__ = ["Ahead", "clear", "keep", "take"]

#: a statement ahead: runs the items of a run of units, keeping each one's outcome
Ahead = Callable[[Connection, list[Any]], None]

_KEY = "mesh.ahead"
_MISSING = object()


def keep(conn: Connection, key: Hashable, outcome: object) -> None:
    """Keep *outcome* for the unit that will ask for *key* in this attempt."""
    conn.info.setdefault(_KEY, {})[key] = outcome


def take(conn: Connection, key: Hashable) -> tuple[bool, Any]:
    """(True, the outcome kept for *key*), no longer kept; (False, None) if
    nothing ran ahead for it."""
    found: dict[Hashable, object] | None = conn.info.get(_KEY)
    if not found:
        return False, None
    outcome = found.pop(key, _MISSING)
    if outcome is _MISSING:
        return False, None
    return True, outcome


def clear(conn: Connection) -> None:
    """Forget every outcome kept on *conn* (its attempt at a batch ended)."""
    conn.info.pop(_KEY, None)
