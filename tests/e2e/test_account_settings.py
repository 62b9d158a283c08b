"""Account settings (issue 32): a display name, a password change that
signs the other tokens out, and the list of one's sessions."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers import PASSWORD, Mesh, User, assert_error, connect

pytestmark = pytest.mark.e2e

NEW_PASSWORD = "a quite different passphrase"


async def login(mesh: Mesh, name: str, password: str = PASSWORD, agent: str = "tests") -> User:
    r = await mesh.http.post(
        "/api/auth/login",
        json={"name": name, "password": password},
        headers={"User-Agent": agent},
    )
    assert r.status_code == 200, r.text
    data = r.json()
    return User(data["participantId"], name, data["token"])


async def test_a_display_name_shows_beside_the_name(mesh: Mesh, base_url: str) -> None:
    await mesh.setup()
    bob = await mesh.register("bob")
    alice = await mesh.register("alice")
    me = (await mesh.http.get("/api/auth/me", headers=bob.headers)).json()
    assert me["displayName"] is None

    r = await mesh.http.patch(
        "/api/auth/me", json={"displayName": "  Bob \uff2darley "}, headers=bob.headers
    )
    assert r.status_code == 200, r.text
    assert (r.json()["name"], r.json()["displayName"]) == ("bob", "Bob Marley")  # NFKC, trimmed
    assert r.json()["permissions"]  # answered as GET /api/auth/me
    seen = await mesh.http.get(f"/api/participants/{bob.participant_id}", headers=alice.headers)
    assert seen.json()["displayName"] == "Bob Marley"
    listed = (await mesh.http.get("/api/participants", headers=alice.headers)).json()
    assert {p["name"]: p["displayName"] for p in listed}["bob"] == "Bob Marley"
    # in the WebSocket snapshot too
    async with connect(base_url, alice) as ws:
        names = {p["name"]: p for p in ws.snapshot["participants"]}  # type: ignore[attr-defined]
        assert names["bob"]["displayName"] == "Bob Marley"

    # no change when absent; null or blank clears it
    r = await mesh.http.patch("/api/auth/me", json={}, headers=bob.headers)
    assert r.json()["displayName"] == "Bob Marley"
    r = await mesh.http.patch("/api/auth/me", json={"displayName": " "}, headers=bob.headers)
    assert r.json()["displayName"] is None
    await mesh.http.patch("/api/auth/me", json={"displayName": "B"}, headers=bob.headers)
    r = await mesh.http.patch("/api/auth/me", json={"displayName": None}, headers=bob.headers)
    assert r.json()["displayName"] is None

    for bad, code in [
        ("x" * 65, "invalid_display_name"),
        ("two\nlines", "invalid_display_name"),
        ("bi\u202edi", "invalid_display_name"),
        (12, "invalid_field"),
    ]:
        r = await mesh.http.patch("/api/auth/me", json={"displayName": bad}, headers=bob.headers)
        assert_error(r, 400, code)
    assert_error(await mesh.http.patch("/api/auth/me", json={"displayName": "x"}), 401)


async def test_sessions_are_listed_and_signed_out_one_by_one(mesh: Mesh, base_url: str) -> None:
    await mesh.setup()
    await mesh.register("bob")
    phone = await login(mesh, "bob", agent="Phone/1.0")
    laptop = await login(mesh, "bob", agent="Laptop/2.0")
    r = await mesh.http.get("/api/auth/sessions", headers=laptop.headers)
    assert r.status_code == 200, r.text
    sessions = r.json()  # oldest first: these are of one second, in any order
    by_agent = {s["userAgent"]: s for s in sessions}
    assert set(by_agent) == {"python-httpx/" + httpx.__version__, "Phone/1.0", "Laptop/2.0"}
    assert [by_agent[a]["kind"] for a in ("Phone/1.0", "Laptop/2.0")] == ["login", "login"]
    assert [s["current"] for s in sessions].count(True) == 1
    assert by_agent["Laptop/2.0"]["current"] is True
    assert all(s["lastUsedAt"] and s["expiresAt"] > s["createdAt"] for s in sessions)
    phone_id = by_agent["Phone/1.0"]["tokenId"]

    async with connect(base_url, phone) as ws:
        r = await mesh.http.delete(f"/api/auth/sessions/{phone_id}", headers=laptop.headers)
        assert r.json() == {"ok": True}
        assert (await ws.expect("error"))["code"] == "token_revoked"
    assert_error(await mesh.http.get("/api/auth/me", headers=phone.headers), 401, "token_revoked")
    left = (await mesh.http.get("/api/auth/sessions", headers=laptop.headers)).json()
    assert phone_id not in {s["tokenId"] for s in left}
    assert len(left) == 2
    # gone, or not one's own: 404
    r = await mesh.http.delete(f"/api/auth/sessions/{phone_id}", headers=laptop.headers)
    assert_error(r, 404, "session_not_found")
    alice = await mesh.register("alice")
    r = await mesh.http.delete(f"/api/auth/sessions/{left[0]['tokenId']}", headers=alice.headers)
    assert_error(r, 404, "session_not_found")
    assert (await mesh.http.get("/api/auth/me", headers=laptop.headers)).status_code == 200


async def test_a_password_change_signs_out_the_other_tokens(mesh: Mesh, base_url: str) -> None:
    await mesh.setup()
    bob = await mesh.register("bob")
    phone = await login(mesh, "bob")
    laptop = await login(mesh, "bob")

    # a wrong current password, or a weak new one, changes nothing
    r = await mesh.http.post(
        "/api/auth/password",
        json={"current": "not my password", "new": NEW_PASSWORD},
        headers=laptop.headers,
    )
    assert_error(r, 403, "wrong_password")
    r = await mesh.http.post(
        "/api/auth/password", json={"current": PASSWORD, "new": "short"}, headers=laptop.headers
    )
    assert_error(r, 400, "weak_password")
    r = await mesh.http.post("/api/auth/password", json={"current": PASSWORD}, headers=bob.headers)
    assert_error(r, 400)
    for user in (bob, phone, laptop):
        assert (await mesh.http.get("/api/auth/me", headers=user.headers)).status_code == 200

    async with connect(base_url, phone) as ws:
        r = await mesh.http.post(
            "/api/auth/password",
            json={"current": PASSWORD, "new": NEW_PASSWORD},
            headers=laptop.headers,
        )
        assert r.status_code == 200, r.text
        assert r.json() == {"ok": True, "signedOut": 2}
        assert (await ws.expect("error"))["code"] == "token_revoked"
    for gone in (bob, phone):
        r = await mesh.http.get("/api/auth/me", headers=gone.headers)
        assert_error(r, 401, "token_revoked")
    assert (await mesh.http.get("/api/auth/me", headers=laptop.headers)).status_code == 200
    sessions = (await mesh.http.get("/api/auth/sessions", headers=laptop.headers)).json()
    assert [s["current"] for s in sessions] == [True]

    # the new password signs in, the old one no longer does
    await login(mesh, "bob", NEW_PASSWORD)
    r = await mesh.http.post("/api/auth/login", json={"name": "bob", "password": PASSWORD})
    assert_error(r, 401, "invalid_credentials")


async def test_a_guest_has_no_password_to_change(mesh: Mesh) -> None:
    await mesh.setup()
    guest = await mesh.guest()
    r = await mesh.http.post(
        "/api/auth/password", json={"current": "", "new": NEW_PASSWORD}, headers=guest.headers
    )
    assert_error(r, 403, "wrong_password")
