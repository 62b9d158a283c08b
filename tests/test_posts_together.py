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

from pathlib import Path
from typing import Any

import pytest
import trio

from quart_mesh import MessagePosted, Settings, open_node
from quart_mesh.errors import Forbidden
from quart_mesh.store import messages as messages_repo
from quart_mesh.store import rooms as rooms_repo

PASSWORD = "a long passphrase"


async def test_sends_queued_together_are_stored_as_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    postgresql = request.config.getoption("--store") == "postgresql"
    runs: list[list[str]] = []
    post_messages = messages_repo.post_messages

    def counted(conn: Any, posts: list[Any]) -> None:
        runs.append([post.content for post in posts])
        post_messages(conn, posts)

    monkeypatch.setattr(messages_repo, "post_messages", counted)
    async with (
        open_node(Settings(data_dir=tmp_path / "data")) as node,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(node.run)
        accounts = node.accounts
        owner_signed = await accounts.init_setup(name="owner", password=PASSWORD, mesh_name="M")
        owner = accounts.actor_for(owner_signed.participant)
        town = accounts.setup_status()["defaultRoomId"]
        assert isinstance(town, str)
        alice = accounts.actor_for((await accounts.register("alice", PASSWORD)).participant)
        bob = accounts.actor_for((await accounts.register("bob", PASSWORD)).participant)
        for actor in (alice, bob):
            await node.rooms.join(actor, town)
        dm, _ = await node.dms.open(alice, bob.participant_id)
        send = node.messages.submit_send

        async with node.events(owner) as stream:
            with trio.fail_after(30):
                # queued in one go (no checkpoint between): one batch
                waits = [
                    send(alice, town, "one", client_id="c1"),
                    send(bob, town, "two"),
                    send(alice, town, "three"),
                    send(alice, town, "again", client_id="c1"),  # a retry of "one"
                    send(alice, town, "to bob", to=bob.participant_id),  # not plain
                    send(bob, town, "four"),
                    node.db.submit(
                        lambda conn: rooms_repo.remove_member(conn, town, bob.participant_id)
                    ),
                    send(bob, town, "five"),  # checked before bob left: refused in the store
                    send(alice, dm.room.room_id, "in the dm"),  # plain, but a DM: the full path
                    send(alice, town, "six"),
                ]
                results: list[Any] = []
                for wait in waits:
                    try:
                        results.append(await wait)
                    except Forbidden as refused:
                        results.append(refused.code)

            one, two, three, again, to_bob, four, removed, five, in_dm, six = results
            assert removed is True
            assert five == "not_member"
            # the retry is answered with the first message
            assert (again.message_id, again.content, again.seq) == (
                one.message_id,
                "one",
                one.seq,
            )
            assert in_dm.room_id == dm.room.room_id
            stored = [one, two, three, to_bob, four, six]
            # cursors in the order the sends were queued
            seqs = [m.seq for m in stored]
            assert seqs == sorted(seqs)
            assert len(set(seqs)) == len(seqs)
            assert in_dm.seq > four.seq
            assert six.seq > in_dm.seq

            # the room's history and the live events agree with that order
            history = await node.messages.list_messages(owner, town, limit=50)
            wanted = ["one", "two", "three", "to bob", "four", "six"]
            assert [m.content for m in history if m.content in wanted] == wanted
            live: list[str] = []
            with trio.fail_after(30):
                async for event in stream:
                    if isinstance(event, MessagePosted) and event.message.room_id == town:
                        live.append(event.message.content)
                        if event.message.content == "six":
                            break
            assert [c for c in live if c in wanted] == wanted
        nursery.cancel_scope.cancel()

    if postgresql:
        # the plain posts ran ahead, a run at a time, split by the units of
        # other kinds (a run of one post runs its own statement)
        assert ["one", "two", "three", "again"] in runs, runs
    else:
        assert runs == []


async def test_a_batch_run_again_unit_by_unit_stores_each_post_once(tmp_path: Path) -> None:
    """A unit that fails rolls its batch back, and the batch runs again with
    a savepoint per unit and nothing ahead: the posts are inserted again
    (what ran ahead in the first attempt is forgotten with it), each once."""
    async with (
        open_node(Settings(data_dir=tmp_path / "data")) as node,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(node.run)
        accounts = node.accounts
        signed = await accounts.init_setup(name="owner", password=PASSWORD, mesh_name="M")
        owner = accounts.actor_for(signed.participant)
        town = accounts.setup_status()["defaultRoomId"]
        assert isinstance(town, str)

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
        nursery.cancel_scope.cancel()
