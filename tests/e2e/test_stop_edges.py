"""Serving and stopping at the edges: exit statuses, a resume past the
newest message, listeners closed when serve stops before serving.

Real nodes and real processes on loopback, port 0."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import trio

from quart_mesh import Settings, create_app, open_node, serve
from quart_mesh.server import STOP_MARGIN
from tests import stores
from tests.e2e.test_shutdown import _served, _setup
from tests.helpers import Mesh, cli, connect
from tests.test_release import _set_revision


async def test_workers_on_a_store_from_a_newer_release_exit_2(tmp_path: Path) -> None:
    # docs/upgrading.md: the refusal is exit status 2, "final" for a
    # supervisor (RestartPreventExitStatus=2); with --workers 2 (PostgreSQL)
    # the parent must say the same, not 1 (which systemd restarts for ever)
    data_dir = tmp_path / "data"
    settings = Settings(data_dir=data_dir)
    url = settings.resolved_database_url
    if not url.startswith("postgresql"):
        pytest.skip("several workers need PostgreSQL (--store postgresql)")
    async with open_node(settings):
        pass  # migrated to head
    await trio.to_thread.run_sync(_set_revision, url, "0099_from_a_newer_release")
    env = stores.node_env(data_dir)
    with trio.fail_after(90):
        done = await cli(
            "serve", "--port", "0", "--workers", "2", "--data-dir", str(data_dir), env=env
        )
    assert done.returncode == 2, done.stderr.decode()


async def test_a_long_poll_is_answered_at_the_stop_not_cut(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    # a stop is graceful: WebSocket clients get 1001 at once; a long poll
    # (a bot's only connection) must be answered too (an empty batch and its
    # cursor), not held for the whole grace and then cut without an answer
    settings = Settings(data_dir=tmp_path / "data", graceful_timeout=8, max_poll_timeout=60)
    async with _served(settings, nursery) as (app, url, scope, ended):
        owner, _ = await _setup(url)
        answers: list[httpx.Response] = []
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:

            async def poll() -> None:
                answers.append(
                    await http.post("/api/poll", json={"timeout": 50}, headers=owner.headers)
                )

            async with trio.open_nursery() as polls:
                polls.start_soon(poll)
                with trio.fail_after(10):
                    while not app.node.broker.subscribed():
                        await trio.sleep(0.01)
                began = trio.current_time()
                scope.cancel()
                with trio.fail_after(settings.graceful_timeout + STOP_MARGIN):
                    await ended.wait()
        (answer,) = answers
        assert answer.status_code == 200, answer.text
        # what a wait that ends empty answers: nothing new, and the cursor
        assert answer.json()["messages"] == [], answer.text
        assert answer.json()["cursor"], answer.text
        assert trio.current_time() - began < settings.graceful_timeout / 2


async def test_a_websocket_resume_past_the_head_does_not_swallow_new_messages(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    # the WebSocket resume shares the stream's defect: with ``since`` past the
    # newest message (a client's cursor from before a restore), the messages
    # written next were dropped as "already replayed"
    settings = Settings(data_dir=tmp_path / "data")
    async with _served(settings, nursery) as (_, url, scope, ended):
        owner, room_id = await _setup(url)
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            head = await Mesh(http).send(owner, room_id, "head")
            ahead = str(int(head["cursor"]) + 100)
            async with connect(url, owner, since=ahead) as socket:
                await Mesh(http).send(owner, room_id, "after")
                await socket.expect("message", content="after")
        scope.cancel()
        with trio.fail_after(settings.graceful_timeout + STOP_MARGIN):
            await ended.wait()


async def test_listeners_given_to_serve_are_closed_when_it_stops_before_listening(
    tmp_path: Path,
) -> None:
    # serve's docstring: "either way the listeners are closed when it
    # returns"; cancelled (or failing) during start-up, it left them open:
    # the port stays bound and the socket leaks
    settings = Settings(data_dir=tmp_path / "data")
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    with trio.move_on_after(0):
        await serve(create_app(settings), listeners=listeners)
    assert all(listener.socket.fileno() == -1 for listener in listeners)
