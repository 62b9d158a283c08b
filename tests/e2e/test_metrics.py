"""``GET /metrics`` over real sockets: off unless a token is set, refused
without it, and in the Prometheus text format as the library's own parser
reads it, with figures that follow what the node did."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from quart_mesh import Settings, create_app, serve
from quart_mesh.errors import ConfigError
from tests.helpers import Mesh, assert_error, connect, wait_for

pytestmark = pytest.mark.e2e

TOKEN = "scrape-me-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample, by its name and labels, as Prometheus' parser reads them."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def serve_node(settings: Settings, nursery: trio.Nursery) -> str:
    app = create_app(settings)
    url: str = await nursery.start(lambda task_status: serve(app, port=0, task_status=task_status))
    return url


async def test_metrics_follow_what_the_node_does(tmp_path: Path, nursery: trio.Nursery) -> None:
    url = await serve_node(Settings(data_dir=tmp_path / "mesh-data", metrics_token=TOKEN), nursery)
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
        # a scrape without the token, or with another, is refused
        assert_error(await http.get("/metrics"), 401, "unauthorized")
        r = await http.get("/metrics", headers={"Authorization": "Bearer " + "x" * 24})
        assert_error(r, 401, "unauthorized")

        mesh = Mesh(http)
        owner = await mesh.setup("alice")
        bob = await mesh.register("bob")
        room_id = (await http.get("/api/setup/status")).json()["defaultRoomId"]
        await mesh.join(bob, room_id)
        r = await http.post(
            "/api/agents/spawn",
            json={"name": "echo", "type": "echo", "rooms": [room_id]},
            headers=owner.headers,
        )
        assert r.status_code == 201, r.text

        async def scrape() -> Samples:
            r = await http.get("/metrics", headers=AUTH)
            assert r.status_code == 200, r.text
            assert r.headers["content-type"].startswith("text/plain; version=")
            return parse(r.text)

        agent_id = r.json()["agentId"]

        async def bot_in_room() -> bool:
            # online is not enough: the bot joins its rooms after it signs in,
            # and a message sent before the join is not the bot's to answer
            r = await http.get(f"/api/rooms/{room_id}", headers=owner.headers)
            return agent_id in {m["participantId"] for m in r.json()["members"]}

        await wait_for(bot_in_room)
        # the agents' protocols, in front of the app, are counted as its routes are
        assert (await http.get("/.well-known/agent-card.json")).status_code == 200
        assert (await http.post("/a2a", json={})).status_code == 401
        assert (await http.post("/mcp", json={})).status_code == 401
        before = await scrape()
        async with connect(url, bob) as socket:
            for i in range(3):
                await mesh.send(owner, room_id, f"hello {i}")
            await socket.expect("message", content="echo: hello 2")
            after = await scrape()
            assert value(after, "mesh_websocket_sessions") >= 1

        def grown(samples: Samples, name: str) -> float:
            return value(samples, name) - value(before, name)

        async def counted() -> bool:
            # the bot's answers may commit in another order than asked, and a
            # commit may be delivered before it is counted (CI: 5 of 6); each
            # message reached bob's session and the bot (and more: the
            # sender's own)
            nonlocal after
            after = await scrape()
            committed = grown(after, "mesh_messages_committed_total")
            return committed >= 6 and grown(after, "mesh_deliveries_total") >= 12

        await wait_for(counted)

    route = "/api/rooms/<room_id>/messages"
    assert value(after, "mesh_http_requests_total", method="POST", route=route, status="201") == 3
    latency = value(after, "mesh_http_request_duration_seconds_count", method="POST", route=route)
    assert latency == 3
    bucket = value(
        after, "mesh_http_request_duration_seconds_bucket", method="POST", route=route, le="+Inf"
    )
    assert bucket == 3
    assert value(after, "mesh_http_requests_total", method="GET", route="/metrics", status="200")
    card = {"method": "GET", "route": "/.well-known/agent-card.json", "status": "200"}
    assert value(after, "mesh_http_requests_total", **card) == 1
    assert value(after, "mesh_http_requests_total", method="POST", route="/a2a", status="401") == 1
    assert value(after, "mesh_http_requests_total", method="POST", route="/mcp", status="401") == 1
    # three sends and the bot's three answers, no more
    assert grown(after, "mesh_messages_committed_total") == 6
    batches = value(after, "mesh_store_batch_units_count")
    assert batches > value(before, "mesh_store_batch_units_count")
    assert value(after, "mesh_store_batch_units_sum") >= batches
    assert value(after, "mesh_store_commit_seconds_count") == batches
    assert ("mesh_store_write_queue", ()) in after
    assert value(after, "mesh_subscriptions_dropped_total") == 0
    assert ("mesh_webhook_failures_total", (("kind", "attempt"),)) in after
    assert value(after, "mesh_bots", status="running") == 1


async def test_metrics_are_off_without_a_token(tmp_path: Path, nursery: trio.Nursery) -> None:
    url = await serve_node(Settings(data_dir=tmp_path / "mesh-data"), nursery)
    async with httpx.AsyncClient(base_url=url) as http:
        assert_error(await http.get("/metrics"), 404, "not_found")
        assert_error(await http.get("/metrics", headers=AUTH), 404, "not_found")


@pytest.mark.parametrize("token", ["short", "with a space in it here", "\tpadded-token-0123456"])
def test_a_weak_metrics_token_is_refused(token: str) -> None:
    with pytest.raises(ConfigError, match="MESH_METRICS_TOKEN"):
        Settings.from_env({"MESH_METRICS_TOKEN": token})
