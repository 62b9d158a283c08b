"""A node whose parts fail, served for real on loopback ports.

For each kind of long-lived component (read positions, the bot supervisor,
webhook delivery, a federation relay link, the registry heartbeat, the
store's writer), a failure is injected into the running node:

- a transient fault (the store unavailable, a peer or registry failing) is
  retried with backoff by ``retry.retrying``: the node keeps serving and the
  component recovers;
- a bug ends ``serve()`` within seconds, with the listeners closed (no
  process left answering 500s); run by ``quart-mesh serve``, the process
  exits with status 70 and the traceback in its log.
"""

from __future__ import annotations

import logging
import re
import socket
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from quart_mesh import MeshApp, Settings, create_app, serve
from quart_mesh.errors import Transient, Unavailable
from quart_mesh.node import Node
from tests.helpers import Mesh, User, connect

pytestmark = pytest.mark.timeout(60)


class Injected(RuntimeError):
    """The bug the tests put into a component."""


#: how to make each kind of component do its work soon, once the node serves
Trigger = Callable[["Served"], Awaitable[None]]


class Served:
    """A node served in the test's nursery, set up with an owner."""

    def __init__(self, app: MeshApp, url: str, http: httpx.AsyncClient, owner: User) -> None:
        self.app = app
        self.url = url
        self.http = http
        self.owner = owner

    @property
    def node(self) -> Node:
        return self.app.node


async def _nothing(_: Served) -> None:
    """World flushes and supervisor saves run every second anyway."""


async def _webhook_bot(served: Served) -> None:
    r = await served.http.post(
        "/api/agents/bootstrap",
        json={"name": "hook", "type": "webhook", "webhookUrl": "http://127.0.0.1:9/hook"},
        headers=served.owner.headers,
    )
    assert r.status_code == 201, r.text


async def _write(served: Served) -> None:
    await served.http.post(
        "/api/rooms", json={"name": "writes"}, headers=served.owner.headers, timeout=5
    )


#: component -> (the object holding the method, the method, what makes it run)
COMPONENTS: dict[str, tuple[Callable[[Node], object], str, Trigger]] = {
    "read positions": (lambda node: node.world, "flush_reads", _nothing),
    "bot supervisor": (lambda node: node.supervisor, "save_cursors", _nothing),
    "webhook delivery": (lambda node: node.webhooks, "_drain", _webhook_bot),
    "registry heartbeat": (lambda node: node.heartbeat, "beat", _nothing),
    "store writer": (lambda node: node.db, "_run_batch", _write),
}


def _settings(tmp_path: Path, component: str) -> Settings:
    settings = Settings(data_dir=tmp_path / "mesh-data")
    if component == "registry heartbeat":
        # a registry that is down: the heartbeat runs (and fails) all the same
        settings = settings.with_overrides(registry_url="http://127.0.0.1:9", heartbeat_interval=1)
    return settings


async def _serve(nursery: trio.Nursery, settings: Settings) -> tuple[MeshApp, str]:
    app = create_app(settings)
    url: str = await nursery.start(partial(serve, app, port=0))
    return app, url


def _bug(method: str) -> Callable[..., Any]:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise Injected(f"injected bug in {method}")

    async def broken_async(*args: Any, **kwargs: Any) -> Any:
        raise Injected(f"injected bug in {method}")

    return broken if method == "_run_batch" else broken_async


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


async def _failure_of(run: Callable[[], Awaitable[None]]) -> BaseException:
    """What *run* (which serves until its node fails) ended with."""
    with trio.fail_after(30):
        try:
            await run()
        except BaseExceptionGroup as group:
            return group
    raise AssertionError("the node did not fail")


def _assert_closed(url: str) -> None:
    """Nothing listens at *url* any more (no process left answering 500s)."""
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", int(url.rsplit(":", 1)[1]))) != 0


@pytest.mark.parametrize("component", list(COMPONENTS))
async def test_a_bug_in_a_component_stops_the_server(tmp_path: Path, component: str) -> None:
    holder, method, trigger = COMPONENTS[component]
    settings = _settings(tmp_path, component)
    urls: list[str] = []

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            app, url = await _serve(nursery, settings)
            urls.append(url)
            async with httpx.AsyncClient(base_url=url, timeout=10) as http:
                served = Served(app, url, http, await Mesh(http).setup())
                setattr(holder(app.node), method, _bug(method))
                await trigger(served)
                await trio.sleep_forever()  # until the node fails

    failure = await _failure_of(run)
    assert any(isinstance(leaf, Injected) for leaf in _leaves(failure)), failure
    _assert_closed(urls[0])


async def test_a_bug_in_a_relay_link_stops_the_server(tmp_path: Path) -> None:
    urls: list[str] = []

    async def run() -> None:
        async with trio.open_nursery() as peers, trio.open_nursery() as nursery:
            # two nodes on loopback: a lab, where private addresses are allowed
            lab = {"outbound_allow_private": True}
            _, url_b = await _serve(peers, Settings(data_dir=tmp_path / "b", **lab))
            app_a, url_a = await _serve(nursery, Settings(data_dir=tmp_path / "a", **lab))
            urls.append(url_a)
            async with (
                httpx.AsyncClient(base_url=url_a, timeout=10) as a,
                httpx.AsyncClient(base_url=url_b, timeout=10) as b,
            ):
                owner_a = await Mesh(a).setup(meshName="A")
                owner_b = await Mesh(b).setup(meshName="B")
                app_a.node.relay.links._link = _bug("_link")  # type: ignore[method-assign]
                r = await a.post(
                    "/api/connections/request", json={"url": url_b}, headers=owner_a.headers
                )
                assert r.status_code == 201, r.text
                connection = r.json()["id"]
                r = await b.post(f"/api/connections/{connection}/accept", headers=owner_b.headers)
                assert r.status_code == 200, r.text
                # A learns of the acceptance and starts its link: which fails
                await trio.sleep_forever()

    failure = await _failure_of(run)
    assert any(isinstance(leaf, Injected) for leaf in _leaves(failure)), failure
    _assert_closed(urls[0])


def _flaky(original: Callable[..., Awaitable[Any]], fault: Exception, times: int) -> Any:
    """*original*, failing *times* times with *fault* first; ``recovered`` is
    set when a call after the faults has returned."""
    calls = 0
    recovered = trio.Event()

    async def flaky(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls <= times:
            raise fault
        result = await original(*args, **kwargs)
        recovered.set()
        return result

    flaky.recovered = recovered  # type: ignore[attr-defined]
    return flaky


TRANSIENT = {
    "read positions": Unavailable("the storage backend is unavailable", "storage_unavailable"),
    "bot supervisor": Unavailable("the storage backend is unavailable", "storage_unavailable"),
    "webhook delivery": Unavailable("the storage backend is unavailable", "storage_unavailable"),
    "registry heartbeat": Transient("the registry answered 503"),
}


@pytest.mark.parametrize("component", list(TRANSIENT))
async def test_a_transient_fault_is_retried_and_the_node_keeps_serving(
    tmp_path: Path, component: str, caplog: pytest.LogCaptureFixture
) -> None:
    holder, method, trigger = COMPONENTS[component]
    settings = _settings(tmp_path, component)
    caplog.set_level(logging.INFO, logger="quart_mesh")
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            app, url = await _serve(nursery, settings)
            async with httpx.AsyncClient(base_url=url, timeout=10) as http:
                served = Served(app, url, http, await Mesh(http).setup())
                target = holder(app.node)
                original = getattr(target, method)
                if component == "registry heartbeat":
                    # the registry is down for real: succeed once the faults are over
                    async def reached(*_: Any) -> None:
                        return None

                    original = reached
                flaky = _flaky(original, TRANSIENT[component], times=2)
                setattr(target, method, flaky)
                await trigger(served)
                # while the part fails and retries, the node answers as ever
                r = await http.get("/api/health")
                assert r.status_code == 200, r.text
                await flaky.recovered.wait()
                r = await http.get("/api/health")
                assert (r.status_code, r.json()["ok"]) == (200, True)
                r = await http.get("/api/rooms", headers=served.owner.headers)
                assert r.status_code == 200, r.text
            nursery.cancel_scope.cancel()
    failures = [r for r in caplog.records if "retrying in" in r.getMessage()]
    assert len(failures) >= 2, [r.getMessage() for r in caplog.records]
    assert any("recovered after" in r.getMessage() for r in caplog.records)


async def test_a_transient_store_fault_in_the_writer_fails_only_those_writes(
    tmp_path: Path,
) -> None:
    """The store's writer hands a store outage to the writes it concerns
    (503 ``storage_unavailable``) and goes on with the next ones."""
    from sqlalchemy.exc import OperationalError

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            app, url = await _serve(nursery, Settings(data_dir=tmp_path / "mesh-data"))
            async with httpx.AsyncClient(base_url=url, timeout=10) as http:
                owner = await Mesh(http).setup()
                # the token's first use is stamped (a write, best effort): done
                # here, so that the one failing write below is the room's
                assert (await http.get("/api/rooms", headers=owner.headers)).status_code == 200
                db = app.node.db
                original = db._run_batch
                failures = 1

                def flaky(batch: list[Any]) -> None:
                    nonlocal failures
                    if failures:
                        failures -= 1
                        raise OperationalError("BEGIN", {}, Exception("database is locked"))
                    original(batch)

                # the writer's own guard: an OperationalError becomes Unavailable for its units
                db._run_batch = lambda batch: _guarded(db, flaky, batch)  # type: ignore[method-assign]
                r = await http.post("/api/rooms", json={"name": "one"}, headers=owner.headers)
                assert (r.status_code, r.json()["code"]) == (503, "storage_unavailable")
                r = await http.post("/api/rooms", json={"name": "two"}, headers=owner.headers)
                assert r.status_code == 201, r.text
            nursery.cancel_scope.cancel()


def _guarded(db: Any, run: Callable[[list[Any]], None], batch: list[Any]) -> None:
    from sqlalchemy.exc import OperationalError

    try:
        run(batch)
    except OperationalError as exc:
        error = db.failed(exc)
        for job in batch:
            job.error = error


_LISTENING = re.compile(rb"listening on (http://\S+)")

_INJECT = textwrap.dedent(
    """
    import sys
    from quart_mesh import cli
    from quart_mesh.services.world import World

    async def broken(self):
        raise RuntimeError("injected bug in the read-position flush")

    World.flush_reads = broken
    sys.exit(cli.main(["serve", "--port", "0", "--data-dir", sys.argv[1]]))
    """
)


async def test_the_process_exits_non_zero_when_a_part_fails(tmp_path: Path) -> None:
    """``quart-mesh serve`` with a part that fails: the traceback is logged and
    the process exits 70 (EX_SOFTWARE) within seconds, so that systemd,
    Docker or whatever runs it starts it again."""
    script = tmp_path / "inject.py"
    script.write_text(_INJECT)
    with trio.fail_after(30):
        result = await trio.run_process(
            [sys.executable, str(script), str(tmp_path / "mesh-data")],
            capture_stdout=True,
            stderr=subprocess.STDOUT,
            check=False,
        )
    output = result.stdout.decode(errors="replace")
    assert _LISTENING.search(result.stdout), output
    assert result.returncode == 70, output
    assert "the node stopped because one of its parts failed" in output
    assert "RuntimeError: injected bug in the read-position flush" in output
    assert "Traceback" in output


async def test_managed_bots_wait_for_the_listening_address(tmp_path: Path) -> None:
    """After a restart, a persisted managed bot is started only once the
    node knows the address it listens on (never ``http://127.0.0.1``)."""
    settings = Settings(data_dir=tmp_path / "mesh-data")
    with trio.fail_after(40):
        async with trio.open_nursery() as nursery:
            app, url = await _serve(nursery, settings)
            async with httpx.AsyncClient(base_url=url, timeout=10) as http:
                owner = await Mesh(http).setup()
                r = await http.post(
                    "/api/agents/spawn",
                    json={"name": "echo", "type": "echo"},
                    headers=owner.headers,
                )
                assert r.status_code == 201, r.text
            nursery.cancel_scope.cancel()

        from quart_mesh.node import open_node

        async with open_node(settings) as node, trio.open_nursery() as nursery:
            await nursery.start(node.run)
            [bot] = node.supervisor.bots.values()
            # running, but not listening: the bot waits, no process started
            await trio.testing.wait_all_tasks_blocked()
            assert (bot.status, bot.pid) == ("starting", None)
            assert bot.detail == "waiting for the node to listen"
            async with trio.open_nursery() as front:
                app = create_app(node=node)
                url = await front.start(partial(serve, app, port=0))
                # now it starts, pointed at the bound address, and comes online there
                async with httpx.AsyncClient(base_url=url, timeout=10) as http:
                    while True:
                        r = await http.get("/api/agents", headers=owner.headers)
                        [agent] = r.json()
                        if agent["online"]:
                            break
                        await trio.sleep(0.1)
                assert bot.pid is not None
                assert bot.status == "running"
                front.cancel_scope.cancel()
            nursery.cancel_scope.cancel()


@pytest.mark.sqlite_only  # another process holds SQLite's write lock
async def test_a_full_write_queue_is_refused_at_once(tmp_path: Path) -> None:
    """With the store's writer stuck (another process holds SQLite's write
    lock), writes queue up to ``max_queued_writes``; beyond, REST answers
    503 ``overloaded`` with Retry-After and WebSocket an ``overloaded`` error
    frame, at once. When the lock goes, the queued writes all commit."""
    import sqlite3

    settings = Settings(
        data_dir=tmp_path / "mesh-data", max_queued_writes=3, last_seen_interval=0.001
    )
    with trio.fail_after(40):
        async with trio.open_nursery() as nursery:
            _, url = await _serve(nursery, settings)
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                owner = await Mesh(http).setup()
                room = (await Mesh(http).create_room(owner, "busy"))["roomId"]
                # a member: each of its requests is due to stamp lastSeen
                # (last_seen_interval), a write the queue refuses
                reader = await Mesh(http).register("reader")
                await Mesh(http).join(reader, room)
                lock = sqlite3.connect(tmp_path / "mesh-data" / "mesh.db", check_same_thread=False)
                lock.execute("BEGIN EXCLUSIVE")  # the node's writer now waits for it
                answers: list[httpx.Response] = []
                refused = trio.Event()

                async def send(n: int) -> None:
                    r = await http.post(
                        f"/api/rooms/{room}/messages",
                        json={"content": f"m{n}"},
                        headers=owner.headers,
                    )
                    answers.append(r)
                    if r.status_code == 503:
                        refused.set()

                async with trio.open_nursery() as senders:
                    for n in range(12):
                        senders.start_soon(send, n)
                    await refused.wait()
                    # and over WebSocket, the same refusal as an error frame
                    async with connect(url, owner) as client:
                        await client.send(type="send_message", roomId=room, content="ws")
                        frame = await client.expect("error")
                        assert frame["code"] == "overloaded", frame
                        assert frame["retryAfter"] >= 1, frame
                    # reading is not refused for them: the stamps are best effort
                    r = await http.get(f"/api/rooms/{room}/messages", headers=reader.headers)
                    assert r.status_code == 200, r.text
                    lock.rollback()  # the lock goes: the queued writes commit
                lock.close()
                codes = sorted(r.status_code for r in answers)
                assert codes.count(201) >= 4, codes  # one in the writer, three queued
                assert set(codes) == {201, 503}, codes
                [busy, *_] = [r for r in answers if r.status_code == 503]
                assert busy.json()["code"] == "overloaded"
                assert busy.headers["Retry-After"] == "1"
                stored = await Mesh(http).messages(owner, room)
                assert len(stored) == codes.count(201)
            nursery.cancel_scope.cancel()
