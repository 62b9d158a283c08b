"""The ``mesh-bridge`` command against a real node, as real processes.

Rules: loopback only, port 0 (or a port just found free, for the restart
test), each bridge a real subprocess (``python -m mesh_bridge``, or the built
``.pyz`` under an isolated interpreter) whose log goes to a file, stopped by
signal and waited for; every wait bounded by ``trio.fail_after``; the scripts
the bridge runs are real files, and the test checks that none outlive it.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.e2e.test_cli_restart import ServerProcess
from tests.helpers import Mesh, User, connect, wait_for

pytestmark = pytest.mark.e2e

BRIDGE_DIR = Path(__file__).resolve().parents[2] / "bridge"
if importlib.util.find_spec("mesh_bridge") is None:  # not installed: the source tree
    sys.path.insert(0, str(BRIDGE_DIR))

from mesh_bridge.backoff import Backoff  # noqa: E402
from mesh_bridge.cli import parse_config  # noqa: E402
from mesh_bridge.config import websocket_url  # noqa: E402
from mesh_bridge.errors import StateFileError  # noqa: E402
from mesh_bridge.handler import clean_content  # noqa: E402
from mesh_bridge.processes import LineReader  # noqa: E402
from mesh_bridge.state import load_cursor, save_cursor  # noqa: E402


class BridgeProcess:
    """One ``mesh-bridge`` process; its stderr (the log) goes to a file."""

    def __init__(self, log_path: Path, command: list[str]) -> None:
        self.log_path = log_path
        self.command = command
        self.process: trio.Process | None = None

    async def start(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(BRIDGE_DIR), env.get("PYTHONPATH", "")) if p
        )
        env.pop("MESH_TOKEN", None)
        with open(self.log_path, "ab") as log:
            self.process = await trio.lowlevel.open_process(
                self.command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env
            )

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def wait_for_log(self, pattern: str, seconds: float = 15) -> re.Match[str]:
        """The first match of *pattern* in the log (polled: the bridge is
        another process); fails if the bridge exits first."""
        found: list[re.Match[str]] = []

        async def logged() -> bool:
            match = re.search(pattern, self.log)
            if match is None:
                assert self.process is not None
                assert self.process.poll() is None, f"bridge exited:\n{self.log}"
                return False
            found.append(match)
            return True

        await wait_for(logged, seconds)
        return found[0]

    async def stop(self, signum: int = signal.SIGTERM) -> int:
        assert self.process is not None
        self.process.send_signal(signum)
        with trio.fail_after(15):
            return await self.process.wait()

    async def close(self) -> None:
        """Kill if still running, and wait (also when the test is cancelled)."""
        if self.process is None:
            return
        with trio.CancelScope(shield=True):
            if self.process.poll() is None:
                self.process.kill()
            await self.process.wait()


def bridge_command(base_url: str, token: str, *args: str) -> list[str]:
    mesh = base_url.replace("http://", "ws://")
    return [sys.executable, "-m", "mesh_bridge", "--mesh", mesh, "--token", token, *args]


@asynccontextmanager
async def running_bridge(
    tmp_path: Path, command: list[str], *, ready: bool = True
) -> AsyncIterator[BridgeProcess]:
    """A bridge process, connected (its "connected" log line seen) unless
    *ready* is false; killed and waited for on exit."""
    index = len(list(tmp_path.glob("bridge-*.log")))
    bridge = BridgeProcess(tmp_path / f"bridge-{index}.log", command)
    await bridge.start()
    try:
        if ready:
            await bridge.wait_for_log(r"connected to \S+ as ")
        yield bridge
    finally:
        await bridge.close()


async def bootstrap_bot(mesh: Mesh, name: str, *room_ids: str) -> User:
    r = await mesh.http.post("/api/agents/bootstrap", json={"name": name, "type": "nanoclaw"})
    assert r.status_code == 201, r.text
    bot = User(r.json()["agentId"], name, r.json()["token"])
    for room_id in room_ids:
        await mesh.join(bot, room_id)
    return bot


async def room_with_people(mesh: Mesh, name: str) -> tuple[User, str]:
    """Set the mesh up; alice (a person) in a new room. Returns alice, room id."""
    owner = await mesh.setup()
    alice = await mesh.register("alice")
    room_id = (await mesh.create_room(owner, name))["roomId"]
    await mesh.join(alice, room_id)
    return alice, room_id


async def contents(mesh: Mesh, user: User, room_id: str) -> list[str]:
    return [m["content"] for m in await mesh.messages(user, room_id, limit=100)]


def script(path: Path, text: str, *, executable: bool = True) -> Path:
    path.write_text(text)
    path.chmod(0o755 if executable else 0o644)
    return path


def processes_with(marker: str) -> list[int]:
    """Processes on this machine whose command line contains *marker*."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


REPLY_SCRIPT = """#!/bin/sh
printf '%s|%s|%s|%s|%s\\n' "$MESH_MESSAGE_ID" "$MESH_ROOM_ID" "$MESH_SENDER_ID" \
  "$MESH_CURSOR" "$MESH_SENDER_NAME" >> "{seen}"
case "$MESH_CONTENT" in
  fail*) echo "not sent"; exit 1 ;;
  hang*) echo "not sent"; "{sleeper}" 30; echo "late" ;;
  quiet*) exit 0 ;;
esac
echo "$MESH_SENDER_NAME said $MESH_CONTENT"
"""


async def test_exec_replies_and_outlives_failing_scripts(
    tmp_path: Path, base_url: str, mesh: Mesh
) -> None:
    alice, room_id = await room_with_people(mesh, "exec")
    bot = await bootstrap_bot(mesh, "exec-bot", room_id)
    seen = tmp_path / "seen.txt"
    sleeper = tmp_path / "sleeper"  # `sleep` under a name no other test uses
    sleep = shutil.which("sleep")
    assert sleep is not None
    sleeper.symlink_to(sleep)
    reply = script(tmp_path / "reply.sh", REPLY_SCRIPT.format(seen=seen, sleeper=sleeper))
    command = bridge_command(base_url, bot.token, "--exec", str(reply), "--timeout", "1")
    async with running_bridge(tmp_path, command) as bridge, connect(base_url, alice) as ws:
        sent = await mesh.send(alice, room_id, "hello there")
        answer = await ws.expect("message", timeout=10, content="alice said hello there")
        assert (answer["senderId"], answer["roomId"]) == (bot.participant_id, room_id)
        # a script that fails, one that hangs past --timeout and one that prints
        # nothing give no reply, and the next message is handled as usual
        for text in ("fail please", "hang please", "quiet please", "after all that"):
            await mesh.send(alice, room_id, text)
        await ws.expect("message", timeout=15, content="alice said after all that")
        # the bridge handles messages one at a time and its replies go out in
        # order: a late reply would come before the next one
        await mesh.send(alice, room_id, "marker")
        frames = await ws.until("message", timeout=10, content="alice said marker")
        said = [f["content"] for f in frames if f["type"] == "message"]
        assert said == ["marker", "alice said marker"]
        assert "script exited with status 1" in bridge.log
        assert "script timed out after 1 s" in bridge.log
        assert processes_with(str(sleeper)) == []  # the hung script was killed
        assert await bridge.stop(signal.SIGTERM) == 0
    assert "received SIGTERM, stopping" in bridge.log
    assert "Traceback" not in bridge.log
    assert await contents(mesh, alice, room_id) == [
        "hello there",
        "alice said hello there",
        "fail please",
        "hang please",
        "quiet please",
        "after all that",
        "alice said after all that",
        "marker",
        "alice said marker",
    ]
    lines = seen.read_text().splitlines()
    assert len(lines) == 6
    assert lines[0] == "|".join(
        [sent["messageId"], room_id, alice.participant_id, sent["cursor"], "alice"]
    )


async def test_own_and_other_bots_messages_get_no_reply(
    tmp_path: Path, base_url: str, mesh: Mesh
) -> None:
    alice, room_id = await room_with_people(mesh, "guarded")
    bot = await bootstrap_bot(mesh, "echo-bridge", room_id)
    reply = script(tmp_path / "echo.sh", 'echo "echo: $MESH_CONTENT"\n')
    async with running_bridge(
        tmp_path, bridge_command(base_url, bot.token, "--exec", str(reply))
    ) as bridge:
        # a bot that joins after the bridge connected is learnt from the event
        other = await bootstrap_bot(mesh, "other-bot", room_id)
        async with connect(base_url, alice) as ws:
            await mesh.send(other, room_id, "from a bot")
            await mesh.send(bot, room_id, "from myself")
            await mesh.send(alice, room_id, "from a person")
            await ws.expect("message", timeout=10, content="echo: from a person")
            # its own reply is not answered again, no loop: the bridge handles
            # messages in order, so that answer would come before the next one
            await mesh.send(alice, room_id, "marker")
            frames = await ws.until("message", timeout=10, content="echo: marker")
            said = [f["content"] for f in frames if f["type"] == "message"]
            assert said == ["marker", "echo: marker"]
        assert "from bot other-bot ignored" in bridge.log
    assert await contents(mesh, alice, room_id) == [
        "from a bot",
        "from myself",
        "from a person",
        "echo: from a person",
        "marker",
        "echo: marker",
    ]


class HookServer:
    """A minimal HTTP/1.1 endpoint on loopback that records what it is sent
    and answers according to the message's content."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.headers: list[str] = []

    async def handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            match = re.search(rb"(?im)^content-length: *(\d+)", head)
            assert match is not None, head
            while len(body) < int(match.group(1)):
                body += await stream.receive_some(65536)
            self.headers.append(head.decode())
            event = json.loads(body)
            self.events.append(event)
            status, media_type, payload = await self.answer(event, stream)
            response = (
                f"HTTP/1.1 {status}\r\nContent-Type: {media_type}\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
            ).encode() + payload
            with contextlib.suppress(trio.BrokenResourceError):  # the bridge gave up
                await stream.send_all(response)

    async def answer(
        self, event: dict[str, Any], stream: trio.SocketStream
    ) -> tuple[str, str, bytes]:
        text = event["content"]
        if text.startswith("json"):
            body = {"content": f"json reply to {event['senderName']}: {text}"}
            return "200 OK", "application/json", json.dumps(body).encode()
        if text.startswith("text"):
            return "200 OK", "text/plain; charset=utf-8", f"  text reply: {text}\n".encode()
        if text.startswith("boom"):
            return "500 Internal Server Error", "text/plain", b"it broke"
        if text.startswith("slow"):
            # deliberately too slow: answer only once the bridge has hung up
            # (after its --timeout), or after 10 s if it never does
            with trio.move_on_after(10):
                while await stream.receive_some(65536):
                    pass
            return "200 OK", "text/plain", b"too late"
        return "204 No Content", "text/plain", b""


async def test_http_posts_events_and_sends_the_answers(
    tmp_path: Path, base_url: str, mesh: Mesh, nursery: trio.Nursery
) -> None:
    alice, room_id = await room_with_people(mesh, "hooks")
    bot = await bootstrap_bot(mesh, "http-bot", room_id)
    hook = HookServer()
    listeners = await nursery.start(partial(trio.serve_tcp, hook.handle, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    command = bridge_command(
        base_url, bot.token, "--http", f"http://127.0.0.1:{port}/hook", "--timeout", "1"
    )
    async with running_bridge(tmp_path, command) as bridge, connect(base_url, alice) as ws:
        sent = await mesh.send(alice, room_id, "json please")
        await ws.expect("message", timeout=10, content="json reply to alice: json please")
        for text in ("boom", "slow", "nothing", "text please"):
            await mesh.send(alice, room_id, text)
        await ws.expect("message", timeout=15, content="text reply: text please")
        # nothing late from "slow": the bridge handles messages in order
        await mesh.send(alice, room_id, "text marker")
        frames = await ws.until("message", timeout=10, content="text reply: text marker")
        said = [f["content"] for f in frames if f["type"] == "message"]
        assert said == ["text marker", "text reply: text marker"]
        assert "answered 500" in bridge.log
        assert "did not answer within 1 s" in bridge.log
    # the endpoint got each event exactly as the node sent it
    assert [e["content"] for e in hook.events] == [
        "json please",
        "boom",
        "slow",
        "nothing",
        "text please",
        "text marker",
    ]
    assert hook.events[0] == {"type": "message", **sent}
    assert "content-type: application/json" in hook.headers[0].lower()
    assert await contents(mesh, alice, room_id) == [
        "json please",
        "json reply to alice: json please",
        "boom",
        "slow",
        "nothing",
        "text please",
        "text reply: text please",
        "text marker",
        "text reply: text marker",
    ]


PIPE_SCRIPT = """
import json, os, sys
with open(sys.argv[1], "a") as starts:
    starts.write(f"{os.getpid()}\\n")
for line in sys.stdin:
    event = json.loads(line)
    text = event["content"]
    if text == "quit":
        sys.exit(3)
    if text == "elsewhere":
        reply = {"content": "sent to the other room", "roomId": sys.argv[2]}
        print(json.dumps(reply), flush=True)
    else:
        print(f"pipe got {text} from {event['senderName']}", flush=True)
"""


async def test_pipe_process_gets_lines_and_is_restarted(
    tmp_path: Path, base_url: str, mesh: Mesh
) -> None:
    alice, room_id = await room_with_people(mesh, "piped")
    other_room = (await mesh.create_room(alice, "elsewhere"))["roomId"]
    bot = await bootstrap_bot(mesh, "pipe-bot", room_id, other_room)
    other = await bootstrap_bot(mesh, "chatty-bot", room_id)
    program = script(tmp_path / "pipe_bot.py", PIPE_SCRIPT)
    starts = tmp_path / "starts.txt"
    pipe = f"exec {sys.executable} {program} {starts} {other_room}"
    command = bridge_command(base_url, bot.token, "--pipe", pipe, "--include-bots")
    async with running_bridge(tmp_path, command) as bridge, connect(base_url, alice) as ws:
        await mesh.send(alice, room_id, "one")
        await ws.expect("message", timeout=10, content="pipe got one from alice")
        await mesh.send(alice, room_id, "elsewhere")
        got = await ws.expect("message", timeout=10, content="sent to the other room")
        assert got["roomId"] == other_room
        # --include-bots: another bot's message is handled too
        await mesh.send(other, room_id, "beep")
        await ws.expect("message", timeout=10, content="pipe got beep from chatty-bot")
        # the process exits: it is started again and gets the next message
        await mesh.send(alice, room_id, "quit")
        await bridge.wait_for_log(r"pipe process exited with status 3; restarting")
        await mesh.send(alice, room_id, "two")
        await ws.expect("message", timeout=10, content="pipe got two from alice")
        pids = [int(p) for p in starts.read_text().split()]
        assert len(pids) == 2
        assert await bridge.stop(signal.SIGINT) == 0
    assert "received SIGINT, stopping" in bridge.log
    assert "Traceback" not in bridge.log
    assert processes_with(str(program)) == []  # the bridge stopped its process
    assert await contents(mesh, alice, room_id) == [
        "one",
        "pipe got one from alice",
        "elsewhere",
        "beep",
        "pipe got beep from chatty-bot",
        "quit",
        "two",
        "pipe got two from alice",
    ]


async def run_bridge(*args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(BRIDGE_DIR)}
    env.pop("MESH_TOKEN", None)
    with trio.fail_after(20):
        return await trio.run_process(
            [sys.executable, "-m", "mesh_bridge", *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
        )


async def test_usage_errors_exit_2(tmp_path: Path) -> None:
    mesh = ["--mesh", "ws://127.0.0.1:9", "--token", "t"]
    cases = [
        (mesh, "one of the arguments --exec --http --pipe is required"),
        ([*mesh, "--exec", __file__, "--pipe", "cat"], "not allowed with argument"),
        ([*mesh, "--http", "http://x", "--pipe", "cat"], "not allowed with argument"),
        (["--mesh", "ws://127.0.0.1:9", "--pipe", "cat"], "no token"),
        (["--mesh", "ftp://x", "--token", "t", "--pipe", "cat"], "--mesh:"),
        ([*mesh, "--exec", str(tmp_path / "missing.sh")], "is not a file"),
        ([*mesh, "--http", "localhost:80"], "--http:"),
        ([*mesh, "--pipe", "cat", "--timeout", "0"], "--timeout"),
    ]
    async with trio.open_nursery() as nursery:
        results: dict[int, subprocess.CompletedProcess[bytes]] = {}

        async def one(index: int, args: list[str]) -> None:
            results[index] = await run_bridge(*args)

        for index, (args, _) in enumerate(cases):
            nursery.start_soon(one, index, args)
    for index, (_, expected) in enumerate(cases):
        result = results[index]
        assert result.returncode == 2, (cases[index], result)
        stderr = result.stderr.decode()
        assert stderr.startswith("usage: mesh-bridge"), stderr
        assert expected in stderr, stderr
        assert "Traceback" not in stderr
    result = await run_bridge("--help")
    assert result.returncode == 0
    for flag in ("--mesh", "--token", "--exec", "--http", "--pipe", "--include-bots", "--state"):
        assert flag in result.stdout.decode()


async def test_refused_token_or_address_exits_1(tmp_path: Path, base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    ws_url = base_url.replace("http://", "ws://")
    for mesh_url, expected in [
        (ws_url, "the node refused the token (invalid_token)"),
        (base_url + "/api/", "refused the WebSocket upgrade with HTTP 404"),
    ]:
        result = await run_bridge("--mesh", mesh_url, "--token", "not-a-token", "--pipe", "cat")
        stderr = result.stderr.decode()
        assert result.returncode == 1, stderr
        assert expected in stderr, stderr
        assert "Traceback" not in stderr
    # deleting the agent ends its sessions: the bridge stops instead of retrying
    bot = await bootstrap_bot(mesh, "short-lived")
    command = bridge_command(base_url, bot.token, "--pipe", "cat")
    async with running_bridge(tmp_path, command) as bridge:
        r = await mesh.http.delete(f"/api/agents/{bot.participant_id}", headers=owner.headers)
        assert r.status_code == 200, r.text
        assert bridge.process is not None
        with trio.fail_after(10):
            assert await bridge.process.wait() == 1
    assert "the node refused the token (removed)" in bridge.log


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_reconnects_and_resumes_without_losing_or_repeating(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    port = free_port()
    data_dir = tmp_path / "mesh-data"
    nodes = [ServerProcess(data_dir, "--port", str(port))]
    try:
        await _restart_and_resume(tmp_path, nursery, nodes, port)
    finally:
        with trio.CancelScope(shield=True):
            for node in nodes:
                if getattr(node, "process", None) is not None and node.process.poll() is None:
                    node.process.kill()
                    await node.process.wait()


async def _restart_and_resume(
    tmp_path: Path, nursery: trio.Nursery, nodes: list[ServerProcess], port: int
) -> None:
    url = await nodes[0].start(nursery)
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        alice, room_id = await room_with_people(mesh, "resume")
        bot = await bootstrap_bot(mesh, "resume-bot", room_id)
    reply = script(tmp_path / "echo.sh", 'echo "got $MESH_CONTENT"\n')
    state = tmp_path / "bridge-state.json"
    command = bridge_command(url, bot.token, "--exec", str(reply), "--state", str(state))

    async def replies(mesh: Mesh) -> Counter[str]:
        return Counter(await contents(mesh, alice, room_id))

    async with running_bridge(tmp_path, command) as bridge:
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            mesh = Mesh(http)
            await mesh.send(alice, room_id, "one")
            await wait_for(lambda: _has(replies(mesh), "got one"), 15)
        # the node goes away and comes back on the same port and data folder
        assert await nodes[0].stop() == 0
        await bridge.wait_for_log(r"connection closed by the node \(1001")
        nodes.append(ServerProcess(tmp_path / "mesh-data", "--port", str(port)))
        assert await nodes[1].start(nursery) == url
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            mesh = Mesh(http)
            # sent before or while the bridge reconnects: each handled once
            for text in ("two", "three"):
                await mesh.send(alice, room_id, text)
            await bridge.wait_for_log(r"connected to \S+ as \S+; resuming after cursor")
            await wait_for(lambda: _has(replies(mesh), "got two", "got three"), 15)
        assert await bridge.stop() == 0

    # while no bridge runs, a message arrives; the next bridge resumes from the
    # cursor in its state file and handles that message, and only that one
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        await mesh.send(alice, room_id, "four")
        async with running_bridge(tmp_path, command) as bridge:
            assert "state file: resuming after cursor" in bridge.log
            await wait_for(lambda: _has(replies(mesh), "got four"), 15)
            # messages are handled in order and "four" is the newest, so any
            # repeat of an older one would already show
            assert await bridge.stop() == 0
        assert bridge.log.count(" from alice in room ") == 1
        final = await contents(mesh, alice, room_id)
    assert Counter(final) == Counter(
        ["one", "got one", "two", "got two", "three", "got three", "four", "got four"]
    )
    saved = json.loads(state.read_text())
    assert saved["mesh"] == url.replace("http://", "ws://") + "/ws"
    assert int(saved["cursor"]) >= 7  # "four" (7), or the bridge's own reply (8)
    assert await nodes[1].stop() == 0


async def _has(counter: Awaitable[Counter[str]], *texts: str) -> bool:
    """Whether each of *texts* is present; fails if any is there twice."""
    counts = await counter
    assert all(counts[t] <= 1 for t in texts), counts
    return all(counts[t] == 1 for t in texts)


def test_bridge_does_not_import_the_server() -> None:
    for path in (BRIDGE_DIR / "mesh_bridge").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not any(n.split(".")[0] == "quart_mesh" for n in names), (path, names)


async def test_single_file_build_runs_with_a_bare_interpreter(
    tmp_path: Path, base_url: str, mesh: Mesh
) -> None:
    pyz = tmp_path / "dist" / "mesh-bridge.pyz"
    with trio.fail_after(120):
        await trio.run_process(
            [sys.executable, str(BRIDGE_DIR / "build_pyz.py"), "--output", str(pyz)],
            capture_stdout=True,
        )
    assert pyz.is_file()
    bare = [sys.executable, "-I", "-S"]  # no site-packages, no PYTHONPATH
    result = await trio.run_process([*bare, "-c", "import trio"], capture_stderr=True, check=False)
    assert result.returncode != 0, "the interpreter must not have trio itself"
    result = await trio.run_process([*bare, str(pyz), "--help"], capture_stdout=True)
    assert b"--pipe COMMAND" in result.stdout
    # httpx (with certifi's bundle, read from inside the zip) works too
    check = (
        "import sys; sys.path.insert(0, sys.argv[1]); import httpx, trio, certifi\n"
        "async def main():\n"
        "    async with httpx.AsyncClient(): pass\n"
        "trio.run(main); print(trio.__file__)"
    )
    result = await trio.run_process([*bare, "-c", check, str(pyz)], capture_stdout=True)
    assert result.stdout.decode().startswith(str(pyz)), result.stdout

    alice, room_id = await room_with_people(mesh, "zipped")
    bot = await bootstrap_bot(mesh, "zip-bot", room_id)
    # not executable: the bridge runs it with sh
    reply = script(tmp_path / "zip.sh", 'echo "zipped: $MESH_CONTENT"\n', executable=False)
    mesh_url = base_url.replace("http://", "ws://")
    command = [*bare, str(pyz), "--mesh", mesh_url, "--token", bot.token, "--exec", str(reply)]
    async with running_bridge(tmp_path, command) as bridge, connect(base_url, alice) as ws:
        await mesh.send(alice, room_id, "hi")
        await ws.expect("message", timeout=10, content="zipped: hi")
        assert await bridge.stop() == 0
    assert "Traceback" not in bridge.log


# -- the pieces, in-process ------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("ws://127.0.0.1:8000", "ws://127.0.0.1:8000/ws"),
        ("ws://127.0.0.1:8000/", "ws://127.0.0.1:8000/ws"),
        ("ws://127.0.0.1:8000/ws", "ws://127.0.0.1:8000/ws"),
        ("ws://127.0.0.1:8000/ws/", "ws://127.0.0.1:8000/ws"),
        ("http://127.0.0.1:8000", "ws://127.0.0.1:8000/ws"),
        ("https://mesh.example.org", "wss://mesh.example.org/ws"),
        ("wss://mesh.example.org/chat/", "wss://mesh.example.org/chat/ws"),
        ("WS://[::1]:9000", "ws://[::1]:9000/ws"),
    ],
)
def test_mesh_addresses(given: str, expected: str) -> None:
    assert websocket_url(given) == expected


@pytest.mark.parametrize("given", ["ftp://x", "127.0.0.1:8000", "ws://", "ws://h:port"])
def test_bad_mesh_addresses(given: str) -> None:
    with pytest.raises(ValueError, match=r"address|host|port"):
        websocket_url(given)


def test_token_from_the_environment(tmp_path: Path) -> None:
    args = ["--mesh", "ws://h:1", "--pipe", "cat"]
    config, level = parse_config(args, environ={"MESH_TOKEN": " abc "})
    assert (config.token, config.mode, config.target, level) == ("abc", "pipe", "cat", "INFO")
    config, _ = parse_config([*args, "--token", "flag"], environ={"MESH_TOKEN": "env"})
    assert config.token == "flag"
    reply = script(tmp_path / "r.sh", "echo hi\n")
    config, _ = parse_config(["--mesh", "ws://h:1", "--token", "t", "--exec", str(reply)], {})
    assert (config.mode, config.target, config.timeout) == ("exec", str(reply), 30.0)


def test_reply_content_is_cleaned_and_cut() -> None:
    assert clean_content("  hi\x00 there \n", 100) == "hi there"
    assert clean_content(" \n\t", 100) is None
    # cut on a character boundary: "é" is two bytes
    assert clean_content("aé" * 3, 4) == "aéa"
    assert clean_content("é" * 3, 1) is None


def test_backoff_doubles_caps_and_resets() -> None:
    backoff = Backoff(0.5, 4)
    assert [backoff.next_delay() for _ in range(6)] == [0.5, 1, 2, 4, 4, 4]
    backoff.reset()
    assert backoff.next_delay() == 0.5


async def test_lines_are_bounded() -> None:
    send, receive = trio.testing.memory_stream_one_way_pair()
    lines = LineReader(receive, limit=8)
    # a long line whole in one chunk, and one that arrives in pieces
    await send.send_all(b"short\n" + b"x" * 20 + b"\nnext\n" + b"y" * 10)
    assert [await lines.next_line() for _ in range(3)] == [b"short", b"x" * 8, b"next"]
    assert await lines.next_line() == b"y" * 8
    await send.send_all(b"y" * 10 + b"\nlast")
    await send.aclose()
    assert [await lines.next_line() for _ in range(2)] == [b"last", None]


async def test_state_file(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    assert load_cursor(path, "ws://a/ws") is None
    await save_cursor(path, "ws://a/ws", "41")
    await save_cursor(path, "ws://a/ws", "42")
    assert load_cursor(path, "ws://a/ws") == "42"
    assert load_cursor(path, "ws://b/ws") is None  # saved for another node
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]
    for text in ("", "{}", '{"mesh": "ws://a/ws", "cursor": "-1"}', "[1]"):
        path.write_text(text)
        with pytest.raises(StateFileError, match="delete it"):
            load_cursor(path, "ws://a/ws")


async def test_a_ping_that_crosses_the_bridges_close_ends_it_cleanly(tmp_path: Path) -> None:
    """A node's ping that arrives after the bridge sent its close frame: the
    bridge does not answer it (wsproto refuses a pong then, and trio-websocket
    0.12.2 raises that from its reader, python-trio/trio-websocket#184) and
    stops with status 0. The node here is wsproto over a socket, so the ping
    is sent exactly then."""
    from wsproto import ConnectionType, WSConnection
    from wsproto.events import AcceptConnection, CloseConnection, Request, TextMessage

    crossed = trio.Event()

    async def node(stream: trio.SocketStream) -> None:
        ws = WSConnection(ConnectionType.SERVER)
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, Request):
                    await stream.send_all(ws.send(AcceptConnection()))
                elif isinstance(event, TextMessage) and '"authenticate"' in event.data:
                    for frame in (
                        {"type": "auth_ok", "participantId": "p-bridge"},
                        {"type": "snapshot", "participants": [], "cursor": "0"},
                    ):
                        await stream.send_all(ws.send(TextMessage(json.dumps(frame))))
                elif isinstance(event, CloseConnection):
                    # the bridge closed first: a ping crosses its close frame
                    # (the bytes of one: wsproto will not send it in this state)
                    await stream.send_all(b"\x89\x04late")
                    await stream.send_all(ws.send(event.response()))
                    crossed.set()
                    await stream.aclose()
                    return

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, node, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        command = [sys.executable, "-m", "mesh_bridge", "--mesh", f"ws://127.0.0.1:{port}"]
        command += ["--token", "t", "--pipe", "cat"]
        async with running_bridge(tmp_path, command) as bridge:
            await bridge.wait_for_log("handling messages after cursor 0")
            assert await bridge.stop() == 0, bridge.log
        assert crossed.is_set()
        nursery.cancel_scope.cancel()
    assert "Traceback" not in bridge.log, bridge.log
