"""Statements ahead (``store/ahead.py``): outcomes kept in an attempt at a
batch that was rolled back are never taken in the next attempt. The store
has one pooled connection here, so the next attempt is sure to run on the
same one. PostgreSQL only: nothing runs ahead on SQLite."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy
import trio

from quart_mesh.store import Database, ahead


async def test_outcomes_of_an_attempt_rolled_back_are_not_taken_by_the_next(
    store_url: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    if request.config.getoption("--store") != "postgresql":
        pytest.skip("nothing runs ahead on SQLite")
    create_engine = sqlalchemy.create_engine

    def one_connection(*args: Any, **kwargs: Any) -> Any:
        return create_engine(*args, **kwargs, pool_size=1, max_overflow=0)

    monkeypatch.setattr(sqlalchemy, "create_engine", one_connection)
    db = Database(store_url)
    await db.open()
    took: list[tuple[str, bool, object]] = []

    def run_ahead(conn: Any, items: list[str]) -> None:
        for item in items:
            ahead.keep(conn, item, f"kept for {item}")

    def unit(item: str) -> Any:
        def run(conn: Any) -> str:
            ran, outcome = ahead.take(conn, item)
            took.append((item, ran, outcome))
            if item == "b":
                raise ValueError("b fails")
            return item

        return run

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(db.run)
            with trio.fail_after(30):
                waits = [db.submit(unit(i), ahead=(run_ahead, i)) for i in ("a", "b", "c")]
                assert await waits[0] == "a"
                with pytest.raises(ValueError, match="b fails"):
                    await waits[1]
                assert await waits[2] == "c"
            nursery.cancel_scope.cancel()
    finally:
        await db.close()
    # the first attempt: a and b took what ran ahead, b failed, and c's
    # outcome was left over; the second (a savepoint per unit) took nothing
    assert took == [
        ("a", True, "kept for a"),
        ("b", True, "kept for b"),
        ("a", False, None),
        ("b", False, None),
        ("c", False, None),
    ]
