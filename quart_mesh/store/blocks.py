"""Positions that commit concurrently, and how far every one is final
(PostgreSQL; ``docs/decisions/0080-concurrent-writers.md``).

Several processes write to one PostgreSQL database at once, and their
transactions commit in any order. Cursor positions (``messages.seq``,
``relay_outbox.seq``) and stream positions (``cluster_stream.position``)
must still be read in an order a reader can trust: a reader at position
*n* must never pass a position that a slower transaction fills later.
Instead of making transactions commit in the order of their positions (one
lock held to commit, as before), readers stop where that could happen —
Synapse's "persisted up to" position, with PostgreSQL's lock table as the
register of what is in flight:

- A transaction that needs positions takes a **block** (``mesh_reserve()``,
  migration ``0034_stream_blocks``): it reads the ``mesh_blocks``
  sequence's value *v*, takes the shared advisory lock ``BASE + v`` (held
  until it commits or rolls back: an announcement that its block is above
  *v*), then ``nextval``. Its positions are ``block << SHIFT | n``
  (``mesh_position()``, the columns' default), its stream row is at
  ``block``: every position of one transaction is in one block, and the
  blocks of two transactions order all their positions.
- :func:`final_block` (``mesh_final_block()``) reads the sequence, then the
  announcements still held: every block at or below the smaller of the
  value and the lowest announcement is final (committed and visible to a
  statement that starts afterwards, or rolled back). A transaction that
  took its block after the sequence was read announced it first, above
  that value; one that took it before and is still open holds an
  announcement at or below it. A process that dies mid-transaction loses
  its connection, and PostgreSQL rolls it back and drops its locks.

Readers hand out cursors and deliver only up to :func:`final_seq` (read in
a statement before the rows, so that every final row is visible to the
read). On SQLite there is one writer at a time: positions are assigned in
commit order, and every committed position is final.

The block and its counter live in transaction-local settings
(``mesh.block``, ``mesh.next``): a savepoint rolled back undoes them with
the announcement it took, so a transaction never keeps positions of a block
whose announcement it lost.
"""

from __future__ import annotations

import threading
import weakref

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import Pool

__all__ = ["SHIFT", "block_of", "final_block", "final_seq", "last_seq_of", "note_final"]

#: bits of a position below its block (a transaction may take 2**SHIFT positions)
SHIFT = 20


def block_of(seq: int) -> int:
    """The block of a position written on PostgreSQL."""
    return seq >> SHIFT


def last_seq_of(block: int) -> int:
    """The highest position of *block*."""
    return ((block + 1) << SHIFT) - 1


#: per database (its connection pool, which the engine shares with the
#: engines derived from it for writes): the highest block known final so far. What is
#: final stays final, but ``mesh_final_block()`` may answer lower than it did
#: a moment ago (a transaction that read the sequence and had not yet
#: announced itself then, has now): so that two bounds read one after the
#: other in a process never go back — a subscription starting after the
#: bus's position and the backlog read up to a later bound — each answer is
#: raised to the highest before it
_floors: weakref.WeakKeyDictionary[Pool, int] = weakref.WeakKeyDictionary()
_floors_lock = threading.Lock()


def note_final(engine: Engine, block: int) -> None:
    """*block*, and every one below it, is known final (the bus applied it)."""
    with _floors_lock:
        if block > _floors.get(engine.pool, 0):
            _floors[engine.pool] = block


def final_block(conn: Connection, *, exclude_self: bool = False) -> int:
    """The newest block at or below which every block is final, on
    PostgreSQL; never lower than one this process knew final before.
    *exclude_self*: leave out this connection's own announcement (a writer
    telling what is final besides itself: then not kept as known final)."""
    found = int(
        conn.exec_driver_sql(
            "SELECT mesh_final_block(%(exclude)s)", {"exclude": exclude_self}
        ).scalar_one()
    )
    pool = conn.engine.pool
    with _floors_lock:
        floor = _floors.get(pool, 0)
        if found > floor and not exclude_self:
            _floors[pool] = found
    return max(found, floor)


def final_seq(conn: Connection) -> int | None:
    """The newest cursor position at or below which every position is
    final: a read of rows up to it that starts after this call sees all of
    them, and no row below it commits later. ``None`` on SQLite (every
    committed position is final). Call before the read it bounds.

    Inside a write transaction its own positions count as final: it sees
    its own rows, and a cursor it stores commits with them."""
    if conn.dialect.name != "postgresql":
        return None
    return last_seq_of(final_block(conn, exclude_self=True))
