"""The real command: ``python -m quart_mesh serve`` in a subprocess, stopped by
SIGTERM and SIGINT, and started again on the same data folder with nothing lost."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed

from tests import launcher, stores
from tests.helpers import PASSWORD, Mesh, cli, open_client
from tests.stores import node_env

_LISTENING = re.compile(rb"listening on (http://\S+)")


class ServerProcess:
    """``python -m quart_mesh serve`` on *data_dir*: forked by the launcher
    (tests/launcher.py), or with *fresh* (or other ``args``) a new process."""

    def __init__(
        self,
        data_dir: Path,
        *extra: str,
        env: dict[str, str] | None = None,
        fresh: bool = False,
    ) -> None:
        self.env = env or {}
        self.fresh = fresh
        self.data_dir = data_dir
        self.args = [
            sys.executable,
            "-m",
            "quart_mesh",
            "serve",
            "--port",
            "0",
            "--data-dir",
            str(data_dir),
            *extra,
        ]
        self.output = b""

    async def start(self, nursery: trio.Nursery) -> str:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **node_env(self.data_dir), **self.env}
        command = self.args[:3] == [sys.executable, "-m", "quart_mesh"]
        if command and not self.fresh:
            self.process = await launcher.open_process(
                self.args[3:], env=env, stderr=subprocess.STDOUT
            )
        else:
            self.process = await trio.lowlevel.open_process(
                self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
            )
        assert self.process.stdout is not None
        self._stdout = self.process.stdout
        with trio.fail_after(20):
            while not (match := _LISTENING.search(self.output)):
                chunk = await self._stdout.receive_some(4096)
                assert chunk, f"server exited early: {self.output.decode(errors='replace')}"
                self.output += chunk
        nursery.start_soon(self._drain)
        return match.group(1).decode()

    async def _drain(self) -> None:
        try:
            while chunk := await self._stdout.receive_some(4096):
                self.output += chunk
        except BaseException:
            # cancelled (the test failed): do not leave the node and its bots running
            if self.process.returncode is None:
                with trio.CancelScope(shield=True):
                    self.process.terminate()
                    with trio.move_on_after(10):
                        await self.process.wait()
                    if self.process.returncode is None:
                        self.process.kill()
                        await self.process.wait()
            raise

    async def stop(self, signum: int = signal.SIGTERM) -> int:
        self.process.send_signal(signum)
        with trio.fail_after(15):
            return await self.process.wait()


async def test_restart_keeps_everything(tmp_path: Path, nursery: trio.Nursery) -> None:
    data_dir = tmp_path / "mesh-data"
    first = ServerProcess(data_dir, fresh=True)  # a new interpreter (the next, forked)
    url = await first.start(nursery)
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        bob = await mesh.register("bob")
        room_id = (await mesh.create_room(owner, "keep"))["roomId"]
        await mesh.join(bob, room_id)
        msg = await mesh.send(owner, room_id, "draft")
        murl = f"/api/rooms/{room_id}/messages/{msg['messageId']}"
        assert (await http.patch(murl, json={"content": "final"}, headers=owner.headers)).is_success
        r = await http.post(f"{murl}/reactions", json={"emoji": "tada"}, headers=bob.headers)
        assert r.is_success
        dm = (
            await http.post(
                "/api/dms", json={"participantId": bob.participant_id}, headers=owner.headers
            )
        ).json()
        await mesh.send(owner, dm["roomId"], "private note")
        poll = await http.post("/api/poll", json={}, headers=bob.headers)
        poll_cursor = poll.json()["cursor"]
        before = {
            "participants": (await http.get("/api/participants", headers=owner.headers)).json(),
            "rooms": (await http.get("/api/rooms", headers=owner.headers)).json(),
            "messages": await mesh.messages(bob, room_id),
            "dms": (await http.get("/api/dms", headers=bob.headers)).json(),
        }
        # a WebSocket session open at shutdown is told the node is going away
        async with open_client(url) as ws:
            await ws.send_message(json.dumps({"type": "authenticate", "token": bob.token}))
            assert json.loads(await ws.get_message())["type"] == "auth_ok"
            # delivered live just before shutdown: counts as read after the restart
            sent = await mesh.send(owner, room_id, "seen live")
            with trio.fail_after(5):
                while json.loads(await ws.get_message()).get("messageId") != sent["messageId"]:
                    pass
            assert await first.stop(signal.SIGTERM) == 0
            with trio.fail_after(5), pytest.raises(ConnectionClosed) as closed:
                await _drain(ws)
            assert closed.value.reason.code == 1001
    assert b"received SIGTERM" in first.output
    assert b"Traceback" not in first.output
    assert (data_dir / "mesh.db").exists() == (stores.backend() == "sqlite")
    assert (data_dir / "secret.key").stat().st_mode & 0o777 == 0o600

    second = ServerProcess(data_dir)
    url = await second.start(nursery)
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        # old tokens still work: the signing secret persisted
        assert (await http.get("/api/auth/me", headers=bob.headers)).status_code == 200
        r = await http.post("/api/auth/login", json={"name": "bob", "password": PASSWORD})
        assert r.status_code == 200
        assert (await http.get("/api/setup/status")).json()["initialized"] is True
        after = {
            "participants": (await http.get("/api/participants", headers=owner.headers)).json(),
            "rooms": (await http.get("/api/rooms", headers=owner.headers)).json(),
            "messages": await Mesh(http).messages(bob, room_id),
            "dms": (await http.get("/api/dms", headers=bob.headers)).json(),
        }
        status = (await http.get("/api/status", headers=bob.headers)).json()
        assert next(r for r in status["rooms"] if r["roomId"] == room_id)["unread"] == 0
        # a poll cursor from before the restart: exactly what came after it
        await Mesh(http).send(owner, room_id, "after restart")
        r = await http.post("/api/poll", json={"cursor": poll_cursor}, headers=bob.headers)
        assert [m["content"] for m in r.json()["messages"]] == ["seen live", "after restart"]
    for key in ("rooms", "dms"):
        assert _unseen(after[key]) == _unseen(before[key]), key
    assert after["messages"][:-1] == before["messages"]
    assert after["messages"][-1]["content"] == "seen live"
    assert [p["participantId"] for p in after["participants"]] == [
        p["participantId"] for p in before["participants"]
    ]
    message = after["messages"][0]
    assert message["content"] == "final"
    assert message["editedAt"] is not None
    assert message["reactions"][0]["emoji"] == "tada"
    assert await second.stop(signal.SIGINT) == 0
    assert b"Traceback" not in second.output


@pytest.mark.store_free  # refused while the arguments are read, before any store
async def test_cli_rejects_bad_options(tmp_path: Path) -> None:
    for args in (["--port", "99999"], ["--public-url", "ftp://x"], ["--port", "abc"]):
        result = await cli("serve", "--data-dir", str(tmp_path), *args)
        assert result.returncode == 2
        assert b"Traceback" not in result.stderr


async def test_environment_configures_the_node(tmp_path: Path, nursery: trio.Nursery) -> None:
    data_dir = tmp_path / "env-data"
    server = ServerProcess(data_dir, fresh=True)
    server.args = [sys.executable, "-m", "quart_mesh", "serve"]
    os.environ["MESH_DATA_DIR"] = str(data_dir)
    os.environ["MESH_PORT"] = "0"
    os.environ["MESH_MAX_MESSAGE_BYTES"] = "10"
    try:
        url = await server.start(nursery)
    finally:
        for key in ("MESH_DATA_DIR", "MESH_PORT", "MESH_MAX_MESSAGE_BYTES"):
            del os.environ[key]
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        room_id = (await mesh.create_room(owner, "tiny"))["roomId"]
        r = await http.post(
            f"/api/rooms/{room_id}/messages", json={"content": "x" * 11}, headers=owner.headers
        )
        assert r.status_code == 413
    assert await server.stop() == 0
    assert (data_dir / "mesh.db").exists() == (stores.backend() == "sqlite")


async def _drain(ws: object) -> None:
    """Read frames until the connection closes (raises ConnectionClosed)."""
    while True:
        await ws.get_message()  # type: ignore[attr-defined]


def _unseen(rooms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """*rooms* (or DMs) without their members' presence: bob's WebSocket
    session after the first read moves his own ``lastSeen`` (a DM's
    ``members`` list the caller too); all else must stay the same."""
    return [
        {
            **room,
            "members": [
                {k: v for k, v in member.items() if k not in ("online", "lastSeen")}
                for member in room["members"]
            ],
        }
        if "members" in room
        else room
        for room in rooms
    ]
