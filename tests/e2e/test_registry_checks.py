"""What a registry refuses (decision 0057), over nodes served on loopback.

A node is a registry only when its operator turns it on. A heartbeat is
listed only when its ``url`` serves a manifest with the signer's DID,
fetched through the outbound SSRF guard; heartbeats are limited per DID,
manifest checks per client address, and heartbeats of nodes that are not
peers per client address before their nonces are stored; listings expire
and make room.

The meshes that announce themselves are played by fresh Ed25519 keys and
small real servers (:class:`tests.receiver.Receiver`) serving a manifest
with the DID a test chooses; a real node's heartbeat is in
``test_registry.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from quart_mesh import MeshApp, Settings, create_app, serve
from quart_mesh.config import Rate, RateLimits
from quart_mesh.services.ratelimit import RULE_MESSAGES
from quart_mesh.store import nonces as nonces_repo
from quart_mesh.store.schema import registry_entries
from tests.e2e.test_federation import _key, _signed
from tests.helpers import Mesh, assert_error, wait_for
from tests.openapi_check import check_answer
from tests.receiver import Receiver, Request, free_port

pytestmark = pytest.mark.timeout(60)

PATH = "/api/meshes/heartbeat"
MANIFEST = "/.well-known/mesh-manifest.json"


class ManifestHost:
    """A small real server standing for a mesh's address: it serves a manifest
    with ``did`` (``None``: 404; ``answer`` set: that answer instead)."""

    def __init__(self, did: str | None) -> None:
        self.did = did
        self.answer: tuple[int, Any] | None = None
        self.receiver = Receiver(handler=self._handle)

    def _handle(self, request: Request) -> tuple[int, Any]:
        if self.answer is not None:
            return self.answer
        if request.path != MANIFEST or self.did is None:
            return 404, {"error": "not found", "code": "not_found"}
        return 200, {"name": "Mesh", "did": self.did, "version": "x"}

    async def start(self, nursery: trio.Nursery) -> str:
        port = await self.receiver.start(nursery)
        return f"http://127.0.0.1:{port}"

    @property
    def fetches(self) -> int:
        return len(self.receiver.requests)


class Announcer:
    """A node's key: signs heartbeats for its DID, to the registry *app*."""

    def __init__(self, app: MeshApp) -> None:
        self.key: Ed25519PrivateKey
        self.key, self.did = _key()
        self.registry = app.node.identity.did

    def heartbeat(self, url: str, **fields: Any) -> tuple[bytes, dict[str, str]]:
        body = {"did": self.did, "status": "ok", "name": "Mesh", "description": "", "url": url}
        body |= {"members": 1, "bots": 0, "version": "1.0"} | fields
        return self.signed(body)

    def signed(self, body: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
        return _signed(self.key, self.did, PATH, body, audience=self.registry)


Serve = Callable[..., Awaitable[tuple[MeshApp, httpx.AsyncClient]]]


@pytest.fixture
async def serve_registry(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[Serve]:
    """Serve a node on 127.0.0.1 with these ``Settings`` overrides; its app
    and a client whose every JSON answer is checked against the OpenAPI
    document."""
    async with AsyncExitStack() as stack:
        count = 0

        async def start(**overrides: Any) -> tuple[MeshApp, httpx.AsyncClient]:
            nonlocal count
            count += 1
            app = create_app(Settings(data_dir=tmp_path / f"node-{count}", **overrides))
            url: str = await nursery.start(
                lambda task_status: serve(app, port=0, task_status=task_status)
            )
            http = await stack.enter_async_context(
                httpx.AsyncClient(
                    base_url=url, timeout=15, event_hooks={"response": [check_answer]}
                )
            )
            return app, http

        yield start


async def _post(http: httpx.AsyncClient, signed: tuple[bytes, dict[str, str]]) -> httpx.Response:
    raw, headers = signed
    return await http.post(PATH, content=raw, headers=headers)


async def _listed(http: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    r = await http.get("/api/meshes/public")
    assert r.status_code == 200, r.text
    return {entry["did"]: entry for entry in r.json()}


async def test_a_node_is_not_a_registry_unless_its_operator_turns_it_on(
    serve_registry: Serve, nursery: trio.Nursery
) -> None:
    app, http = await serve_registry()
    mesh = Announcer(app)
    host = ManifestHost(mesh.did)
    url = await host.start(nursery)
    assert_error(await http.get("/api/meshes/public"), 404, "registry_disabled")
    # signed or not, nothing is looked at, nothing fetched
    assert_error(await _post(http, mesh.heartbeat(url)), 404, "registry_disabled")
    assert_error(await http.post(PATH, json={"did": mesh.did}), 404, "registry_disabled")
    assert host.fetches == 0


async def test_only_a_url_serving_the_signers_manifest_is_listed(
    serve_registry: Serve, nursery: trio.Nursery
) -> None:
    app, http = await serve_registry(
        registry_enabled=True,
        outbound_allow_private=True,
        registry_manifest_max_bytes=2048,
        registry_verify_ttl=1.0,
        registry_fetch_timeout=2.0,
        # this test sends more heartbeats per DID than a node would
        rate_limits=RateLimits(registry_did=Rate(1000, 60)),
    )
    mesh, other = Announcer(app), Announcer(app)
    host = ManifestHost(None)
    url = await host.start(nursery)

    # nothing at url, nobody at all, a redirect (not followed): unreachable
    assert_error(await _post(http, mesh.heartbeat(url)), 400, "manifest_unreachable")
    down = f"http://127.0.0.1:{free_port()}"
    assert_error(await _post(http, mesh.heartbeat(down)), 400, "manifest_unreachable")
    host.answer = (302, None)
    assert_error(await _post(http, mesh.heartbeat(url)), 400, "manifest_unreachable")
    # another node's manifest, a manifest without a DID, not JSON, too long: mismatch
    for answer in [
        (200, {"did": other.did}),
        (200, {"name": "no did"}),
        (200, ["did", mesh.did]),
        (200, {"did": mesh.did, "padding": "x" * 4096}),
    ]:
        host.answer = answer
        assert_error(await _post(http, mesh.heartbeat(url)), 400, "manifest_mismatch")
    assert await _listed(http) == {}

    # the url serves the signer's manifest: listed, with what it says of itself
    host.answer, host.did = None, mesh.did
    r = await _post(http, mesh.heartbeat(url, name="Real", members=7))
    assert r.status_code == 200, r.text
    entry = (await _listed(http))[mesh.did]
    assert (entry["name"], entry["url"], entry["members"]) == ("Real", url, 7)
    # the check is trusted for a while: the next heartbeat fetches nothing
    fetched = host.fetches
    assert (await _post(http, mesh.heartbeat(url, members=8))).status_code == 200
    assert host.fetches == fetched
    assert (await _listed(http))[mesh.did]["members"] == 8

    # the url now serves another node: once the check is stale, mesh is refused
    host.did = other.did

    async def refused() -> bool:
        r = await _post(http, mesh.heartbeat(url))
        return r.status_code == 400 and r.json()["code"] == "manifest_mismatch"

    await wait_for(refused, 5, interval=0.2)
    # ...and the other node takes the URL over: a URL lists one mesh
    assert (await _post(http, other.heartbeat(url, name="Other"))).status_code == 200
    listed = await _listed(http)
    assert set(listed) == {other.did}
    assert listed[other.did]["name"] == "Other"

    # withdrawn: gone, and the next heartbeat is checked again
    raw, headers = other.signed({"did": other.did, "status": "withdrawn"})
    assert (await http.post(PATH, content=raw, headers=headers)).status_code == 200
    assert await _listed(http) == {}
    fetched = host.fetches
    assert (await _post(http, other.heartbeat(url))).status_code == 200
    assert host.fetches == fetched + 1


async def test_private_addresses_are_not_fetched_unless_the_operator_allows_them(
    serve_registry: Serve, nursery: trio.Nursery
) -> None:
    app, http = await serve_registry(registry_enabled=True)
    mesh = Announcer(app)
    host = ManifestHost(mesh.did)
    url = await host.start(nursery)
    port = url.rsplit(":", 1)[1]
    for address in (url, f"http://localhost:{port}", f"http://[::1]:{port}"):
        r = await _post(http, mesh.heartbeat(address))
        assert_error(r, 400, "manifest_unreachable")
        assert "private address" in r.json()["error"]
    assert host.fetches == 0  # the guard refused before connecting
    assert await _listed(http) == {}


async def test_heartbeats_are_limited_per_did_and_checks_per_address(
    serve_registry: Serve, nursery: trio.Nursery
) -> None:
    limits = RateLimits(
        registry_did=Rate(3, 60),
        registry_address=Rate(2, 3600),
        federation_stranger_address=Rate(10, 3600),
        exempt_addresses=(),
    )
    app, http = await serve_registry(
        registry_enabled=True, outbound_allow_private=True, rate_limits=limits
    )
    first, second, third = Announcer(app), Announcer(app), Announcer(app)
    hosts = [ManifestHost(a.did) for a in (first, second, third)]
    urls = [await h.start(nursery) for h in hosts]

    # per DID: every heartbeat counts (checked once, then trusted)
    for members in (1, 2, 3):
        r = await _post(http, first.heartbeat(urls[0], members=members))
        assert r.status_code == 200, r.text
    r = await _post(http, first.heartbeat(urls[0], members=4))
    assert_error(r, 429, "rate_limited")
    assert float(r.headers["Retry-After"]) > 0
    assert (await _listed(http))[first.did]["members"] == 3
    assert hosts[0].fetches == 1

    # per address: each manifest check counts; the third from this address is refused
    assert (await _post(http, second.heartbeat(urls[1]))).status_code == 200
    assert_error(await _post(http, third.heartbeat(urls[2])), 429, "rate_limited")
    assert hosts[2].fetches == 0
    # ...but not from another address
    transport = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
    async with httpx.AsyncClient(base_url=str(http.base_url), transport=transport) as elsewhere:
        assert (await _post(elsewhere, third.heartbeat(urls[2]))).status_code == 200
    assert set(await _listed(http)) == {first.did, second.did, third.did}

    # per address, before anything is stored: every heartbeat of a node that
    # is not a peer here counts against strangers' budget (10), so fresh DIDs
    # from one address are cut off before their nonces are kept
    stored = await app.node.db.read(nonces_repo.count)
    rules = []
    for _ in range(8):
        r = await _post(http, Announcer(app).heartbeat(urls[0]))
        assert_error(r, 429, "rate_limited")
        stranger = RULE_MESSAGES["federation_stranger_address"] in r.json()["error"]
        rules.append("stranger" if stranger else "registry_address")
    # the six heartbeats above from this address counted, refused ones too
    assert rules == ["registry_address"] * 4 + ["stranger"] * 4, rules
    assert await app.node.db.read(nonces_repo.count) == stored + 4
    # a listed mesh's heartbeat from this address as well: the budget is the address's
    assert_error(await _post(http, first.heartbeat(urls[0])), 429, "rate_limited")


async def test_listings_expire_and_expired_ones_make_room(
    serve_registry: Serve, nursery: trio.Nursery
) -> None:
    app, http = await serve_registry(
        registry_enabled=True,
        outbound_allow_private=True,
        registry_ttl=1.0,
        registry_max_entries=2,
    )
    meshes = [Announcer(app) for _ in range(3)]
    urls = []
    for mesh in meshes:
        urls.append(await ManifestHost(mesh.did).start(nursery))
    first, second, third = meshes
    assert (await _post(http, first.heartbeat(urls[0]))).status_code == 200
    assert (await _post(http, second.heartbeat(urls[1]))).status_code == 200
    # full of live listings: a newcomer waits; a listed mesh still beats
    assert_error(await _post(http, third.heartbeat(urls[2])), 429, "registry_full")
    assert (await _post(http, first.heartbeat(urls[0]))).status_code == 200
    assert set(await _listed(http)) == {first.did, second.did}

    # no heartbeat for the TTL: no longer listed (never a stale one)...
    async def gone() -> bool:
        return await _listed(http) == {}

    await wait_for(gone, 5, interval=0.1)
    # ...and dropped for a newcomer
    assert (await _post(http, third.heartbeat(urls[2]))).status_code == 200
    assert set(await _listed(http)) == {third.did}

    def kept(conn: Any) -> set[str]:
        return set(conn.execute(sa.select(registry_entries.c.did)).scalars())

    assert await app.node.db.read(kept) == {third.did}


async def test_a_real_node_refused_by_a_registry_logs_why(
    serve_registry: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    """A node's heartbeat to a registry that cannot check its URL (here a
    loopback address, which the registry's SSRF guard refuses) is not
    listed, and the node's log says what the registry answered."""
    _registry, registry = await serve_registry(registry_enabled=True)
    _app, node = await serve_registry(
        registry_url=str(registry.base_url).rstrip("/"), heartbeat_interval=0.2
    )
    await Mesh(node).setup(meshName="A")

    async def logged() -> bool:
        return "the registry answered 400 manifest_unreachable" in caplog.text

    await wait_for(logged, 10, interval=0.1)
    assert await _listed(registry) == {}


async def test_the_owner_turns_the_registry_on_and_off(
    serve_registry: Serve, nursery: trio.Nursery
) -> None:
    """The mesh setting ``registryEnabled`` (``mesh.settings``: the owner and
    admins) wins over ``MESH_REGISTRY_ENABLED``; nobody else can switch it."""
    app, http = await serve_registry(outbound_allow_private=True)
    mesh = Mesh(http)
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    guest = await mesh.guest()
    r = await http.post("/api/agents/bootstrap", json={"name": "helper", "type": "simple"})
    assert r.status_code == 201, r.text
    bot_headers = {"Authorization": f"Bearer {r.json()['token']}"}
    announcer = Announcer(app)
    url = await ManifestHost(announcer.did).start(nursery)

    async def switch(headers: dict[str, str], on: Any) -> httpx.Response:
        return await http.put(
            "/api/admin/mesh/settings", json={"registryEnabled": on}, headers=headers
        )

    r = await http.get("/api/admin/mesh/settings", headers=owner.headers)
    assert (r.json()["registryEnabled"], r.json()["registryEnabledSource"]) == (False, "settings")
    for headers in (bob.headers, guest.headers, bot_headers, {}):
        assert (await switch(headers, True)).status_code in (401, 403)
    assert_error(await switch(owner.headers, "yes"), 400)
    assert_error(await http.get("/api/meshes/public"), 404, "registry_disabled")

    # on: a real mesh is listed, and the manifest says this node is a registry
    r = await switch(owner.headers, True)
    assert r.status_code == 200, r.text
    assert (r.json()["registryEnabled"], r.json()["registryEnabledSource"]) == (True, "admin")
    manifest = (await http.get("/.well-known/mesh-manifest.json")).json()
    assert manifest["federation"]["isRegistry"] is True
    assert (await _post(http, announcer.heartbeat(url))).status_code == 200
    assert set(await _listed(http)) == {announcer.did}

    # an admin demoted to member loses the switch at once
    r = await http.put(
        f"/api/participants/{bob.participant_id}/role",
        json={"role": "admin"},
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    assert (await switch(bob.headers, True)).status_code == 200
    r = await http.put(
        f"/api/participants/{bob.participant_id}/role",
        json={"role": "member"},
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    assert_error(await switch(bob.headers, False), 403)

    # off: both paths are gone again
    assert (await switch(owner.headers, False)).json()["registryEnabled"] is False
    assert_error(await http.get("/api/meshes/public"), 404, "registry_disabled")
    assert_error(await _post(http, announcer.heartbeat(url)), 404, "registry_disabled")
    manifest = (await http.get("/.well-known/mesh-manifest.json")).json()
    assert manifest["federation"]["isRegistry"] is False


async def test_the_owner_can_turn_off_a_registry_the_operator_turned_on(
    serve_registry: Serve,
) -> None:
    _app, http = await serve_registry(registry_enabled=True)
    owner = await Mesh(http).setup()
    assert (await http.get("/api/meshes/public")).status_code == 200
    r = await http.put(
        "/api/admin/mesh/settings", json={"registryEnabled": False}, headers=owner.headers
    )
    assert (r.json()["registryEnabled"], r.json()["registryEnabledSource"]) == (False, "admin")
    assert_error(await http.get("/api/meshes/public"), 404, "registry_disabled")
