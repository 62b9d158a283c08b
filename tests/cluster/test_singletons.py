"""Elected singletons across real node processes on one PostgreSQL database
(docs/decisions/0035-elected-singletons.md): a managed bot runs once in the
whole mesh whichever process took the spawn, moves to a survivor when its
process is killed with SIGKILL (and the killed process's bot dies with it),
and a webhook registered through a process that does not deliver webhooks is
delivered once, by the one that does. Plus the election itself on one
database: one holder, a new election when its connection is lost, and a
takeover when it stops.

Rules (``nodes.py``): real processes and a real PostgreSQL server, every
wait bounded; state another process owns (bot processes, the receiver's
requests) is polled with ``wait_for``.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest
import trio

from quart_mesh.store import Database
from quart_mesh.store.leases import Role, run_elected
from tests.cluster.nodes import NodeProcess, database_url, open_nodes
from tests.helpers import Changes, Mesh, User, connect, wait_for
from tests.receiver import Receiver, Request

pytestmark = pytest.mark.timeout(180)

_ROLE_LINE = "this process now runs the {}"


def bot_processes(nodes: list[NodeProcess]) -> dict[int, str]:
    """The managed bot processes of *nodes* on this machine: pid -> the URL
    of the node process it serves (the one that started it)."""
    markers = {f"MESH_API_URL={node.url}".encode(): node.url for node in nodes if node.url}
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"quart_mesh.bots.runner" not in f.read():
                    continue
            with open(f"/proc/{entry}/stat", "rb") as f:
                if f.read().rpartition(b")")[2].split()[0] == b"Z":
                    continue  # exited, not reaped yet
            with open(f"/proc/{entry}/environ", "rb") as f:
                variables = f.read().split(b"\0")
        except OSError:
            continue
        for marker, url in markers.items():
            if marker in variables:
                found[int(entry)] = url
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] != b"Z"
    except OSError:
        return False


async def holder(nodes: list[NodeProcess], role: str) -> NodeProcess:
    """The live node that logged, last, that it runs *role*."""
    line = _ROLE_LINE.format(role)
    found: list[NodeProcess] = []

    async def logged() -> bool:
        found[:] = [n for n in nodes if n.process.returncode is None and line in n.log()]
        return len(found) == 1

    await wait_for(logged, seconds=30)
    return found[0]


async def test_a_managed_bot_runs_once_and_moves_when_its_process_is_killed(
    tmp_path: Path,
) -> None:
    async with open_nodes(tmp_path, 3) as nodes:
        leader = await holder(nodes, "bot supervisor")
        others = [n for n in nodes if n is not leader]
        # the spawn reaches a process that does not run the bots
        async with httpx.AsyncClient(base_url=others[0].url, timeout=20) as http:
            mesh = Mesh(http)
            owner = await mesh.setup()
            room_id = (await mesh.create_room(owner, "echoes"))["roomId"]
            r = await http.post(
                "/api/agents/spawn",
                json={"name": "echo", "type": "echo", "rooms": [room_id]},
                headers=owner.headers,
            )
            assert r.status_code == 201, r.text
            agent_id = r.json()["agentId"]

            async def status_here() -> str:
                agents = (await http.get("/api/agents", headers=owner.headers)).json()
                return str(next(a for a in agents if a["agentId"] == agent_id)["status"])

            async def running_once(on: NodeProcess) -> bool:
                bots = bot_processes(nodes)
                return list(bots.values()) == [on.url] and await status_here() == "running"

            # it runs once in the mesh, on the process that runs the bots, and
            # the process that took the spawn shows its status (from the store)
            await wait_for(lambda: running_once(leader), seconds=30)
            [first_pid] = bot_processes(nodes)

            async def in_room() -> bool:
                room = (await http.get(f"/api/rooms/{room_id}", headers=owner.headers)).json()
                return agent_id in {m["participantId"] for m in room["members"]}

            await wait_for(in_room)
            bob = await mesh.register("bob")
            await mesh.join(bob, room_id)

        # it answers (talking to the process it is connected to), once
        await _answered_once(leader.url, owner, bob, room_id, "before")
        assert list(bot_processes(nodes)) == [first_pid]

        # kill -9 the process running it: its bot dies with it, and a
        # survivor runs the bot (once) within seconds
        leader.kill()
        with trio.fail_after(30):
            await leader.exited.wait()

        async def gone() -> bool:
            return not alive(first_pid)

        await wait_for(gone, seconds=10)
        survivors = [n for n in nodes if n is not leader]
        with trio.fail_after(20):
            successor = await holder(survivors, "bot supervisor")
        async with httpx.AsyncClient(base_url=successor.url, timeout=20) as http:

            async def moved() -> bool:
                bots = bot_processes(nodes)
                if list(bots.values()) != [successor.url]:
                    return False
                agents = (await http.get("/api/agents", headers=owner.headers)).json()
                return next(a for a in agents if a["agentId"] == agent_id)["status"] == "running"

            await wait_for(moved, seconds=20)
        [second_pid] = bot_processes(nodes)
        assert second_pid != first_pid
        await _answered_once(successor.url, owner, bob, room_id, "after")
        # still exactly one, on the successor
        assert bot_processes(nodes) == {second_pid: successor.url}


async def _answered_once(url: str, owner: User, bob: User, room_id: str, word: str) -> None:
    """bob says *word* on the process at *url*; the bot (connected there)
    answers once: a marker it answers afterwards shows no second answer came."""
    async with connect(url, bob) as ws:
        await ws.send(type="send_message", roomId=room_id, content=word)
        await ws.expect("message", timeout=30, content=f"echo: {word}")
        await ws.send(type="send_message", roomId=room_id, content=f"{word} marker")
        await ws.expect("message", timeout=30, content=f"echo: {word} marker")
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
        r = await http.get(f"/api/rooms/{room_id}/messages", headers=owner.headers)
        assert r.status_code == 200, r.text
        body = r.json()
        messages = body["messages"] if isinstance(body, dict) else body
        answers = [m for m in messages if m["content"] == f"echo: {word}"]
        assert len(answers) == 1, answers


async def test_a_webhook_registered_through_another_process_is_delivered_once(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    receiver = Receiver()
    await receiver.start(nursery)
    async with open_nodes(tmp_path, 3) as nodes:
        delivering = await holder(nodes, "webhook delivery")
        other = next(n for n in nodes if n is not delivering)
        async with (
            httpx.AsyncClient(base_url=other.url, timeout=20) as here,
            httpx.AsyncClient(base_url=delivering.url, timeout=20) as there,
        ):
            owner = await Mesh(here).setup()
            r = await here.post(
                "/api/agents/bootstrap",
                json={"name": "hook", "type": "webhook", "webhookUrl": receiver.url},
                headers=owner.headers,
            )
            assert r.status_code == 201, r.text
            bot = User(r.json()["agentId"], "hook", r.json()["token"])
            room_id = (await Mesh(here).create_room(owner, "hooked"))["roomId"]
            await Mesh(here).join(bot, room_id)
            # sent through the process that delivers webhooks: it wakes at once
            # (sent through another, it wakes by the cluster bus)
            sent = []
            for text in ("one", "two"):
                r = await there.post(
                    f"/api/rooms/{room_id}/messages", json={"content": text}, headers=owner.headers
                )
                assert r.status_code == 201, r.text
                sent.append(r.json()["messageId"])

            def ids() -> list[str]:
                return [q.headers["x-mesh-delivery"] for q in receiver.requests]

            async def both() -> bool:
                return set(sent) <= set(ids())

            await wait_for(both, seconds=30)
            # a third, sent through the other process: delivered after the
            # first two (in order), so any second delivery of those is in by then
            r = await here.post(
                f"/api/rooms/{room_id}/messages", json={"content": "three"}, headers=owner.headers
            )
            assert r.status_code == 201, r.text
            third = r.json()["messageId"]

            async def third_in() -> bool:
                return third in ids()

            await wait_for(third_in, seconds=30)
            delivered = [i for i in ids() if i in (*sent, third)]
            assert sorted(delivered) == sorted([*sent, third]), delivered
            assert all(_signed_by(q) for q in receiver.requests)


def _signed_by(request: Request) -> bool:
    return request.headers.get("x-mesh-signature", "").startswith("sha256=")


# -- the election itself, on one database ---------------------------------


class Seat:
    """Who runs the probe role now, and every start and stop in order."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.starts: list[str] = []
        self.stops: list[str] = []
        self.overlaps: list[tuple[str, ...]] = []  # who ran already at a start
        self.changes = Changes()

    def component(self, name: str) -> Callable[..., Awaitable[None]]:
        async def run(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            if self.running:
                self.overlaps.append(tuple(sorted(self.running)))
            self.running.add(name)
            self.starts.append(name)
            self.changes.note()
            try:
                task_status.started()
                await trio.sleep_forever()
            finally:
                self.running.discard(name)
                self.stops.append(name)
                self.changes.note()

        return run


async def test_one_holder_and_a_new_election_when_its_connection_is_lost(
    tmp_path: Path,
) -> None:
    """The holder's lease connection is cut (``pg_terminate_backend``) while
    its process lives on: it stops its component and the role is decided
    again. Either candidate may win that (the one cut asks again at once,
    the other at its next poll), and the other may win before the holder has
    noticed (decision 0035: never two for long); so what is checked is that
    the holder stops and one runs it after. Then the holder stops (its
    process ends) and the other takes over with no overlap (a takeover after
    SIGKILL is the first test of this file)."""
    url = database_url(tmp_path / "election")
    role = Role("probe", 0x6D65_7368_0000_01FF)
    dbs = {"a": Database(url), "b": Database(url)}
    for db in dbs.values():
        await db.open()
    seat = Seat()
    scopes: dict[str, trio.CancelScope] = {}

    async def candidate(
        name: str, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        with trio.CancelScope() as scopes[name]:
            await run_elected(dbs[name], role, seat.component(name), task_status=task_status)

    try:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                await nursery.start(candidate, "a")
                assert seat.running == {"a"}  # a lone candidate runs it when it reports started
                await nursery.start(candidate, "b")
                assert seat.running == {"a"}
                # the holder's connection is cut (as by a network fault or an admin)
                await trio.to_thread.run_sync(_terminate_holder, url, role.key)
                await seat.changes.until(lambda: seat.stops == ["a"] and len(seat.running) == 1)
                (again,) = seat.running
                assert seat.starts == ["a", again]
                # the holder stops (as its process ending does): the other takes over
                other = "b" if again == "a" else "a"
                seat.overlaps.clear()
                scopes[again].cancel()
                await seat.changes.until(lambda: seat.running == {other})
                assert seat.starts == ["a", again, other]
                assert seat.overlaps == []  # the lock went with the component, not before
                nursery.cancel_scope.cancel()
    finally:
        for db in dbs.values():
            await db.close()


def _terminate_holder(url: str, key: int) -> None:
    """End the session holding advisory lock *key* (``pg_terminate_backend``)."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            pids = conn.execute(
                sa.text(
                    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
                    " AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = :key"
                ),
                {"key": key},
            ).scalars()
            for pid in list(pids):
                conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    finally:
        engine.dispose()
