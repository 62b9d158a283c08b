"""``GET /api/health`` asks the store at most once per
``STORE_ANSWER_MAX_AGE`` seconds, and still turns unhealthy within that
time once the store stops answering (docs/decisions/0041-cheap-health-checks.md).

The check's timing runs on an autojump clock with the node stood in for
(the store runs in threads, which autojump cannot see); the app test uses
the real node and store, with a short maximum age.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
import trio
from trio.testing import MockClock, wait_all_tasks_blocked

from quart_mesh import MeshApp
from quart_mesh.api import health
from quart_mesh.api.health import STORE_ANSWER_MAX_AGE, StoreAnswer, StoreCheck
from quart_mesh.disk import DiskSpace
from quart_mesh.errors import Unavailable
from quart_mesh.faults import Faults

if TYPE_CHECKING:
    from quart.typing import TestClientProtocol

pytestmark = pytest.mark.timeout(30)


class FakeNode:
    """What the check uses of a node besides its store: ``running``,
    ``stopping``, ``started_at``, ``disk``, ``uploads_disk``, ``faults``, ``bus``, ``db.backend``,
    ``db.disk_full()``;
    ``ask()`` stands in for the store (taking ``delay`` seconds)."""

    def __init__(self, tmp: Path) -> None:
        self.reachable = True
        self.running = True
        self.started_at = 0.0
        self.delay = 0.1
        self.asked: list[float] = []
        self.disk = DiskSpace(tmp, 0)
        self.uploads_disk = None
        self.faults = Faults()
        self.bus = None
        self.db = SimpleNamespace(backend="sqlite", disk_full=lambda: False)

    @property
    def stopping(self) -> bool:
        return not self.running

    async def ask(self) -> StoreAnswer:
        self.asked.append(trio.current_time())
        await trio.sleep(self.delay)
        reachable = self.reachable
        return StoreAnswer(reachable, reachable, True, "" if reachable else "gone")


def check_of(node: FakeNode) -> StoreCheck:
    return StoreCheck(node, node.ask)  # type: ignore[arg-type]


@pytest.fixture
def fake(tmp_path: Path) -> FakeNode:
    return FakeNode(tmp_path)


async def test_concurrent_checks_share_one_query(autojump_clock: MockClock, fake: FakeNode) -> None:
    node = fake
    check = check_of(node)
    results: list[dict[str, Any]] = []

    async def one() -> None:
        results.append(await check.health())

    async with trio.open_nursery() as nursery:
        for _ in range(20):
            nursery.start_soon(one)
    assert len(node.asked) == 1
    assert len(results) == 20
    assert all(
        r["ok"] and r["storage"] == {"ok": True, "writable": True, "backend": "sqlite"}
        for r in results
    )


async def test_the_answer_is_reused_only_for_its_max_age(
    autojump_clock: MockClock, fake: FakeNode
) -> None:
    node = fake
    check = check_of(node)
    await check.health()
    sent = node.asked[-1]
    # the age counts from when the store was asked, not from its answer
    await trio.sleep_until(sent + STORE_ANSWER_MAX_AGE - 0.01)
    await check.health()
    assert len(node.asked) == 1
    await trio.sleep_until(sent + STORE_ANSWER_MAX_AGE)
    await check.health()
    assert len(node.asked) == 2


async def test_a_store_that_stops_answering_is_unhealthy_within_the_max_age(
    autojump_clock: MockClock, fake: FakeNode
) -> None:
    node = fake
    check = check_of(node)
    assert (await check.health())["ok"] is True
    node.reachable = False
    went_down = trio.current_time()
    while (result := await check.health())["ok"]:
        await trio.sleep(0.01)
    # the last good answer was asked for before the store went down
    assert trio.current_time() - went_down <= STORE_ANSWER_MAX_AGE + node.delay
    assert result["storage"]["ok"] is False
    node.reachable = True
    await trio.sleep(STORE_ANSWER_MAX_AGE)
    assert (await check.health())["ok"] is True


async def test_a_stopped_node_is_unhealthy_at_once_and_uptime_is_current(
    autojump_clock: MockClock, fake: FakeNode
) -> None:
    node = fake
    check = check_of(node)
    first = await check.health()
    node.running = False
    second = await check.health()
    assert len(node.asked) == 1
    assert (first["ok"], second["ok"]) == (True, False)
    assert second["storage"]["ok"] is True


async def test_a_cancelled_query_is_asked_again_by_a_waiter(
    autojump_clock: MockClock, fake: FakeNode
) -> None:
    node = fake
    check = check_of(node)
    results: list[dict[str, Any]] = []

    async def asker(*, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            results.append(await check.health())

    async with trio.open_nursery() as nursery:
        first = await nursery.start(asker)
        await wait_all_tasks_blocked()  # the first is asking
        await nursery.start(asker)
        await wait_all_tasks_blocked()  # the second waits for its answer
        first.cancel()  # its client went away
    assert len(node.asked) == 2
    assert len(results) == 1
    assert results[0]["ok"] is True


async def test_the_app_turns_unhealthy_when_the_store_stops_answering(
    app: MeshApp, client: TestClientProtocol, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(health, "STORE_ANSWER_MAX_AGE", 0.2)
    db = app.node.db
    pings = 0
    reachable = True
    read = db.read

    async def counted(fn: Any) -> Any:
        nonlocal pings
        pings += 1
        if not reachable:
            raise Unavailable("the storage backend is unavailable", "storage_unavailable")
        return await read(fn)

    monkeypatch.setattr(db, "read", counted)
    with trio.fail_after(10):
        for _ in range(5):
            r = await client.get("/api/health")
            assert r.status_code == 200
            body = await r.get_json()
            assert body["ok"] is True
            assert body["storage"]["ok"] is True
        assert pings == 1  # within the max age: asked once
        reachable = False
        went_down = trio.current_time()
        while (r := await client.get("/api/health")).status_code == 200:
            await trio.sleep(0.02)
        assert trio.current_time() - went_down < 0.2 + 1  # the max age, and some slack
        assert r.status_code == 503
        body = await r.get_json()
        assert (body["ok"], body["storage"]["ok"]) == (False, False)
        assert set(body) == {"ok", "version", "uptime", "storage", "reasons"}
        assert [reason["code"] for reason in body["reasons"]] == ["store_unreachable"]
        reachable = True
        await trio.sleep(0.2)
        assert (await client.get("/api/health")).status_code == 200


def test_the_max_age_is_a_second() -> None:
    assert math.isclose(STORE_ANSWER_MAX_AGE, 1.0)
