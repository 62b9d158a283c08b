"""The heartbeat's decisions, one beat at a time: nothing is announced
before the mesh is set up or while it is private, a public mesh is
announced, and going private withdraws it once. The registry is played by a
real HTTP server (tests/receiver.py); beats are called directly, so no test
waits for a timer."""

from __future__ import annotations

from pathlib import Path

import trio

from quart_mesh import Settings, create_app
from quart_mesh.federation.http import peer_client
from tests.helpers import PASSWORD
from tests.receiver import Receiver


async def test_a_beat_announces_only_a_public_mesh_that_is_set_up(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    registry = Receiver()
    port = await registry.start(nursery)
    settings = Settings(
        data_dir=tmp_path / "mesh-data",
        public_url="http://127.0.0.1:9",
        registry_url=f"http://127.0.0.1:{port}",
        heartbeat_interval=3600,  # the node's own loop beats once, at start
    )
    app = create_app(settings)
    async with app.test_app(), peer_client(5, "test", allow_private=True) as http:
        heartbeat = app.node.heartbeat
        assert heartbeat is not None
        client = app.test_client()

        assert await heartbeat.beat(http) is None  # not set up: nothing to announce
        assert registry.requests == []

        r = await client.post(
            "/api/setup/init",
            json={"name": "owner", "password": PASSWORD, "meshName": "Beating"},
        )
        assert r.status_code == 201
        token = (await r.get_json())["token"]
        assert await heartbeat.beat(http) == "ok"
        [first] = registry.requests
        assert first.path == "/api/meshes/heartbeat"
        assert first.json()["name"] == "Beating"
        assert first.json()["url"] == "http://127.0.0.1:9"
        assert first.headers["x-mesh-did"] == app.node.identity.did  # signed by this node
        assert first.headers["x-mesh-signature"]

        r = await client.put(
            "/api/admin/mesh/settings",
            json={"visibility": "private"},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 200, await r.get_data()
        assert await heartbeat.beat(http) == "withdrawn"
        assert registry.requests[-1].json()["status"] == "withdrawn"
        assert await heartbeat.beat(http) is None  # withdrawn once, then silent
        assert len(registry.requests) == 2
