"""A login that checked the old password while a reset was waiting to be
written signs nobody in; tokens issued before a sign-out everywhere are
refused, those of the same second one by one, and later ones stay good."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from quart_mesh import Settings
from quart_mesh.errors import Unauthorized
from quart_mesh.node import open_node
from quart_mesh.store import accounts as repo

PASSWORD = "a long passphrase"
NEW_PASSWORD = "another long passphrase"


async def test_a_password_checked_before_a_reset_signs_nobody_in(tmp_path: Path) -> None:
    async with open_node(Settings(data_dir=tmp_path / "data")) as node:
        async with trio.open_nursery() as nursery:
            await nursery.start(node.run_core)
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
            found = await node.db.read(lambda conn: repo.get_participant_by_name(conn, "member"))
            assert found is not None
            participant, old_hash = found
            assert old_hash is not None
            # the login verified PASSWORD against old_hash; the reset commits first
            new_hash = await node.passwords.hash(NEW_PASSWORD)
            await accounts.sign_out_everywhere(participant.participant_id, password_hash=new_hash)
            with pytest.raises(Unauthorized):
                await accounts.sign_in(participant, "login", password_hash=old_hash)
            # the token from registration is refused; a login now is good
            with pytest.raises(Unauthorized) as refused:
                await accounts.authenticate(member.token)
            assert refused.value.code == "token_revoked"
            fresh = await accounts.login("member", NEW_PASSWORD)
            actor = await accounts.authenticate(fresh.token)
            assert actor.participant_id == participant.participant_id
            nursery.cancel_scope.cancel()
