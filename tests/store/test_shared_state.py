"""The shared security state's repositories (decision 0036) on the suite's
store: GCRA buckets counted by one upsert, challenges consumed once,
nonces added once; and, with two connections at once, no hit or use lost.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import sqlalchemy as sa
import trio

from quart_mesh.store import Database, challenges, limits, nonces
from quart_mesh.store import schema as s

T = TypeVar("T")


async def open_store(store_url: str) -> Database:
    db = Database(store_url)
    await db.open()
    return db


async def test_buckets_count_like_gcra(store_url: str) -> None:
    db = await open_store(store_url)
    try:
        # 2 per 10 s in bursts of 3: an interval of 5 s, 10 s of credit
        def hit(key: str, now: int) -> Callable[[sa.Connection], int]:
            return lambda conn: limits.take(
                conn, "login_name", key, now=now, interval=5000, tolerance=10_000
            )

        t = 1_700_000_000_000
        assert [await db.write(hit("bob", t)) for _ in range(3)] == [0, 0, 0]
        assert await db.write(hit("bob", t)) == 5000  # the next one is in 5 s
        assert await db.write(hit("bob", t + 1000)) == 4000  # a refusal counts nothing
        assert await db.write(hit("alice", t)) == 0  # another key, another bucket
        assert await db.write(hit("bob", t + 5000)) == 0
        assert await db.write(hit("bob", t + 5000)) == 5000
        # long keys share a bucket through their hash
        long = "x" * 500
        assert limits.storage_key(long) != long
        assert len(limits.storage_key(long)) <= 255
        for _ in range(3):
            await db.write(hit(long, t))
        assert await db.write(hit(long, t)) > 0
        # full buckets go; the others stay
        assert await db.write(lambda conn: limits.prune(conn, t + 15_000)) == 2
        left = await db.read(lambda conn: conn.execute(sa.select(s.rate_counters.c.key)).all())
        assert [row.key for row in left] == ["bob"]
    finally:
        await db.close()


async def test_challenges_are_consumed_once(store_url: str) -> None:
    db = await open_store(store_url)
    try:
        await db.write(lambda conn: challenges.issue(conn, "c1", "did:key:a", 5000))
        first = await db.write(lambda conn: challenges.consume(conn, "c1"))
        assert first == challenges.Consumed("did:key:a", 5000)
        again = await db.write(lambda conn: challenges.consume(conn, "c1"))
        assert again is challenges.Refused.USED
        never = await db.write(lambda conn: challenges.consume(conn, "c2"))
        assert never is challenges.Refused.UNKNOWN
        for n in range(10):
            await db.write(lambda conn, n=n: challenges.issue(conn, f"k{n}", "did:key:b", n))
        # the 4 that expire last (c1 among them) stay
        assert await db.write(lambda conn: challenges.keep_newest(conn, 4)) == 7
        assert await db.write(lambda conn: challenges.prune(conn, 8)) == 1
        kept = await db.read(
            lambda conn: conn.execute(sa.select(s.did_challenges.c.challenge)).scalars().all()
        )
        assert sorted(kept) == ["c1", "k8", "k9"]
    finally:
        await db.close()


async def test_nonces_are_added_once(store_url: str) -> None:
    db = await open_store(store_url)
    try:
        assert await db.write(lambda conn: nonces.add(conn, "did:key:a", "n" * 16, 100))
        assert not await db.write(lambda conn: nonces.add(conn, "did:key:a", "n" * 16, 100))
        assert await db.write(lambda conn: nonces.add(conn, "did:key:b", "n" * 16, 200))
        assert await db.read(nonces.count) == 2
        assert await db.write(lambda conn: nonces.prune(conn, 150)) == 1
        assert await db.read(nonces.count) == 1
    finally:
        await db.close()


def _at_once(db: Database, work: Callable[[sa.Connection], T], threads: int) -> list[T]:
    """Run *work* in *threads* transactions of their own, started together."""
    barrier = threading.Barrier(threads)
    results: list[T] = []
    lock = threading.Lock()

    def run() -> None:
        with db.engine.connect() as conn:
            barrier.wait(timeout=10)
            with conn.begin():
                result = work(conn)
            with lock:
                results.append(result)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
    return results


async def test_concurrent_writers_lose_nothing(store_url: str) -> None:
    """Several transactions at once (processes, on PostgreSQL): of 8 hits on
    a bucket of 3, exactly 3 are allowed; of 8 uses of one challenge and 8
    deliveries of one nonce, exactly one succeeds."""
    db = await open_store(store_url)
    try:
        await db.write(lambda conn: challenges.issue(conn, "c", "did:key:a", 5000))

        def everything(conn: sa.Connection) -> tuple[int, object, bool]:
            wait = limits.take(conn, "login_name", "bob", now=1000, interval=5, tolerance=10)
            return wait, challenges.consume(conn, "c"), nonces.add(conn, "d", "n" * 16, 9)

        with trio.fail_after(60):
            results = await trio.to_thread.run_sync(_at_once, db, everything, 8)
        assert len(results) == 8
        assert sum(wait == 0 for wait, _, _ in results) == 3
        assert sum(isinstance(used, challenges.Consumed) for _, used, _ in results) == 1
        assert sum(added for _, _, added in results) == 1
    finally:
        await db.close()
