"""Calls out have a total deadline: a server that answers a byte at a time
(each read well within httpx's per-read timeout, the whole never) cannot
hold a webhook delivery, a federation request or a model call for ever.

The slow servers are real TCP servers on loopback (:class:`Trickler`); the
node is served by hypercorn on a loopback port.
"""

from __future__ import annotations

from pathlib import Path

import h11
import httpx
import pytest
import trio

from quart_mesh import Settings, create_app, serve
from quart_mesh.config import ModelConfig
from tests.helpers import Mesh, User, assert_error, wait_for
from tests.receiver import Request, read_request

pytestmark = pytest.mark.timeout(60)

#: the status line a trickler never finishes sending
_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


class Trickler:
    """Reads a request, then sends an answer one byte every *interval*
    seconds (while :attr:`slow`; else all at once); counts the connections
    it was given and those the caller gave up on (closed before the answer
    was out), and keeps the requests answered in full."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.slow = True
        self.connections = 0
        self.abandoned = 0
        self.answered: list[Request] = []
        self.port = 0

    async def start(self, nursery: trio.Nursery) -> int:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, self._connection, listeners)
        return self.port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _connection(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        async with stream:
            request = await read_request(stream, h11.Connection(h11.SERVER))
            if request is None:
                return
            if not self.slow:
                await stream.send_all(_HEAD)
                self.answered.append(request)
                return
            try:
                for byte in _HEAD:
                    await stream.send_all(bytes([byte]))
                    await trio.sleep(self.interval)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.abandoned += 1


async def _served(settings: Settings, nursery: trio.Nursery) -> str:
    app = create_app(settings)
    url: str = await nursery.start(lambda task_status: serve(app, port=0, task_status=task_status))
    return url


async def test_a_webhook_receiver_that_trickles_is_given_up_on_and_retried(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """The attempt ends at ``webhook_timeout`` as a transient failure; once the
    receiver answers properly, the event is delivered, once."""
    trickler = Trickler()
    await trickler.start(nursery)
    settings = Settings(
        data_dir=tmp_path / "mesh-data", webhook_timeout=1.0, webhook_max_backoff=0.3
    )
    url = await _served(settings, nursery)
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        r = await http.post(
            "/api/agents/bootstrap",
            json={"name": "slowhook", "type": "webhook", "webhookUrl": f"{trickler.url}/hook"},
            headers=owner.headers,
        )
        assert r.status_code == 201, r.text
        bot = User(r.json()["agentId"], "slowhook", r.json()["token"])
        room = (await mesh.create_room(owner, "slow"))["roomId"]
        await mesh.join(bot, room)
        await mesh.send(owner, room, "hello")
        state: dict[str, object] = {}

        async def gave_up_twice() -> bool:
            agents = (await http.get("/api/agents", headers=owner.headers)).json()
            state.update(next(a for a in agents if a["agentId"] == bot.participant_id)["webhook"])
            return bool(state["status"] == "retrying" and int(str(state["failedAttempts"])) >= 2)

        with trio.fail_after(20):
            await wait_for(gave_up_twice)
        assert "no answer within 1 s" in str(state["lastError"]), state
        assert trickler.abandoned >= 1  # the node hung up; it did not wait for the trickle
        # the receiver recovers: the same event arrives, once
        trickler.slow = False
        marker = await mesh.send(owner, room, "marker")

        async def arrived() -> bool:
            ids = [q.headers["x-mesh-delivery"] for q in trickler.answered]
            return marker["messageId"] in ids

        with trio.fail_after(20):
            await wait_for(arrived)
        assert [q.json()["content"] for q in trickler.answered] == ["hello", "marker"]


async def test_a_peer_that_trickles_is_unreachable_within_the_deadline(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """A connection request to a peer that never finishes answering ends
    with 502 ``peer_unreachable`` after ``federation_timeout``, and the node
    goes on serving."""
    trickler = Trickler()
    await trickler.start(nursery)
    settings = Settings(
        data_dir=tmp_path / "mesh-data",
        federation_timeout=1.0,
        outbound_allow_private=True,  # the peer is on loopback: a lab
    )
    url = await _served(settings, nursery)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        owner = await Mesh(http).setup()
        started = trio.current_time()
        r = await http.post(
            "/api/connections/request", json={"url": trickler.url}, headers=owner.headers
        )
        took = trio.current_time() - started
        assert_error(r, 502, "peer_unreachable")
        assert trickler.connections >= 1
        assert took < 5, took  # the trickle would take ~16 s to finish
        assert (await http.get("/api/health")).status_code == 200


async def test_a_model_upstream_that_trickles_its_head_times_out(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """Up to the answer's head, a model call has one deadline in total
    (``model_timeout``): 504 ``upstream_timeout`` in OpenAI's shape."""
    trickler = Trickler()
    await trickler.start(nursery)
    model = ModelConfig("slow", f"{trickler.url}/v1", "slow-model")
    settings = Settings(data_dir=tmp_path / "mesh-data", models=(model,), model_timeout=1.0)
    url = await _served(settings, nursery)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        owner = await Mesh(http).setup()
        started = trio.current_time()
        r = await http.post(
            "/api/models/v1/chat/completions",
            json={"model": "slow", "messages": [{"role": "user", "content": "hi"}]},
            headers=owner.headers,
        )
        took = trio.current_time() - started
        assert r.status_code == 504, r.text
        assert r.json()["error"]["code"] == "upstream_timeout", r.text
        assert took < 5, took
        assert (await http.get("/api/health")).status_code == 200
