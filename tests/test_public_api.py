"""The public embedding API (decision 0064): what ``quart_mesh`` exports, and
a program written against those names only, run on a real node and type
checked with ``mypy --strict``.

This file imports nothing of quart-mesh but its top-level names (the
suite's fixtures aside): it is what a program that embeds the node sees.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from types import ModuleType

import pytest
import trio

import quart_mesh
from tests import stores

#: the public names (issue 31): changing this list is changing the API
EXPECTED = {
    # running a node
    "Settings",
    "Limits",
    "create_app",
    "MeshApp",
    "serve",
    "open_node",
    "Node",
    "__version__",
    # records
    "Actor",
    "Participant",
    "Room",
    "Message",
    "Reaction",
    "Upload",
    "Task",
    "TaskState",
    # events (the module quart_mesh.events is public too)
    "Event",
    "MessagePosted",
    # errors
    "MeshError",
    "BadRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "Conflict",
    "PayloadTooLarge",
    "RateLimited",
    "Unavailable",
    "ConfigError",
    "StoreFromNewerRelease",
    # the event stream
    "EventStream",
    "StreamLagged",
    "AccessEnded",
    # stopping
    "wait_for_signal",
}

#: the services a program reaches as attributes of an open node
SERVICES = (
    "accounts",
    "rooms",
    "messages",
    "dms",
    "agents",
    "roles",
    "search",
    "tasks",
    "model_proxy",
)

REPO = Path(__file__).resolve().parent.parent

#: a program that embeds a node beside its own tasks: sets the mesh up,
#: consumes events with a small buffer while it sends (falling behind and
#: resuming), and stops the node; public names only, typed
PROGRAM = '''\
"""Embed a node, send, consume its events (surviving falling behind), stop."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import trio

from quart_mesh import (
    Actor,
    MessagePosted,
    Room,
    Settings,
    StreamLagged,
    create_app,
    serve,
)


async def main(data_dir: Path, count: int = 12) -> tuple[list[str], int]:
    """The contents received, in order, and how often the consumer fell behind."""
    app = create_app(Settings(data_dir=data_dir))
    stop = trio.Event()
    received: list[str] = []
    lags = 0
    async with trio.open_nursery() as nursery:
        url: str = await nursery.start(
            partial(serve, app, host="127.0.0.1", port=0, shutdown_trigger=stop.wait)
        )
        assert url.startswith("http://127.0.0.1:")
        node = app.node
        owner = await node.accounts.init_setup(
            name="host", password="a long passphrase", mesh_name="Embedded"
        )
        actor: Actor = node.accounts.actor_for(owner.participant)
        room: Room = await node.rooms.create(actor, "from-python")
        cursor = (await node.messages.send(actor, room.room_id, "start")).seq

        sent = trio.Event()

        async def send_all() -> None:
            for n in range(count):
                await node.messages.send(actor, room.room_id, f"m{n}")
            sent.set()

        while len(received) < count:
            try:
                # a buffer of 4 events, not read until all is sent: it falls behind
                async with node.events(actor, since=cursor, capacity=4) as stream:
                    if not sent.is_set():
                        nursery.start_soon(send_all)
                        await sent.wait()
                    async for event in stream:
                        if isinstance(event, MessagePosted):
                            received.append(event.message.content)
                            if len(received) == count:
                                break
            except StreamLagged as lagged:
                lags += 1
                cursor = lagged.cursor  # resume after the last message received
        stop.set()  # serve() returns; the node closes its store
    return received, lags


if __name__ == "__main__":
    import sys

    print(trio.run(main, Path(sys.argv[1])))
'''


def test_all_is_the_public_list() -> None:
    assert len(quart_mesh.__all__) == len(set(quart_mesh.__all__))
    assert set(quart_mesh.__all__) == EXPECTED
    for name in quart_mesh.__all__:
        assert getattr(quart_mesh, name) is not None


def test_the_version_is_semantic() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+([-+.].+)?", quart_mesh.__version__)


def _documented(obj: object) -> bool:
    """A docstring of its own: not a dataclass's generated signature."""
    doc = obj.__dict__.get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", None)
    name = getattr(obj, "__name__", "")
    return isinstance(doc, str) and bool(doc.strip()) and not doc.startswith(f"{name}(")


@pytest.mark.store_free
def test_every_public_name_has_a_docstring() -> None:
    missing = [
        name
        for name in quart_mesh.__all__
        if name != "__version__" and not _documented(getattr(quart_mesh, name))
    ]
    assert missing == []


@pytest.mark.store_free
def test_the_events_module_and_the_stream_are_documented() -> None:
    import quart_mesh.events

    assert isinstance(quart_mesh.events, ModuleType)
    assert quart_mesh.events.__doc__
    stream = quart_mesh.EventStream
    for member in ("cursor", "__anext__"):
        assert inspect.getdoc(getattr(stream, member)), member
    events = inspect.getdoc(quart_mesh.Node.events)
    assert events is not None
    for said in ("Cancellation", "Raises", "StreamLagged", "AccessEnded", "capacity"):
        assert said in events


@pytest.mark.store_free
def test_the_module_docstring_names_the_services() -> None:
    doc = quart_mesh.__doc__
    assert doc is not None
    for service in SERVICES:
        assert f"node.{service}" in doc
    assert "internal" in doc


async def test_the_services_are_node_attributes(tmp_path: Path) -> None:
    async with quart_mesh.open_node(quart_mesh.Settings(data_dir=tmp_path / "data")) as node:
        for service in SERVICES:
            assert getattr(node, service) is not None, service


def _imports(program: str) -> set[tuple[str, str | None]]:
    """(module, name) of every import in *program*."""
    found: set[tuple[str, str | None]] = set()
    for node in ast.walk(ast.parse(program)):
        if isinstance(node, ast.Import):
            found |= {(alias.name, None) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found |= {(node.module or "", alias.name) for alias in node.names}
    return found


@pytest.mark.store_free
def test_the_program_uses_public_names_only() -> None:
    mesh = {(module, name) for module, name in _imports(PROGRAM) if module.startswith("quart")}
    assert mesh
    assert {module for module, _ in mesh} == {"quart_mesh"}
    assert {name for _, name in mesh} <= EXPECTED


async def test_the_program_runs(tmp_path: Path) -> None:
    namespace: dict[str, object] = {"__name__": "embedding_program"}
    exec(compile(PROGRAM, "embedding_program.py", "exec"), namespace)
    main = namespace["main"]
    assert callable(main)
    with trio.fail_after(60):
        received, lags = await main(tmp_path / "data")
    assert received == [f"m{n}" for n in range(12)]
    if stores.backend() == "sqlite":
        # a commit is delivered before the send returns: 12 messages reach a
        # buffer of 4 that nobody reads, so it fell behind (on PostgreSQL the
        # bus may deliver them after the consumer started reading)
        assert lags >= 1


@pytest.mark.store_free
async def test_the_program_type_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mypy import api

    program = tmp_path / "embedding_program.py"
    program.write_text(PROGRAM)
    # a misspelt name is an error too (the package imports its names lazily:
    # a module __getattr__ a type checker saw would make every name an Any,
    # and this ignore unused, which --strict reports)
    typo = tmp_path / "typo_program.py"
    typo.write_text("from quart_mesh import Setings  # type: ignore[attr-defined]\n")
    args = [
        "--strict",
        "--config-file",
        str(REPO / "pyproject.toml"),
        "--cache-dir",
        str(REPO / ".mypy_cache"),
        str(program),
        str(typo),
    ]
    monkeypatch.setenv("MYPYPATH", str(REPO))  # quart_mesh from this tree, not an installed copy
    stdout, stderr, status = await trio.to_thread.run_sync(api.run, args)
    assert status == 0, stdout + stderr
