"""What differs between SQLite and PostgreSQL, in one place.

Several processes may write to one PostgreSQL database, each with its own
group-commit writer (``docs/decisions/0032-postgresql-store.md``). Three
things make that safe here:

- :func:`insert` builds ``INSERT ... ON CONFLICT`` for either backend, so a
  row two writers add at once is added once, without select-then-insert.
- :func:`hold_write_lock` serializes the writes that decide by counting or
  checking first (a cap on pins, presence's "any session left"): a
  transaction-level advisory lock held until commit. Every write batch
  but one of quick units only (message sends, sign-ins) takes it first
  (``Database``), so those writes run one after another across processes,
  as on SQLite; quick batches, whose checks are in their own statements,
  commit concurrently. Cursor positions need no lock: they are taken in
  blocks, and readers stop where a slower transaction may still commit one
  (``blocks.py``). SQLite has one writer at a time and needs nothing.
- :func:`translate` turns a constraint violation that escaped a unit of
  work (a row referred to was deleted meanwhile, a row was added twice at
  once) into a client error instead of a 500.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from ..errors import Conflict, MeshError, NotFound

__all__ = [
    "MIGRATION_LOCK",
    "WRITE_LOCK",
    "Statement",
    "hold_write_lock",
    "holds_write_lock",
    "in_statements",
    "insert",
    "insert_new",
    "is_retryable",
    "one_snapshot",
    "translate",
]

#: advisory lock keys (64-bit, fixed): "mesh" and a number
MIGRATION_LOCK = 0x6D65_7368_0000_0001
WRITE_LOCK = 0x6D65_7368_0000_0002

# conn.info key: the root transaction that holds WRITE_LOCK outside any savepoint
_HELD = "mesh_write_lock"

#: items (ids, rows) one statement takes at most: a statement's parameters
#: are bounded (psycopg 65,535; SQLite 32,766), and a row may take several
STATEMENT_ITEMS = 1000

_T = TypeVar("_T")


def in_statements(items: Sequence[_T]) -> Iterator[Sequence[_T]]:
    """*items* in runs of at most :data:`STATEMENT_ITEMS`, a statement each."""
    for start in range(0, len(items), STATEMENT_ITEMS):
        yield items[start : start + STATEMENT_ITEMS]


def insert(conn: Connection, table: Table) -> postgresql.Insert | sqlite.Insert:
    """``table.insert()`` of the connection's dialect, which has
    ``on_conflict_do_nothing`` and ``on_conflict_do_update`` (same arguments
    on both backends)."""
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


def insert_new(
    conn: Connection,
    query: postgresql.Insert | sqlite.Insert,
    *,
    index_elements: list[str] | None = None,
) -> bool:
    """Run *query* (an :func:`insert`) unless its row is there already
    (``ON CONFLICT DO NOTHING``, on *index_elements* or any unique key),
    also when another writer adds it at the same moment; True if this one
    added it. Told by ``RETURNING``: the driver reports no row count for an
    INSERT here."""
    key = next(iter(query.table.primary_key.columns))  # type: ignore[attr-defined]
    added = query.on_conflict_do_nothing(index_elements=index_elements).returning(key)
    return conn.execute(added).first() is not None


class Statement:
    """A hot statement, run on the driver's own connection.

    SQLAlchemy's execution path costs about 40 µs per statement here
    (compiled-cache lookup, result wrapping), several times what SQLite
    takes to run a one-row insert (about 5 µs, measured with
    ``sqlite3.Connection.execute`` against ``Connection.execute(text(...))``):
    the statements every message send runs are executed directly, inside
    the same transaction (the driver's connection is the one SQLAlchemy
    holds). Written once with ``:name`` parameters (no ``::`` casts); errors
    are raised as SQLAlchemy's (``IntegrityError``, ``OperationalError``),
    as any other statement's, so the store handles them alike.
    """

    __slots__ = ("_postgresql", "sql")

    def __init__(self, sql: str) -> None:
        if "%" in sql:  # psycopg's placeholders: a literal one would need escaping
            raise ValueError("a Statement may not contain '%'")
        self.sql = sql
        self._postgresql = re.sub(r"(?<!:):(\w+)", r"%(\1)s", sql)

    def run(self, conn: Connection, params: dict[str, Any]) -> Any:
        """Execute with *params*; the driver's cursor (``fetchone()``, ...)."""
        dialect = conn.dialect
        sql = self._postgresql if dialect.name == "postgresql" else self.sql
        driver = conn.connection.driver_connection
        assert driver is not None
        try:
            return driver.execute(sql, params)
        except dialect.loaded_dbapi.Error as exc:
            raise DBAPIError.instance(
                sql, params, exc, dialect.loaded_dbapi.Error, dialect=dialect
            ) from exc


def hold_write_lock(conn: Connection) -> None:
    """Call before a check whose outcome a concurrent write could change (a
    count against a cap): on PostgreSQL, wait for and take the mesh's write
    lock until the transaction ends (a no-op when the batch took it first).

    Taken once per transaction: a unit of work that runs inside a savepoint
    takes it again (cheaply, it is re-entrant), because rolling back to the
    savepoint releases a lock taken inside it.
    """
    if conn.dialect.name != "postgresql":
        return
    root = conn.get_transaction()
    if root is not None and conn.info.get(_HELD) is root:
        return
    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({WRITE_LOCK})")
    if conn.get_nested_transaction() is None:
        conn.info[_HELD] = root


def one_snapshot(conn: Connection) -> None:
    """Call first in a read of several statements whose answers must agree:
    every statement after it sees the database as it was at the first. On
    PostgreSQL each statement of a READ COMMITTED transaction sees what
    committed before it began, so a write committed between two of them
    shows in the second only (``REPEATABLE READ`` for this transaction); a
    SQLite read transaction is one snapshot already."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")


def holds_write_lock(conn: Connection) -> bool:
    """Whether this transaction took the write lock outside any savepoint."""
    root = conn.get_transaction()
    return root is not None and conn.info.get(_HELD) is root


# SQLSTATE codes (PostgreSQL) and extended result codes (SQLite) of the
# violations a concurrent writer can cause
_PG_FOREIGN_KEY, _PG_UNIQUE = "23503", "23505"
_SQLITE_FOREIGN_KEY = 787
_SQLITE_UNIQUE = {1555, 2067}  # PRIMARYKEY, UNIQUE
_PG_RETRY = {"40001", "40P01"}  # serialization failure, deadlock detected

# the table a foreign key points at (schema's naming convention
# ``fk_<table>_<column>_<referred table>``) -> the code a client sees
_GONE = {
    "participants": ("participant", "participant_not_found"),
    "rooms": ("room", "room_not_found"),
    "messages": ("message", "message_not_found"),
    "uploads": ("upload", "upload_not_found"),
    "apps": ("app", "app_not_found"),
}


def translate(exc: IntegrityError) -> MeshError | None:
    """The client error for a constraint violation that escaped a unit of
    work, or ``None`` if it is not one a concurrent writer explains (a bug).

    A foreign-key violation means a row the write refers to was deleted
    meanwhile: :class:`NotFound`. A unique violation means another writer
    added the same row at once: :class:`Conflict`.
    """
    orig: Any = exc.orig
    sqlstate = getattr(orig, "sqlstate", None)
    code = getattr(orig, "sqlite_errorcode", None)
    if sqlstate == _PG_FOREIGN_KEY or code == _SQLITE_FOREIGN_KEY:
        constraint = getattr(getattr(orig, "diag", None), "constraint_name", None) or ""
        for table, (what, error_code) in _GONE.items():
            if constraint.endswith("_" + table):
                return NotFound(f"that {what} no longer exists", error_code)
        return NotFound("something this request refers to no longer exists", "not_found")
    if sqlstate == _PG_UNIQUE or code in _SQLITE_UNIQUE:
        return Conflict("a concurrent change conflicts with this one: try again", "conflict")
    return None


def is_retryable(exc: OperationalError) -> bool:
    """A deadlock or serialization failure: the transaction may simply run again."""
    return getattr(exc.orig, "sqlstate", None) in _PG_RETRY
