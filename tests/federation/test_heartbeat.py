"""The heartbeat's decisions, one beat at a time: nothing is announced
before the mesh is set up or while it is private, a public mesh is
announced, going private withdraws it once, and every heartbeat is signed
for the registry's DID (read from its manifest once, again after a refusal).
The registry is played by a real HTTP server (tests/receiver.py); beats are
called directly, so no test waits for a timer."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import trio

from quart_mesh import Settings, create_app
from quart_mesh.errors import Transient
from quart_mesh.federation.http import peer_client
from quart_mesh.federation.signing import check_signature
from quart_mesh.identity import load_or_create_node_identity
from tests.helpers import PASSWORD
from tests.receiver import Receiver, Request

MANIFEST = "/.well-known/mesh-manifest.json"


class Registry:
    """A registry's address: its manifest names ``did``; heartbeats get ``answer``."""

    def __init__(self, did: str | None) -> None:
        self.did = did
        self.answer: tuple[int, Any] = (200, None)
        self.receiver = Receiver(handler=self._handle)

    def _handle(self, request: Request) -> tuple[int, Any]:
        if request.path == MANIFEST:
            return 200, {"name": "Registry"} | ({"did": self.did} if self.did else {})
        return self.answer

    def beats(self) -> list[Request]:
        return [r for r in self.receiver.requests if r.path != MANIFEST]

    def manifest_reads(self) -> int:
        return sum(r.path == MANIFEST for r in self.receiver.requests)


async def test_a_beat_announces_only_a_public_mesh_that_is_set_up(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    registry_did = load_or_create_node_identity(tmp_path / "registry").did
    registry = Registry(None)
    port = await registry.receiver.start(nursery)
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
        assert registry.receiver.requests == []

        r = await client.post(
            "/api/setup/init",
            json={"name": "owner", "password": PASSWORD, "meshName": "Beating"},
        )
        assert r.status_code == 201
        token = (await r.get_json())["token"]
        # no DID in the registry's manifest: nothing is sent (the next beat reads it again)
        with pytest.raises(Transient, match="does not serve a mesh manifest with a did"):
            await heartbeat.beat(http)
        assert registry.beats() == []
        registry.did = registry_did
        assert await heartbeat.beat(http) == "ok"
        [first] = registry.beats()
        assert first.path == "/api/meshes/heartbeat"
        assert first.json()["name"] == "Beating"
        assert first.json()["url"] == "http://127.0.0.1:9"
        assert first.headers["x-mesh-did"] == app.node.identity.did  # signed by this node
        # ...for the registry: its DID is the signature's audience
        signer, _, _ = check_signature(
            first.headers, "POST", first.path, first.body, audience=registry_did,
            max_skew=300, now=time.time(),
        )  # fmt: skip
        assert signer == app.node.identity.did
        reads = registry.manifest_reads()

        r = await client.put(
            "/api/admin/mesh/settings",
            json={"visibility": "private"},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 200, await r.get_data()
        assert await heartbeat.beat(http) == "withdrawn"
        assert registry.beats()[-1].json()["status"] == "withdrawn"
        assert await heartbeat.beat(http) is None  # withdrawn once, then silent
        assert len(registry.beats()) == 2
        assert registry.manifest_reads() == reads  # the registry's DID was kept

        # the registry refuses (its key changed: bad_signature): its manifest is read again
        r = await client.put(
            "/api/admin/mesh/settings",
            json={"visibility": "public"},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 200, await r.get_data()
        registry.answer = (401, {"error": "no", "code": "bad_signature"})
        with pytest.raises(Transient, match="401 bad_signature"):
            await heartbeat.beat(http)
        registry.did = load_or_create_node_identity(tmp_path / "new-key").did
        registry.answer = (200, None)
        assert await heartbeat.beat(http) == "ok"
        assert registry.manifest_reads() == reads + 1
        last = registry.beats()[-1]
        check_signature(
            last.headers, "POST", last.path, last.body, audience=registry.did,
            max_skew=300, now=time.time(),
        )  # fmt: skip
