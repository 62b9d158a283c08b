"""The documentation runs as written (decision 0067).

- Every ```python block in ``docs/**/*.md`` and ``README.md`` is a complete
  program: it is written to a file in a fresh temporary folder and run there
  as ``python snippet.py`` (stdin empty, the repository on ``PYTHONPATH``,
  no ``MESH_*`` settings of this process), and must exit 0.
- A block whose first line is ``# runs until Ctrl+C`` serves on a free port
  (``MESH_PORT=0``) and gets SIGINT once it is ready (it printed a line, or
  logged ``quart-mesh listening on``), and must then exit 0.
- A block whose first line is ``# file: NAME`` is a file a shell sequence of
  its page uses: written there as NAME, not run on its own.
- A block that reads ``MESH_URL`` from the environment talks to a node the
  reader already runs: the test serves a real one on a free loopback port (an
  owner set up, a model ``gpt`` on a fake OpenAI upstream) and gives the
  block ``MESH_URL`` and ``MESH_TOKEN`` (the owner's token), the names the
  shell sequences of the docs export.
- docs/bridge.md's copy-paste sequence (build the single-file bridge, set
  up, bootstrap a bot, find the room, join, run it with the ``--http``
  handler of that page) runs against a served node as real processes.
- The site, with the API reference generated from the docstrings, builds
  with ``mkdocs build --strict``: a broken link or a docstring mkdocstrings
  cannot render fails.

Rules: loopback only, port 0, every wait bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trio

from quart_mesh import Settings, create_app, serve
from quart_mesh.config import ModelConfig
from tests.helpers import Mesh, wait_for
from tests.upstream import Upstream

pytestmark = [pytest.mark.e2e, pytest.mark.store_free]

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
SNIPPET_SECONDS = 60


@dataclass(frozen=True)
class Snippet:
    path: Path
    line: int  # of the opening fence
    code: str
    language: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def code_blocks(path: Path) -> list[Snippet]:
    """The fenced code blocks of one Markdown file, with their languages."""
    text = path.read_text()
    return [
        Snippet(path, text.count("\n", 0, match.start()) + 1, match.group(2), match.group(1))
        for match in _FENCE.finditer(text)
    ]


_FILE = re.compile(r"\A# file: (\S+)\n")


def file_name(snippet: Snippet) -> str | None:
    """The name a block is saved under when its first line is ``# file: NAME``:
    a file the page's shell sequence uses (run there, not on its own)."""
    match = _FILE.match(snippet.code)
    return match.group(1) if match else None


PYTHON_SNIPPETS = [
    s
    for doc in DOCUMENTS
    for s in code_blocks(doc)
    if s.language == "python" and file_name(s) is None
]


def clean_environment() -> dict[str, str]:
    """This process's environment without its ``MESH_*`` settings, with the
    repository (and the bridge's source) importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESH_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "bridge")])
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class ServedNode:
    url: str
    token: str
    mesh: Mesh


@asynccontextmanager
async def serve_node(data_dir: Path, *, set_up: bool = True) -> AsyncIterator[ServedNode]:
    """A node served in this process on a free port, set up by its owner
    (unless not *set_up*: ``token`` is then empty), with a model ``gpt``
    answered by the tests' fake OpenAI upstream; stopped on exit."""
    async with trio.open_nursery() as nursery:
        upstream = await Upstream().start(nursery)
        models = (ModelConfig("gpt", upstream, "echo-model"),)
        app = create_app(Settings(data_dir=data_dir, models=models))
        url: str = await nursery.start(
            lambda task_status: serve(app, port=0, task_status=task_status)
        )
        async with httpx.AsyncClient(base_url=url, timeout=15) as http:
            mesh = Mesh(http)
            token = (await mesh.setup()).token if set_up else ""
            yield ServedNode(url, token, mesh)
        nursery.cancel_scope.cancel()


UNTIL_CTRL_C = "# runs until Ctrl+C"
#: what serve() logs once it listens
READY_LOG = b"quart-mesh listening on"


async def run_snippet(
    snippet: Snippet, cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[bytes]:
    script = cwd / "snippet.py"
    script.write_text(snippet.code)
    if snippet.code.startswith(UNTIL_CTRL_C):
        return await run_until_ctrl_c(script, cwd, env)
    with trio.fail_after(SNIPPET_SECONDS):
        return await trio.run_process(
            [sys.executable, str(script)],
            cwd=cwd,
            env=env,
            stdin=b"",
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


async def run_until_ctrl_c(
    script: Path, cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[bytes]:
    """A program that serves until Ctrl+C: SIGINT once it is ready (it
    printed a line, or logged that it listens: ``quart-mesh listening on``);
    what it printed, and how it exited. It serves on a free port
    (``MESH_PORT=0``), as a reader would on 8000."""
    process = await trio.lowlevel.open_process(
        [sys.executable, str(script)],
        cwd=cwd,
        env={**env, "MESH_PORT": "0"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    stdout, stderr = bytearray(), bytearray()
    ready = trio.Event()

    def said_ready() -> bool:
        return b"\n" in stdout or READY_LOG in stderr

    async def read(stream: trio.abc.ReceiveStream, into: bytearray) -> None:
        while chunk := await stream.receive_some():
            into += chunk
            if said_ready():
                ready.set()
        ready.set()  # it exited before it was ready: its status tells

    try:
        with trio.fail_after(SNIPPET_SECONDS):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read, process.stdout, stdout)
                nursery.start_soon(read, process.stderr, stderr)
                await ready.wait()
                if process.poll() is None:
                    process.send_signal(signal.SIGINT)
            await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def does_something(code: str) -> bool:
    """Whether a program calls something beyond defining and importing: a
    block of definitions only would run without running anything."""
    definitions = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    for statement in ast.parse(code).body:
        if isinstance(statement, definitions):
            continue
        if any(isinstance(node, ast.Call | ast.Await) for node in ast.walk(statement)):
            return True
        if not isinstance(statement, ast.Assign | ast.AnnAssign | ast.Expr):
            return True  # a loop, a with block, an assert, ...
    return False


async def test_a_program_that_runs_until_ctrl_c_gets_it(tmp_path: Path) -> None:
    # the harness itself, on a program that waits for SIGINT as documented ones do
    code = (
        f"{UNTIL_CTRL_C}\n"
        "import signal\nimport trio\n\n\n"
        "async def main() -> None:\n"
        "    with trio.open_signal_receiver(signal.SIGINT) as signals:\n"
        "        print('ready', flush=True)\n"
        "        async for signum in signals:\n"
        "            print('stopped by', signal.Signals(signum).name)\n"
        "            return\n\n\n"
        "trio.run(main)\n"
    )
    result = await run_snippet(Snippet(tmp_path / "a.md", 1, code, "python"), tmp_path, {})
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().splitlines() == ["ready", "stopped by SIGINT"]


def test_the_documents_have_python_snippets() -> None:
    # the extraction finds blocks (a parse that finds none would pass vacuously)
    names = {s.path.name for s in PYTHON_SNIPPETS}
    assert {"embedding.md", "vault.md", "models.md"} <= names, names


def test_every_named_file_is_used_by_a_sequence_of_its_page() -> None:
    for doc in DOCUMENTS:
        blocks = code_blocks(doc)
        shell = "\n".join(b.code for b in blocks if b.language in ("sh", "bash"))
        for block in blocks:
            name = file_name(block)
            if block.language == "python" and name is not None:
                assert name in shell, f"{block.name}: no sh block of the page uses {name}"


@pytest.mark.parametrize("snippet", PYTHON_SNIPPETS, ids=lambda s: s.name)
async def test_python_snippet_runs(snippet: Snippet, tmp_path: Path) -> None:
    assert does_something(snippet.code), f"{snippet.name} only defines things: call them"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = clean_environment()
    if "MESH_URL" in snippet.code:
        async with serve_node(tmp_path / "node") as node:
            env |= {"MESH_URL": node.url, "MESH_TOKEN": node.token}
            result = await run_snippet(snippet, cwd, env)
    else:
        result = await run_snippet(snippet, cwd, env)
    output = (result.stdout + result.stderr).decode(errors="replace")
    assert result.returncode == 0, f"{snippet.name} exited {result.returncode}:\n{output}"
    assert "Traceback" not in output, output


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_bridge_sequence_runs_as_written(tmp_path: Path) -> None:
    """docs/bridge.md, "From nothing to a running bot", pasted into bash in a
    clone (the bridge's sources only) beside a fresh node: the bot answers."""
    page = ROOT / "docs" / "bridge.md"
    blocks = code_blocks(page)
    (sequence,) = [b for b in blocks if b.language == "sh" and "build_pyz.py" in b.code]
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / "bridge").symlink_to(ROOT / "bridge")
    for block in blocks:
        if (name := file_name(block)) is not None:
            (clone / name).write_text(block.code)
    env = clean_environment()
    # `python` and `python3` are this interpreter (it has pip), as in a venv
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    env["PORT"] = str(free_port())
    log = tmp_path / "sequence.log"
    async with serve_node(tmp_path / "node", set_up=False) as node:
        env["MESH_URL"] = node.url
        with open(log, "wb") as out:
            process = await trio.lowlevel.open_process(
                ["bash", "-e", "-x", "-c", sequence.code],
                cwd=clone,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,  # its own process group: handler and bridge
            )
        try:
            # the build (pip), the set-up and the bridge's connection
            async def connected() -> bool:
                assert process.poll() is None, f"the sequence stopped:\n{_tail(log)}"
                return "connected to" in log.read_text(errors="replace")

            await wait_for(connected, seconds=90)
            # the owner (set up by the sequence) writes in Town Square
            login = await node.mesh.http.post(
                "/api/auth/login", json={"name": "admin", "password": "a long passphrase"}
            )
            owner = login.json()
            headers = {"Authorization": f"Bearer {owner['token']}"}
            rooms = (await node.mesh.http.get("/api/rooms", headers=headers)).json()
            (room_id,) = [r["roomId"] for r in rooms if r["name"] == "Town Square"]
            sent = await node.mesh.http.post(
                f"/api/rooms/{room_id}/messages", json={"content": "hello"}, headers=headers
            )
            assert sent.status_code == 201, sent.text

            async def answered() -> bool:
                page = await node.mesh.http.get(f"/api/rooms/{room_id}/messages", headers=headers)
                return any(m["content"] == "admin said: hello" for m in page.json())

            await wait_for(answered, seconds=20)
        finally:
            with trio.CancelScope(shield=True):
                os.killpg(process.pid, signal.SIGTERM)
                with trio.move_on_after(15):
                    await process.wait()
                if process.returncode is None:
                    os.killpg(process.pid, signal.SIGKILL)
                    await process.wait()
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, _tail(log)
    assert "built dist/mesh-bridge.pyz" in text, _tail(log)
    assert (clone / "dist" / "mesh-bridge.pyz").is_file()


def _tail(log: Path) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-30:])


async def test_the_site_and_its_api_reference_build_strictly(tmp_path: Path) -> None:
    """``mkdocs build --strict``: a broken link or anchor, a page left out of
    the build or a docstring mkdocstrings cannot render fails the build."""
    site = tmp_path / "site"
    with trio.fail_after(120):
        result = await trio.run_process(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
            cwd=ROOT,
            env=clean_environment(),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    log = result.stderr.decode(errors="replace")
    assert result.returncode == 0, log
    assert "WARNING" not in log, log
    # the reference pages hold what the docstrings say
    services = (site / "reference" / "services" / "index.html").read_text()
    for name in ("accounts.Accounts", "rooms.Rooms", "messages.Messages", "dms.DirectMessages"):
        assert f'id="quart_mesh.services.{name}"' in services, name
    assert 'id="quart_mesh.services.accounts.Accounts.init_setup"' in services
    assert "the mesh is already initialized" in services  # from its Raises: section
    node = (site / "reference" / "node" / "index.html").read_text()
    assert 'id="quart_mesh.Node"' in node
