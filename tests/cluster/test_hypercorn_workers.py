"""Stock hypercorn with several workers on PostgreSQL:
``hypercorn -k trio --workers 2 'quart_mesh.asgi:create_asgi_app()'`` serves
one mesh. Sessions land on either worker (the kernel chooses); the test
opens sessions until both workers hold some (told by ``presence_sessions``,
where each process records the participants it holds sessions for), then
checks that every message reaches every session, once, in one order.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
import trio

from tests.cluster.nodes import database_url
from tests.e2e.test_stock_hypercorn import Process
from tests.helpers import PASSWORD, Mesh, User, connect

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _processes_holding_sessions(url: str) -> int:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            found = conn.execute(
                sa.text("SELECT count(DISTINCT process_id) FROM presence_sessions")
            ).scalar_one()
    finally:
        engine.dispose()
    return int(found)


async def test_two_hypercorn_workers_serve_one_mesh(tmp_path: Path, nursery: trio.Nursery) -> None:
    data_dir = tmp_path / "mesh-data"
    url = database_url(data_dir)
    server = Process.hypercorn(data_dir, "--workers", "2")
    server.env["MESH_DATABASE_URL"] = url
    await server.start(nursery)
    base = await server.url()
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        room_id = (await mesh.create_room(owner, "lobby"))["roomId"]
        users: list[User] = []
        with trio.fail_after(30):
            while len(users) < 6:
                # the setup reaches the other worker a moment later
                r = await http.post(
                    "/api/auth/register", json={"name": f"user{len(users)}", "password": PASSWORD}
                )
                if r.status_code == 403:
                    await trio.sleep(0.05)
                    continue
                assert r.status_code == 201, r.text
                body = r.json()
                users.append(User(body["participantId"], f"user{len(users)}", body["token"]))
        for user in users:
            await mesh.join(user, room_id)
        opened = 0
        round_open = trio.Event()
        proceed = trio.Event()
        received: list[list[str]] = []

        async def session(user: User) -> None:
            nonlocal opened, round_open
            async with connect(base, user) as ws:
                opened += 1
                round_open.set()
                await proceed.wait()
                got = [await ws.expect("message", timeout=10, roomId=room_id) for _ in users]
                received.append([m["messageId"] for m in got])
                assert [f for f in await ws.settle() if f["type"] == "message"] == []

        async with trio.open_nursery() as sessions:
            # sessions opened at once spread over the workers (the kernel hands
            # each connection to a worker waiting in accept): a few rounds at most
            with trio.fail_after(60):
                for _ in range(5):
                    target = opened + len(users)
                    for user in users:
                        sessions.start_soon(session, user)
                    while opened < target:
                        await round_open.wait()
                        round_open = trio.Event()
                    if await trio.to_thread.run_sync(_processes_holding_sessions, url) >= 2:
                        break
                else:
                    raise AssertionError("every session landed on one worker")
            sent = [(await mesh.send(u, room_id, f"from {u.name}"))["messageId"] for u in users]
            proceed.set()
        assert len(received) == opened
        assert all(order == sent for order in received)
    assert await server.stop() == 0, server.text
