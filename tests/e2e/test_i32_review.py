"""Defects found reviewing issue 32's node side (branch i32-server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from quart_mesh import MeshApp, Settings, create_app, serve
from quart_mesh.services.messages import MAX_PINS
from tests.e2e.test_account_settings import NEW_PASSWORD, login
from tests.helpers import PASSWORD, Mesh, assert_error

pytestmark = pytest.mark.e2e


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "mesh-data")


@pytest.fixture
def served_app(settings: Settings) -> MeshApp:
    return create_app(settings)


@pytest.fixture
async def base_url(served_app: MeshApp, nursery: trio.Nursery) -> str:
    url: str = await nursery.start(
        lambda task_status: serve(served_app, port=0, task_status=task_status)
    )
    return url


async def test_repinning_a_pinned_message_in_a_full_room_is_idempotent(mesh: Mesh) -> None:
    """PUT .../pins/:id is documented idempotent, but in a room at MAX_PINS
    re-pinning a message that is already pinned answers 409 too_many_pins
    (the cap is checked before whether it is pinned)."""
    owner = await mesh.setup()
    room_id = (await mesh.http.get("/api/setup/status")).json()["defaultRoomId"]
    sent = [await mesh.send(owner, room_id, f"m{i}") for i in range(MAX_PINS)]
    for message in sent:
        r = await mesh.http.put(
            f"/api/rooms/{room_id}/pins/{message['messageId']}", headers=owner.headers
        )
        assert r.status_code == 200, r.text
    r = await mesh.http.put(
        f"/api/rooms/{room_id}/pins/{sent[0]['messageId']}", headers=owner.headers
    )
    assert r.status_code == 200, r.text
    assert r.json()["pinned"] is True


async def test_a_token_signed_out_during_a_password_change_cannot_complete_it(
    mesh: Mesh, served_app: MeshApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner signs out a stolen session (DELETE /api/auth/sessions/:id)
    while that session's password change is verifying the current password
    (argon2: a wide window). The change must then fail (401 token_revoked),
    not go through, lock the owner out of its other sessions, and leave the
    thief with the one good token."""
    await mesh.setup()
    owner = await mesh.register("bob")
    thief = await login(mesh, "bob", agent="Thief/1.0")
    sessions = (await mesh.http.get("/api/auth/sessions", headers=owner.headers)).json()
    thief_id = next(s["tokenId"] for s in sessions if s["userAgent"] == "Thief/1.0")

    accounts = served_app.node.accounts
    passwords: Any = accounts._passwords
    verify = passwords.verify
    signed_out = False

    async def verify_while_the_owner_signs_out(password_hash: str | None, password: str) -> bool:
        nonlocal signed_out
        ok: bool = await verify(password_hash, password)
        if not signed_out:
            signed_out = True
            r = await mesh.http.delete(f"/api/auth/sessions/{thief_id}", headers=owner.headers)
            assert r.status_code == 200, r.text
        return ok

    monkeypatch.setattr(passwords, "verify", verify_while_the_owner_signs_out)
    r = await mesh.http.post(
        "/api/auth/password",
        json={"current": PASSWORD, "new": NEW_PASSWORD},
        headers=thief.headers,
    )
    assert signed_out
    assert_error(r, 401, "token_revoked")
    # the owner is still signed in, and its password is unchanged
    assert (await mesh.http.get("/api/auth/me", headers=owner.headers)).status_code == 200
    await login(mesh, "bob", PASSWORD)


async def test_a_password_change_does_not_undo_a_sign_out_everywhere(
    mesh: Mesh, served_app: MeshApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator's sign-out-everywhere (``tokens_not_before`` = now) that
    lands while a password change verifies must hold for the changing token:
    the change writes ``tokens_not_before`` = the token's own issue time,
    lowering it, so the token the operator signed out stays good."""
    await mesh.setup()
    await mesh.register("bob")
    token = await login(mesh, "bob")
    await trio.sleep(1.1)  # "not before" counts whole seconds
    accounts = served_app.node.accounts
    passwords: Any = accounts._passwords
    verify = passwords.verify
    done = False

    async def verify_while_the_operator_signs_out(password_hash: str | None, pw: str) -> bool:
        nonlocal done
        ok: bool = await verify(password_hash, pw)
        if not done:
            done = True
            await accounts.sign_out_everywhere(token.participant_id)
        return ok

    monkeypatch.setattr(passwords, "verify", verify_while_the_operator_signs_out)
    await mesh.http.post(
        "/api/auth/password",
        json={"current": PASSWORD, "new": NEW_PASSWORD},
        headers=token.headers,
    )
    assert done
    assert_error(await mesh.http.get("/api/auth/me", headers=token.headers), 401, "token_revoked")


@pytest.mark.parametrize(
    "invisible",
    ["\u200b", "\u2060\u2060", "a\u200fb", "\ufeffbob", "a\u061cb", "\u00ad"],
)
async def test_a_display_name_refuses_invisible_and_format_characters(
    mesh: Mesh, invisible: str
) -> None:
    """check_display_name refuses C0/C1 controls and the bidi embeddings, but
    lets other format characters through: a display name of zero-width
    spaces (shown as nothing beside, or instead of, the @name), or hidden
    RLM/ALM/BOM/soft hyphen marks inside one."""
    await mesh.setup()
    bob = await mesh.register("bob")
    r = await mesh.http.patch("/api/auth/me", json={"displayName": invisible}, headers=bob.headers)
    assert_error(r, 400, "invalid_display_name")
