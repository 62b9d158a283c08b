"""Issue 31, "How it will be checked", as a test: a program written with the
public names only (``docs/examples/follow_events_until_signal.py``) embeds a
node beside its own task, follows ``node.events``, survives falling behind
(``StreamLagged`` -> resume from its cursor, no message lost or repeated),
and stops on Ctrl+C with exit status 0 while its WebSocket client sees 1001.

Loopback only, port 0, every wait bounded.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed

from tests.helpers import User, connect, wait_for
from tests.stores import node_env

pytestmark = [pytest.mark.e2e]

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "follow_events_until_signal.py"
_LISTENING = re.compile(rb"listening on (http://\S+)")
_SEEN = re.compile(rb"^seq (\d+) host: (burst \d+)$", re.MULTILINE)
BURST = 60


def test_the_example_imports_public_names_only() -> None:
    tree = ast.parse(EXAMPLE.read_text())
    modules = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("quart_mesh")
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.startswith("quart_mesh")
    }
    assert modules <= {"quart_mesh", "quart_mesh.events"}, modules


async def test_follows_falls_behind_resumes_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    data_dir = tmp_path / "mesh-data"
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "MESH_DATA_DIR": str(data_dir),
        "MESH_PORT": "0",
        "EVENTS_CAPACITY": "1",  # falls behind on any burst
        **node_env(data_dir),
    }
    process = await trio.lowlevel.open_process(
        [sys.executable, str(EXAMPLE)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
    )
    assert process.stdout is not None
    stdout = process.stdout
    output = bytearray()

    async def read() -> None:
        while chunk := await stdout.receive_some(4096):
            output.extend(chunk)

    async def said(pattern: re.Pattern[bytes]) -> bool:
        return pattern.search(output) is not None

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await wait_for(lambda: said(_LISTENING), seconds=30)
            match = _LISTENING.search(output)
            assert match is not None
            url = match.group(1).decode()
            async with httpx.AsyncClient(base_url=url, timeout=10) as http:
                login = await http.post(
                    "/api/auth/login", json={"name": "host", "password": "a long passphrase"}
                )
                assert login.status_code == 200, login.text
                body = login.json()
                host = User(body["participantId"], body["name"], body["token"])
                rooms = (await http.get("/api/rooms", headers=host.headers)).json()
                (room_id,) = [r["roomId"] for r in rooms if r["name"] == "Town Square"]

                async def post(content: str) -> None:
                    r = await http.post(
                        f"/api/rooms/{room_id}/messages",
                        json={"content": content},
                        headers=host.headers,
                    )
                    assert r.status_code == 201, r.text

                await post("ready")
                await wait_for(lambda: said(re.compile(rb"host: ready$", re.M)), seconds=20)
                async with trio.open_nursery() as burst:  # concurrent: one commit, many events
                    for n in range(BURST):
                        burst.start_soon(post, f"burst {n}")

                async def all_seen() -> bool:
                    return len(_SEEN.findall(output)) >= BURST

                await wait_for(all_seen, seconds=30)
                async with connect(url, host) as socket:
                    process.send_signal(signal.SIGINT)
                    code = None
                    with trio.fail_after(20):
                        try:
                            while True:
                                await socket.ws.get_message()
                        except ConnectionClosed as closed:
                            code = closed.reason.code if closed.reason else None
                    assert code == 1001
            with trio.fail_after(30):
                assert await process.wait() == 0, output.decode(errors="replace")
    finally:
        if process.returncode is None:
            with trio.CancelScope(shield=True):
                process.kill()
                await process.wait()
    text = output.decode(errors="replace")
    seen = [(int(seq), content.decode()) for seq, content in _SEEN.findall(output)]
    expected = sorted(f"burst {n}" for n in range(BURST))
    assert sorted(content for _, content in seen) == expected, text
    seqs = [seq for seq, _ in seen]
    assert seqs == sorted(set(seqs)), "out of order or repeated"
    assert "fell behind after cursor" in text, text
    assert "Traceback" not in text, text
    assert text.rstrip().endswith("stopped"), text
