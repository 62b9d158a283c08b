"""A login that checked the old password while a reset was waiting to be
written signs nobody in; tokens issued before a sign-out everywhere are
refused, and a later login is good."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from quart_mesh import Settings
from quart_mesh.errors import Unauthorized
from quart_mesh.node import open_node

PASSWORD = "a long passphrase"
NEW_PASSWORD = "another long passphrase"


async def test_a_password_checked_before_a_reset_signs_nobody_in(tmp_path: Path) -> None:
    async with open_node(Settings(data_dir=tmp_path / "data")) as node, trio.open_nursery() as n:
        await n.start(node.run_core)
        accounts = node.accounts
        await accounts.init_setup(
            name="owner",
            password=PASSWORD,
            mesh_name="Mesh",
            description="",
            visibility="public",
            registration_mode="open",
            default_room_name="Town Square",
        )
        member = await accounts.register("member", PASSWORD)
        # the login's password check is held until the reset has committed
        checked, reset_done = trio.Event(), trio.Event()
        verify = node.passwords.verify

        async def held_verify(password_hash: str | None, password: str) -> bool:
            ok = await verify(password_hash, password)
            checked.set()
            await reset_done.wait()
            return ok

        node.passwords.verify = held_verify  # type: ignore[method-assign]
        outcome: list[BaseException | str] = []

        async def log_in() -> None:
            try:
                outcome.append((await accounts.login("member", PASSWORD)).token)
            except Unauthorized as refused:
                outcome.append(refused)

        async with trio.open_nursery() as inner:
            inner.start_soon(log_in)
            await checked.wait()
            new_hash = await node.passwords.hash(NEW_PASSWORD)
            ended = await accounts.sign_out_everywhere(
                member.participant.participant_id, password_hash=new_hash
            )
            reset_done.set()
        node.passwords.verify = verify  # type: ignore[method-assign]
        assert ended == 1  # the registration's token
        assert isinstance(outcome[0], Unauthorized), outcome
        assert outcome[0].code == "invalid_credentials"
        # the token from registration is refused; a login now is good
        with pytest.raises(Unauthorized) as refused:
            await accounts.authenticate(member.token)
        assert refused.value.code == "token_revoked"
        fresh = await accounts.login("member", NEW_PASSWORD)
        actor = await accounts.authenticate(fresh.token)
        assert actor.participant_id == member.participant.participant_id
        # a second sign-out counts only what was still good
        assert await accounts.sign_out_everywhere(member.participant.participant_id) == 1
        n.cancel_scope.cancel()
