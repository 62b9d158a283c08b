"""Test helpers: a small REST client for a node served on loopback.

Test rules (as trio-websocket writes them at the top of its tests):
loopback only, port 0, no sleeps to wait for state, a time cap on every test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

PASSWORD = "correct horse battery"


@dataclass
class User:
    participant_id: str
    name: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


class Mesh:
    """Thin wrapper over ``httpx.AsyncClient`` that speaks the node's REST API."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def setup(self, name: str = "owner", **extra: Any) -> User:
        body = {"name": name, "password": PASSWORD, "meshName": "Test Mesh", **extra}
        r = await self.http.post("/api/setup/init", json=body)
        assert r.status_code == 201, r.text
        return _user(r.json())

    async def register(self, name: str) -> User:
        r = await self.http.post("/api/auth/register", json={"name": name, "password": PASSWORD})
        assert r.status_code == 201, r.text
        return _user(r.json())

    async def guest(self) -> User:
        r = await self.http.post("/api/auth/guest")
        assert r.status_code == 201, r.text
        return _user(r.json())

    async def create_room(self, user: User, name: str, **extra: Any) -> dict[str, Any]:
        r = await self.http.post("/api/rooms", json={"name": name, **extra}, headers=user.headers)
        assert r.status_code == 201, r.text
        return dict(r.json())

    async def join(self, user: User, room_id: str) -> None:
        r = await self.http.post(f"/api/rooms/{room_id}/join", headers=user.headers)
        assert r.status_code == 200, r.text

    async def send(self, user: User, room_id: str, content: str, **extra: Any) -> dict[str, Any]:
        r = await self.http.post(
            f"/api/rooms/{room_id}/messages",
            json={"content": content, **extra},
            headers=user.headers,
        )
        assert r.status_code == 201, r.text
        return dict(r.json())

    async def messages(self, user: User, room_id: str, **params: Any) -> list[dict[str, Any]]:
        r = await self.http.get(
            f"/api/rooms/{room_id}/messages", params=params, headers=user.headers
        )
        assert r.status_code == 200, r.text
        return list(r.json())


def _user(data: dict[str, Any]) -> User:
    assert set(data) >= {"participantId", "token", "name"}
    return User(data["participantId"], data["name"], data["token"])


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> None:
    """The response is a JSON error ``{"error", "code"}`` with *status* (and *code*)."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert isinstance(body.get("error"), str), body
    assert body["error"], body
    assert isinstance(body.get("code"), str), body
    assert body["code"], body
    if code is not None:
        assert body["code"] == code, body
    assert "Traceback" not in response.text
