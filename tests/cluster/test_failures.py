"""Failures of a mesh served by several real processes on one PostgreSQL
database (issue 15): delivery across processes exactly once and in one
order; a process killed with SIGKILL while its clients send; the database
server stopped and started again under running processes.

Rules (``nodes.py``): real ``quart-mesh serve`` processes and a real
PostgreSQL server; every wait is bounded by ``trio.fail_after``; a test
waits for frames, and polls an HTTP endpoint only for state nothing
announces (the database coming back).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed

from tests import stores
from tests.cluster.nodes import NodeProcess, open_nodes
from tests.cluster.test_singletons import bot_processes, holder
from tests.helpers import Changes, Mesh, Socket, User, assert_error, connect, wait_for

pytestmark = pytest.mark.timeout(180)

#: the clients here send faster than a person may (``messages`` rate rule)
FAST = {"MESH_RATE_MESSAGES": "10000/1"}


async def mesh_of(nodes: list[NodeProcess], names: list[str]) -> tuple[str, User, list[User]]:
    """Set the mesh up through the first process: a room, and one member
    per name (registered through the processes in turn)."""
    async with httpx.AsyncClient(base_url=nodes[0].url, timeout=20) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        room_id = (await mesh.create_room(owner, "busy"))["roomId"]
    users = []
    for n, name in enumerate(names):
        async with httpx.AsyncClient(base_url=nodes[n % len(nodes)].url, timeout=20) as http:
            user = await Mesh(http).register(name)
            await Mesh(http).join(user, room_id)
            users.append(user)
    return room_id, owner, users


class Client:
    """One WebSocket client: every ``message`` event it receives, in order,
    and which of its own sends the node acknowledged (the echo of the
    message carrying its ``clientId``)."""

    def __init__(self, socket: Socket, user: User, room_id: str) -> None:
        self.socket = socket
        self.user = user
        self.room_id = room_id
        self.messages: list[dict[str, Any]] = []
        self.acked: list[str] = []
        self.errors: list[dict[str, Any]] = []
        self.closed = False
        self._changes = Changes()

    async def read(self) -> None:
        """Record frames until the connection ends."""
        try:
            while True:
                frame = await self.socket.recv(timeout=120)
                if frame["type"] == "message" and frame["roomId"] == self.room_id:
                    self.messages.append(frame)
                    if frame["senderId"] == self.user.participant_id and "clientId" in frame:
                        self.acked.append(frame["clientId"])
                elif frame["type"] == "error":
                    self.errors.append(frame)
                self._changes.note()
        except ConnectionClosed:
            self.closed = True
            self._changes.note()

    async def until(self, done: Any, seconds: float = 30) -> None:
        """Wait (bounded) until ``done(self)`` holds, checked at each frame."""
        await self._changes.until(lambda: bool(done(self)), seconds)

    async def send(self, client_id: str) -> None:
        await self.socket.send(
            type="send_message", roomId=self.room_id, content=client_id, clientId=client_id
        )

    def client_ids(self) -> list[str]:
        return [m.get("clientId", "") for m in self.messages]


def assert_in_cursor_order(messages: list[dict[str, Any]]) -> None:
    """Strictly increasing cursors: in order, and nothing twice."""
    cursors = [int(m["cursor"]) for m in messages]
    assert cursors == sorted(set(cursors)), cursors


async def test_every_client_receives_every_message_once_in_one_order(tmp_path: Path) -> None:
    """Three processes, a client on each, all sending into one room at once:
    every client receives all of it (its own sends too) exactly once, in
    one order, the cursors' order."""
    per_sender = 15
    async with open_nodes(tmp_path, 3, env=FAST) as nodes:
        room_id, _, users = await mesh_of(nodes, ["ann", "ben", "cat"])
        async with (
            connect(nodes[0].url, users[0]) as s0,
            connect(nodes[1].url, users[1]) as s1,
            connect(nodes[2].url, users[2]) as s2,
            trio.open_nursery() as nursery,
        ):
            clients = [Client(s, u, room_id) for s, u in zip((s0, s1, s2), users, strict=True)]
            for client in clients:
                nursery.start_soon(client.read)

            async def send_all(n: int, client: Client) -> None:
                for k in range(per_sender):
                    await client.send(f"c{n}-m{k}")
                    await trio.sleep(0)  # interleave the senders

            with trio.fail_after(60):
                async with trio.open_nursery() as senders:
                    for n, client in enumerate(clients):
                        senders.start_soon(send_all, n, client)
                for client in clients:
                    await client.until(lambda c: len(c.acked) == per_sender)
                # the last word, after everything: once each client has it,
                # anything delivered twice would have come before it
                await clients[0].send("last")
                for client in clients:
                    await client.until(lambda c: "last" in c.client_ids())
            nursery.cancel_scope.cancel()

        expected = {f"c{n}-m{k}" for n in range(3) for k in range(per_sender)} | {"last"}
        first = clients[0].messages
        for n, client in enumerate(clients):
            assert not client.errors, client.errors
            assert sorted(client.client_ids()) == sorted(expected)
            assert_in_cursor_order(client.messages)
            # the same messages in the same order on every process
            assert [m["messageId"] for m in client.messages] == [m["messageId"] for m in first]
            # its own sends, each acknowledged once
            mine = {f"c{n}-m{k}" for k in range(per_sender)} | ({"last"} if n == 0 else set())
            assert sorted(client.acked) == sorted(mine)


async def test_a_killed_process_loses_no_acknowledged_message(tmp_path: Path) -> None:
    """kill -9 one of three processes while clients on all three send: the
    survivors' clients receive every acknowledged message once, in one
    order; the killed process's client resumes on a survivor from its last
    cursor and receives the rest, without a gap or a repeat."""
    per_sender = 40
    async with open_nodes(tmp_path, 3, env=FAST) as started:
        room_id, owner, users = await mesh_of(started, ["ann", "ben", "cat"])
        # the victim runs the managed bots: an echo bot (in a room of its
        # own) runs there, and must come back on a survivor
        victim = await holder(started, "bot supervisor")
        nodes = [*(n for n in started if n is not victim), victim]
        echoes = await spawn_echo(nodes[0], owner)
        await wait_for(lambda: bots_on(nodes, victim), seconds=30)
        async with (
            connect(nodes[0].url, users[0]) as s0,
            connect(nodes[1].url, users[1]) as s1,
            connect(victim.url, users[2]) as s2,
            trio.open_nursery() as nursery,
        ):
            clients = [Client(s, u, room_id) for s, u in zip((s0, s1, s2), users, strict=True)]
            for client in clients:
                nursery.start_soon(client.read)

            async def send_all(n: int, client: Client) -> None:
                for k in range(per_sender):
                    try:
                        await client.send(f"c{n}-m{k}")
                    except ConnectionClosed:
                        return  # the killed process's client
                    await trio.sleep(0.01)

            with trio.fail_after(60):
                async with trio.open_nursery() as senders:
                    for n, client in enumerate(clients):
                        senders.start_soon(send_all, n, client)
                    # mid-stream: the victim's client has had some sends acknowledged
                    await clients[2].until(lambda c: len(c.acked) >= 10)
                    victim.kill()
                    await victim.exited.wait()
                    acked_before_kill = {
                        client_id for client in clients for client_id in client.acked
                    }
                    await clients[2].until(lambda c: c.closed)
                for client in clients[:2]:
                    await client.until(lambda c: len(c.acked) == per_sender)
                # the survivors' sends are stored: a last word after all of it
                await clients[0].send("last")
                for client in clients[:2]:
                    await client.until(lambda c: "last" in c.client_ids())
            nursery.cancel_scope.cancel()

        survivors = clients[:2]
        acked = acked_before_kill | {i for c in survivors for i in c.acked}
        # every survivor's own send was acknowledged
        for n, client in enumerate(survivors):
            assert not client.errors, client.errors
            mine = {i for i in client.acked if i.startswith(f"c{n}-")}
            assert mine == {f"c{n}-m{k}" for k in range(per_sender)}
        for client in survivors:
            seen = client.client_ids()
            assert acked <= set(seen), sorted(acked - set(seen))
            assert len(seen) == len(set(seen)), "a message was delivered twice"
            assert_in_cursor_order(client.messages)
        order = [m["messageId"] for m in survivors[0].messages]
        assert [m["messageId"] for m in survivors[1].messages] == order

        # the killed process's client resumes on a survivor from its last cursor
        before = clients[2].messages
        assert before, "the victim's client saw nothing before the kill"
        async with connect(nodes[0].url, users[2], since=before[-1]["cursor"]) as again:
            rest: list[dict[str, Any]] = []
            with trio.fail_after(30):
                while not rest or rest[-1].get("clientId") != "last":
                    rest.append(await again.expect("message", timeout=30, roomId=room_id))
            # nothing more was queued before a marker (no repeat of "last")
            assert not [f for f in await again.settle() if f["type"] == "message"]
        assert [m["messageId"] for m in before + rest] == order

        # the echo bot died with its process and runs again, once, on a survivor
        async with httpx.AsyncClient(base_url=nodes[0].url, timeout=20) as http:

            async def moved() -> bool:
                if not (await bots_on(nodes, nodes[0]) or await bots_on(nodes, nodes[1])):
                    return False
                agents = (await http.get("/api/agents", headers=owner.headers)).json()
                return [a["status"] for a in agents if a["name"] == "echo"] == ["running"]

            await wait_for(moved, seconds=30)
        [bot_node] = set(bot_processes(nodes).values())
        # "running" is set when its process starts, before it connects, and
        # a bot that never saved a cursor starts "from now on": ping until
        # it answers, then one more, answered once after everything before
        async with connect(bot_node, owner) as ws:
            with trio.fail_after(30):
                answered = None
                for n in range(100):
                    await ws.send(type="send_message", roomId=echoes, content=f"ping {n}")
                    with trio.move_on_after(2):
                        answered = await ws.expect("message", timeout=3, senderName="echo")
                        break
                assert answered is not None
            await ws.send(type="send_message", roomId=echoes, content="last")
            await ws.expect("message", timeout=30, content="echo: last")
        async with httpx.AsyncClient(base_url=bot_node, timeout=20) as http:
            r = await http.get(f"/api/rooms/{echoes}/messages", headers=owner.headers)
            assert r.status_code == 200, r.text
            answers = [m["content"] for m in r.json() if m["senderName"] == "echo"]
            assert len(answers) == len(set(answers)), answers  # each answered once
        assert len(bot_processes(nodes)) == 1


async def spawn_echo(node: NodeProcess, owner: User) -> str:
    """Spawn a managed echo bot, through *node*, in a new room; its id."""
    async with httpx.AsyncClient(base_url=node.url, timeout=20) as http:
        room_id = (await Mesh(http).create_room(owner, "echoes"))["roomId"]
        r = await http.post(
            "/api/agents/spawn",
            json={"name": "echo", "type": "echo", "rooms": [room_id]},
            headers=owner.headers,
        )
        assert r.status_code == 201, r.text
    return str(room_id)


async def bots_on(nodes: list[NodeProcess], node: NodeProcess) -> bool:
    """Whether the mesh's one managed bot process serves *node*."""
    return list(bot_processes(nodes).values()) == [node.url]


async def test_the_nodes_ride_out_a_database_outage(tmp_path: Path) -> None:
    """The PostgreSQL server stops for a few seconds under two processes:
    REST answers 503 with a JSON error (never a 500, never a hang); once it
    is back the processes reconnect by themselves, a message sent through
    one reaches a client of the other live again, and nothing stored before
    the outage is lost."""
    cluster = stores.cluster
    async with open_nodes(tmp_path, 2) as nodes:
        assert cluster is not None
        a, b = nodes
        room_id, owner, [bob] = await mesh_of(nodes[1:], ["bob"])
        async with (
            httpx.AsyncClient(base_url=a.url, timeout=10) as http_a,
            httpx.AsyncClient(base_url=b.url, timeout=10) as http_b,
            connect(b.url, bob) as old,
            trio.open_nursery() as nursery,
        ):
            watcher = Client(old, bob, room_id)
            nursery.start_soon(watcher.read)
            before = [(await Mesh(http_a).send(owner, room_id, f"before {i}")) for i in range(5)]
            await watcher.until(lambda c: len(c.messages) == 5)

            stopped = False
            try:
                await trio.to_thread.run_sync(cluster.stop_server)
                stopped = True
                # during the outage: a JSON 503 on both processes, promptly
                with trio.fail_after(30):
                    r = await http_a.get(f"/api/rooms/{room_id}/messages", headers=owner.headers)
                    assert_error(r, 503)
                    r = await http_b.post(
                        f"/api/rooms/{room_id}/messages",
                        json={"content": "during"},
                        headers=bob.headers,
                    )
                    assert_error(r, 503)
                    r = await http_a.post(
                        f"/api/rooms/{room_id}/messages",
                        json={"content": "during"},
                        headers=owner.headers,
                    )
                    assert_error(r, 503)
                assert a.process.returncode is None, a.log()
                assert b.process.returncode is None, b.log()
            finally:
                if stopped or cluster_down(cluster):
                    with trio.CancelScope(shield=True):
                        await trio.to_thread.run_sync(cluster.start_server)

            # back: each process answers again by itself (no restart)
            for http, user in ((http_a, owner), (http_b, bob)):

                async def answers(http: httpx.AsyncClient = http, user: User = user) -> bool:
                    r = await http.get(f"/api/rooms/{room_id}/messages", headers=user.headers)
                    assert r.status_code in (200, 503), (r.status_code, r.text)
                    return r.status_code == 200

                await wait_for(answers, seconds=30, interval=0.2)

            # a client of b (the old one may have been cut off: then a new
            # one, resuming from the last cursor it saw) receives live what
            # is sent through a
            last_cursor = watcher.messages[-1]["cursor"]
            async with connect(b.url, bob, since=last_cursor) as fresh:
                sent = await send_until_stored(http_a, owner, room_id, "after")
                got = await fresh.expect("message", timeout=30, roomId=room_id)
                assert got["messageId"] == sent["messageId"], got
                if not watcher.closed:
                    await watcher.until(
                        lambda c: c.closed or c.messages[-1]["messageId"] == sent["messageId"]
                    )
                    if not watcher.closed:
                        assert [m["messageId"] for m in watcher.messages[5:]] == [sent["messageId"]]
            nursery.cancel_scope.cancel()

            # nothing stored before the outage is lost, on either process
            for http, user in ((http_a, owner), (http_b, bob)):
                r = await http.get(f"/api/rooms/{room_id}/messages", headers=user.headers)
                assert r.status_code == 200, r.text
                ids = [m["messageId"] for m in r.json()]
                wanted = [m["messageId"] for m in before] + [sent["messageId"]]
                assert [i for i in ids if i in wanted] == wanted
        assert a.process.returncode is None, a.log()
        assert b.process.returncode is None, b.log()


async def send_until_stored(
    http: httpx.AsyncClient, user: User, room_id: str, content: str
) -> dict[str, Any]:
    """Send, retrying a 503 (the database just came back) with one clientId."""
    with trio.fail_after(30):
        while True:
            r = await http.post(
                f"/api/rooms/{room_id}/messages",
                json={"content": content, "clientId": f"send-{content}"},
                headers=user.headers,
            )
            if r.status_code == 201:
                return dict(r.json())
            assert_error(r, 503)
            await trio.sleep(0.2)


def cluster_down(cluster: stores.Cluster) -> bool:
    return not (cluster.folder / "data" / "postmaster.pid").exists()
