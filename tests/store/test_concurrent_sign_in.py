"""A sign-in and a password change on two processes of one mesh, on
PostgreSQL (decision 0080): a sign-in checks the password's hash, then
records its token. If it ran without the mesh's write lock (as sends do),
a password change committed in between would list the member's tokens
without the new one and never sign it out: a token issued on the old
password would outlive the change. It takes the write lock, so the change
waits for it, then finds its token and signs it out.

Two nodes (``open_node``) on one data folder and database, as two
processes. The sign-in is held between its check and its token's insert by
a lock the test takes on ``issued_tokens``; the change starts meanwhile,
and the test lets the sign-in go on once the change waits for a lock too
(the write lock the sign-in holds), or ended.

Skipped on SQLite: one process per data folder there.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import trio
from sqlalchemy.engine import Engine

from quart_mesh import Settings
from quart_mesh.errors import Unauthorized
from quart_mesh.node import open_node
from quart_mesh.services.accounts import SignedIn
from quart_mesh.store import accounts as accounts_repo
from quart_mesh.store import tokens as tokens_repo
from quart_mesh.store.dialect import WRITE_LOCK
from tests import stores
from tests.store import rows

pytestmark = pytest.mark.timeout(60)

PASSWORD = "a long passphrase"
NEW_PASSWORD = "another long passphrase"

#: a transaction waiting for the mesh's write lock (``dialect.hold_write_lock``)
_ON_WRITE_LOCK = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    f" AND classid = {WRITE_LOCK >> 32} AND objid = {WRITE_LOCK & 0xFFFF_FFFF} AND objsubid = 1"
)


def _count(engine: Engine, query: str) -> int:
    with engine.connect() as conn:
        return int(conn.exec_driver_sql(query).scalar_one())


async def _until(check: Callable[[], bool]) -> None:
    with trio.fail_after(20):
        while not check():
            await trio.sleep(0.01)


async def test_a_token_signed_in_on_the_old_password_is_signed_out_by_a_change_meanwhile(
    cluster: stores.Cluster, tmp_path: Path
) -> None:
    settings = Settings(data_dir=tmp_path / "mesh-data")
    async with open_node(settings) as one:
        await one.accounts.init_setup(
            name="owner",
            password=PASSWORD,
            mesh_name="Mesh",
            default_room_name="Town Square",
        )
        member = await one.accounts.register("member", PASSWORD)
        pid = member.participant.participant_id
        async with open_node(settings) as two:
            actor = await two.accounts.authenticate(member.token)
            engine = one.db.engine
            signed_in: list[SignedIn] = []
            signed_out: list[int] = []

            async def sign_in() -> None:
                signed_in.append(await one.accounts.login("member", PASSWORD))

            async def change() -> None:
                changed = await two.accounts.change_password(
                    actor, member.token, PASSWORD, NEW_PASSWORD
                )
                signed_out.append(changed)

            with engine.connect() as holder:
                held = holder.begin()
                holder.exec_driver_sql("LOCK TABLE issued_tokens IN SHARE MODE")
                try:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(sign_in)
                        # checked the hash, and waits to record its token
                        await _until(lambda: rows.lock_waiters(engine) == 1)
                        nursery.start_soon(change)
                        # the change runs as far as it can
                        await _until(lambda: rows.lock_waiters(engine) == 2 or bool(signed_out))
                        on_write_lock = _count(engine, _ON_WRITE_LOCK)
                        held.commit()
                finally:
                    if held.is_active:
                        held.rollback()
            assert on_write_lock == 1, "the change did not wait for the sign-in's write lock"
            assert signed_out == [1]  # the sign-in's token
            token = signed_in[0].token
            # refused by the process that changed the password (the other
            # learns of it from its bus, not running here) ...
            with pytest.raises(Unauthorized) as refused:
                await two.accounts.authenticate(token)
            assert refused.value.code == "token_revoked"
        # ... and recorded signed out
        with engine.connect() as conn:
            participant = accounts_repo.get_participant(conn, pid)
            assert participant is not None
            listed = tokens_repo.list_tokens(conn, pid, 0, participant.tokens_not_before)
        claims = one.tokens.check(token)
        assert [t.revoked for t in listed if t.token_id == claims.token_id] == [True]
