"""The in-process event stream at its edges: a cursor past the newest
message, commands handed out once, a guest on a mesh gone private.

A real node (``open_node`` + ``node.run``), as tests/test_event_stream.py."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest
import trio

from quart_mesh import AccessEnded, EventStream, MessagePosted
from quart_mesh.events import CommandIssued
from tests.test_event_stream import CAP, running
from tests.test_event_stream import messages as _messages


async def messages(stream: object, count: int) -> list[MessagePosted]:
    with trio.fail_after(5):
        return await _messages(stream, count)  # type: ignore[arg-type]


async def test_a_cursor_past_the_head_does_not_swallow_new_messages(tmp_path: Path) -> None:
    # a cursor from a store restored from an older backup (or another node)
    # is past the head: the messages written next have seq <= that cursor,
    # and the stream must still hand them out (the backlog delivered none of them)
    async with running(tmp_path / "data") as mesh:
        node = mesh.node
        head = (await node.messages.send(mesh.owner, mesh.town, "head")).seq
        # far past it on either store: on PostgreSQL positions come in
        # blocks of 2**20, a block per transaction (decision 0080)
        past = head + (1 << 30)
        async with node.events(mesh.bob, since=past) as stream:
            sent = await node.messages.send(mesh.alice, mesh.town, "after")
            assert sent.seq <= past
            (got,) = await messages(stream, 1)
            assert got.message.content == "after"


async def test_commands_a_stream_hands_out_are_not_handed_out_again(tmp_path: Path) -> None:
    # the WebSocket marks a command delivered once it is sent; a stream
    # must do the same, or every new stream (a resume after StreamLagged)
    # hands out every command again, and they count as waiting
    # (max_pending_commands) for ever
    async with running(tmp_path / "data") as mesh:
        node = mesh.node
        boot = await node.agents.bootstrap(
            mesh.owner, name="helper", bot_type="nanoclaw", base_url="http://x"
        )
        bot = node.accounts.actor_for(boot.participant)
        row = await node.commands.send_command(mesh.owner, bot.participant_id, "ping")

        async def commands_until(marker: str) -> list[str]:
            """The commands a new stream hands out before the message
            *marker*, sent once it is open (the catch-up's commands come
            before what is live)."""
            got: list[str] = []
            async with node.events(bot, since=0) as stream:
                await node.messages.send(mesh.owner, mesh.town, marker)
                async for event in stream:
                    if isinstance(event, CommandIssued):
                        got.append(event.command_id)
                    elif isinstance(event, MessagePosted) and event.message.content == marker:
                        return got
            raise AssertionError("the stream ended")

        await node.rooms.join(bot, mesh.town)
        with trio.fail_after(CAP):
            assert await commands_until("first") == [row.command_id]
            again = await commands_until("second")
        assert again == [], "the same command handed out by the next stream"
        waiting = await node.commands.pending_commands(bot.participant_id)
        assert waiting == []


async def test_a_guest_s_stream_on_a_mesh_gone_private_is_refused(tmp_path: Path) -> None:
    # a guest's access ends when the mesh goes private: its tokens are refused
    # and its sessions end (revoked); a new in-process stream must not give
    # it the rooms' messages again (AccessEnded: revoked)
    async with running(tmp_path / "data") as mesh:
        node = mesh.node
        await node.admin.update_settings(mesh.owner, visibility="public")
        signed = await node.accounts.guest()
        guest = node.accounts.actor_for(signed.participant)
        await node.rooms.join(guest, mesh.town)
        async with node.events(guest) as stream:
            await node.admin.update_settings(mesh.owner, visibility="private")
            with trio.fail_after(5), pytest.raises(AccessEnded) as ended:
                async for _ in stream:
                    pass
            assert ended.value.reason == "revoked"
        await node.messages.send(mesh.owner, mesh.town, "private now")
        guest = await node.accounts.actor_of(guest.participant_id) or guest
        with trio.fail_after(5), pytest.raises(AccessEnded) as refused:
            await _read_all(node.events(guest, since=0))
        assert refused.value.reason == "revoked"


async def _read_all(opened: AbstractAsyncContextManager[EventStream]) -> None:
    async with opened as stream:
        got = [event async for event in stream]
    raise AssertionError(f"the guest reads a private mesh: {got}")
