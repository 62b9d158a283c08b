"""Sends queued together are stored as one by one (``store/ahead.py``).

On PostgreSQL a run of plain posts in one write batch is inserted by one
statement ahead of the units (``messages.post_messages``); each unit then
takes its own row. Whatever ran ahead, the outcome must be the one-by-one
outcome: cursors in the order sends were queued (a unit of another kind
between two runs included), the same refusals (a sender removed from the
room by a unit queued just before), a DM's post through the full path, a
retried ``clientId`` answered with the first message. On SQLite nothing
runs ahead, and the same test checks the same outcome.

A real node on the suite's store (``open_node``); sends are queued with
``Messages.submit_send`` without a checkpoint between them, so the writer
takes them as one batch.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
import trio

from quart_mesh import Actor, MessagePosted, Node, Settings, open_node
from quart_mesh.errors import Conflict, Forbidden
from quart_mesh.store import ahead
from quart_mesh.store import messages as messages_repo
from quart_mesh.store import rooms as rooms_repo
from tests.store import rows

PASSWORD = "a long passphrase"


@dataclass
class _Mesh:
    node: Node
    owner: Actor
    alice: Actor
    bob: Actor
    town: str
    dm: str


@asynccontextmanager
async def _running(data_dir: Path) -> AsyncIterator[_Mesh]:
    """A node with an owner, alice and bob in the default room, and a DM
    between alice and bob."""
    async with (
        open_node(Settings(data_dir=data_dir)) as node,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(node.run)
        accounts = node.accounts
        signed = await accounts.init_setup(name="owner", password=PASSWORD, mesh_name="M")
        owner = accounts.actor_for(signed.participant)
        town = accounts.setup_status()["defaultRoomId"]
        assert isinstance(town, str)
        alice = accounts.actor_for((await accounts.register("alice", PASSWORD)).participant)
        bob = accounts.actor_for((await accounts.register("bob", PASSWORD)).participant)
        for actor in (alice, bob):
            await node.rooms.join(actor, town)
        dm, _ = await node.dms.open(alice, bob.participant_id)
        yield _Mesh(node, owner, alice, bob, town, dm.room.room_id)
        nursery.cancel_scope.cancel()


async def _outcomes(waits: list[Awaitable[Any]]) -> list[Any]:
    """Each awaited in turn: its result, or the code of its refusal."""
    results: list[Any] = []
    with trio.fail_after(30):
        for wait in waits:
            try:
                results.append(await wait)
            except (Forbidden, Conflict) as refused:
                results.append(refused.code)
    return results


@dataclass
class _Spy:
    """What ran ahead: each run's contents, each outcome kept (by message
    id), and any error the statement ahead raised (the batch then ran
    again unit by unit, which would hide a mistake in it)."""

    runs: list[list[str]] = field(default_factory=list)
    kept: dict[str, Any] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> _Spy:
    found = _Spy()
    post_messages, keep = messages_repo.post_messages, ahead.keep

    def counted(conn: Any, posts: list[Any]) -> None:
        found.runs.append([post.content for post in posts])
        try:
            post_messages(conn, posts)
        except Exception as error:
            found.errors.append(error)
            raise

    def kept_too(conn: Any, key: Any, outcome: object) -> None:
        found.kept[key] = outcome
        keep(conn, key, outcome)

    monkeypatch.setattr(messages_repo, "post_messages", counted)
    monkeypatch.setattr(ahead, "keep", kept_too)
    return found


async def test_sends_queued_together_are_stored_as_one_by_one(
    tmp_path: Path, spy: _Spy, request: pytest.FixtureRequest
) -> None:
    postgresql = request.config.getoption("--store") == "postgresql"
    runs, kept = spy.runs, spy.kept
    async with _running(tmp_path / "data") as mesh:
        node, alice, bob, town = mesh.node, mesh.alice, mesh.bob, mesh.town
        send = node.messages.submit_send
        async with node.events(alice) as stream:
            # queued in one go (no checkpoint between): one batch, in which
            # no unit fails, so its first attempt commits
            sent = await _outcomes(
                [
                    send(alice, town, "one", client_id="c1"),
                    send(bob, town, "two"),
                    send(alice, town, "three"),
                    send(alice, town, "again", client_id="c1"),  # a retry of "one"
                    send(alice, town, "to bob", to=bob.participant_id),  # not plain
                    send(bob, town, "four"),
                    send(alice, mesh.dm, "in the dm"),  # plain, but a DM: the full path
                    send(bob, town, "five"),
                    send(alice, town, "six"),
                ]
            )
            one, two, three, again, to_bob, four, in_dm, five, six = sent
            # the retry is answered with the first message
            assert (again.message_id, again.content, again.seq) == (one.message_id, "one", one.seq)
            assert in_dm.room_id == mesh.dm
            # cursors in the order the sends were queued, the DM's included
            stored = [one, two, three, to_bob, four, in_dm, five, six]
            seqs = [m.seq for m in stored]
            assert seqs == sorted(seqs)
            assert len(set(seqs)) == len(seqs)

            # the room's history and the live events agree with that order
            history = await node.messages.list_messages(mesh.owner, town, limit=50)
            wanted = ["one", "two", "three", "to bob", "four", "five", "six"]
            assert [m.content for m in history if m.content in wanted] == wanted
            live: list[tuple[str, int]] = []
            with trio.fail_after(30):
                async for event in stream:
                    if isinstance(event, MessagePosted):
                        live.append((event.message.content, event.message.seq))
                        if event.message.content == "six":
                            break
            assert [c for c, _ in live] == [
                *["one", "two", "three", "to bob", "four"],
                *["in the dm", "five", "six"],
            ]
            assert [seq for _, seq in live] == sorted(seq for _, seq in live)

    if postgresql:
        # the plain posts ran ahead, a run at a time, split by the units of
        # other kinds; the second run was cut at the DM's post: it and the
        # posts after it ran their own statements
        assert runs == [
            ["one", "two", "three", "again"],
            ["four", "in the dm", "five", "six"],
        ]
        # inserted ahead: "one" to "four" ("again" was kept as None: its
        # clientId was taken by "one"); what was inserted ahead is what was
        # stored, so the batch's first attempt committed (not a retry)
        by_content = {m.content: m for m in stored}
        inserted = {
            content: kept[m.message_id][0]
            for content, m in by_content.items()
            if kept.get(m.message_id) is not None
        }
        assert inserted == {c: by_content[c].seq for c in ("one", "two", "three", "four")}
        assert list(kept.values()).count(None) == 1
    else:
        assert runs == []
        assert kept == {}
    assert spy.errors == []


async def test_a_run_is_cut_at_its_first_dm_post(
    tmp_path: Path, spy: _Spy, request: pytest.FixtureRequest
) -> None:
    """Two DM posts in a run: it is cut at the first; a run that starts with
    one inserts nothing ahead. Positions as one by one either way."""
    async with _running(tmp_path / "data") as mesh:
        node, alice, town, dm = mesh.node, mesh.alice, mesh.town, mesh.dm
        send = node.messages.submit_send
        first = await _outcomes(
            [
                send(alice, town, "p1"),
                send(alice, dm, "d1"),
                send(alice, town, "p2"),
                send(alice, dm, "d2"),
                send(alice, town, "p3"),
            ]
        )
        second = await _outcomes(
            [send(alice, dm, "d0"), send(alice, town, "q1"), send(alice, town, "q2")]
        )
    for sent in (first, second):
        seqs = [m.seq for m in sent]
        assert seqs == sorted(seqs)
    assert spy.errors == []
    if request.config.getoption("--store") == "postgresql":
        assert spy.runs == [["p1", "d1", "p2", "d2", "p3"], ["d0", "q1", "q2"]]
        # only p1 came before the first cut; nothing before the second
        assert list(spy.kept) == [first[0].message_id]


async def test_a_sender_who_left_and_came_back_meanwhile_keeps_the_order(
    tmp_path: Path, spy: _Spy, request: pytest.FixtureRequest
) -> None:
    """Bob's membership row is deleted by a transaction that is still open
    when the run's statement reaches it; that transaction then adds him
    back and commits. The statement waited for the row and found it gone:
    bob's post is where the run is cut, and it takes its position after
    alice's first post and before her second, as one by one."""
    if request.config.getoption("--store") != "postgresql":
        pytest.skip("a concurrent writer: PostgreSQL (on SQLite one writes at a time)")
    async with _running(tmp_path / "data") as mesh:
        node, alice, bob, town = mesh.node, mesh.alice, mesh.bob, mesh.town
        engine = sqlalchemy.create_engine(node.db.url)
        params = {"room": town, "who": bob.participant_id}
        try:
            with engine.connect() as side:
                side.begin()
                side.execute(
                    sqlalchemy.text(
                        "DELETE FROM room_members WHERE room_id = :room AND participant_id = :who"
                    ),
                    params,
                )
                send = node.messages.submit_send
                waits = [send(alice, town, "a1"), send(bob, town, "b"), send(alice, town, "a2")]
                with trio.fail_after(30):
                    while not await trio.to_thread.run_sync(rows.lock_waiters, engine):
                        await trio.sleep(0.01)
                side.execute(
                    sqlalchemy.text(
                        "INSERT INTO room_members (room_id, participant_id, joined_at, hidden)"
                        " VALUES (:room, :who, 1, false)"
                    ),
                    params,
                )
                side.commit()
                a1, b, a2 = await _outcomes(waits)
        finally:
            engine.dispose()
        assert a1.seq < b.seq < a2.seq
        history = await node.messages.list_messages(mesh.owner, town, limit=50)
        assert [m.content for m in history][-3:] == ["a1", "b", "a2"]
    assert spy.runs == [["a1", "b", "a2"]]
    assert list(spy.kept) == [a1.message_id]
    assert spy.errors == []


async def test_a_post_refused_in_the_store_fails_alone_and_the_order_holds(
    tmp_path: Path,
) -> None:
    """A sender removed by a unit queued just before its post (the post was
    checked before the removal committed) is refused by the store; the
    batch runs again unit by unit and the other posts keep their order."""
    async with _running(tmp_path / "data") as mesh:
        node, alice, bob, town = mesh.node, mesh.alice, mesh.bob, mesh.town
        send = node.messages.submit_send
        first, second, removed, refused, last = await _outcomes(
            [
                send(alice, town, "first"),
                send(bob, town, "second"),
                node.db.submit(
                    lambda conn: rooms_repo.remove_member(conn, town, bob.participant_id)
                ),
                send(bob, town, "refused"),
                send(alice, town, "last"),
            ]
        )
        assert removed is True
        assert refused == "not_member"
        assert first.seq < second.seq < last.seq
        history = await node.messages.list_messages(mesh.owner, town, limit=50)
        assert [m.content for m in history][-3:] == ["first", "second", "last"]


async def test_a_batch_run_again_unit_by_unit_stores_each_post_once(tmp_path: Path) -> None:
    """A unit that fails rolls its batch back, and the batch runs again with
    a savepoint per unit and nothing ahead: the posts are inserted again
    (what ran ahead in the first attempt is forgotten with it), each once."""
    async with _running(tmp_path / "data") as mesh:
        node, owner, town = mesh.node, mesh.owner, mesh.town

        def fails(conn: Any) -> None:
            raise ValueError("this unit fails")

        send = node.messages.submit_send
        with trio.fail_after(30):
            waits = [send(owner, town, "one"), send(owner, town, "two")]
            failing = node.db.submit(fails)
            waits += [send(owner, town, "three"), send(owner, town, "four")]
            stored = [await wait for wait in waits]
            with pytest.raises(ValueError, match="this unit fails"):
                await failing
        history = await node.messages.list_messages(owner, town, limit=50)
        found = [(m.content, m.seq, m.message_id) for m in history]
        assert [f for f in found if f[0] in ("one", "two", "three", "four")] == [
            (m.content, m.seq, m.message_id) for m in stored
        ]


async def test_any_text_goes_through_a_run_unchanged(
    tmp_path: Path, spy: _Spy, request: pytest.FixtureRequest
) -> None:
    """The run's posts travel as one JSON text: quotes, backslashes, line
    and paragraph separators, emoji, JSON and SQL look-alikes, and a
    clientId or none, are stored as sent (the one-row statement's values)."""
    contents = [
        'say "hi" \\ there',
        "line\nbreak\ttab \u2028 \u2029",
        "😀 ünïcödé 漢字 \U0001f3f3\ufe0f\u200d\U0001f308",
        "{\"k\": [1, null]} NULL 'quoted' %s :name ->> 0",
        "   padded   ",
    ]
    async with _running(tmp_path / "data") as mesh:
        node, alice, town = mesh.node, mesh.alice, mesh.town
        send = node.messages.submit_send
        sent = await _outcomes(
            [
                send(alice, town, content, client_id=client_id)
                for content, client_id in zip(
                    contents, ["NULL", None, "c-1", None, "null"], strict=True
                )
            ]
        )
        assert [m.content for m in sent] == contents
        assert [m.client_id for m in sent] == ["NULL", None, "c-1", None, "null"]
        history = await node.messages.list_messages(mesh.owner, town, limit=50)
        assert [(m.content, m.client_id) for m in history][-5:] == [
            (m.content, m.client_id) for m in sent
        ]
        # the search text went with it (PostgreSQL: the insert's vector)
        page = await node.search.search(mesh.owner, "ünïcödé")
        assert [found.message.message_id for found in page.results] == [sent[2].message_id]
    if request.config.getoption("--store") == "postgresql":
        # all five went ahead, in one run
        assert spy.runs == [contents]
        assert [spy.kept[m.message_id][0] for m in sent] == [m.seq for m in sent]
    assert spy.errors == []
