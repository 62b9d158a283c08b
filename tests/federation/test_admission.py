"""Who is heard on the node-to-node paths, decided before a signed request's
nonce is stored (``Federation._admit``, decision 0058), and what a stranger's
requests are counted as: a table of every kind of signer against every path;
the per-address budget of strangers (``federation_stranger_address``); the
per-address cap on pending requests, which counts an IPv6 client by its /64;
and a decline with federation off, which contacts nobody.

In-process nodes on either store; the other nodes are played by throwaway
keys (``tests.e2e.test_federation._signed``), their client addresses set in
the request's ASGI scope."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from quart.wrappers import Response

from quart_mesh import MeshApp, Settings, create_app
from quart_mesh.config import Rate, RateLimits
from quart_mesh.ids import new_id
from quart_mesh.records import now_ms
from quart_mesh.services.ratelimit import RULE_MESSAGES
from quart_mesh.store import connections as connections_repo
from quart_mesh.store import nonces as nonces_repo
from tests.e2e.test_federation import _key, _signed
from tests.helpers import PASSWORD
from tests.receiver import Receiver

pytestmark = pytest.mark.timeout(60)

REQUEST = "/api/connections/request"
HEARTBEAT = "/api/meshes/heartbeat"
DISCONNECTED = "/api/connections/disconnected"
#: every node-to-node path
PATHS = (
    REQUEST,
    HEARTBEAT,
    "/api/connections/accepted",
    "/api/connections/declined",
    DISCONNECTED,
    "/api/federation/relay",
    "/api/federation/rooms",
    "/api/federation/rooms/unshared",
)
#: what refuses a stranger before its nonce is stored
UNKNOWN = (401, "unknown_node")
NOT_CONNECTED = (403, "not_connected")
HEARD = None
WEEK_MS = 7 * 24 * 3600 * 1000


@asynccontextmanager
async def _node(settings: Settings) -> AsyncIterator[MeshApp]:
    app = create_app(settings)
    async with app.test_app():
        yield app


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[MeshApp]:
    """A registry too (so heartbeats reach the signature check); strangers'
    budget is large here, and tested on its own below."""
    limits = RateLimits(federation_stranger_address=Rate(1000, 3600))
    settings = Settings(data_dir=tmp_path / "node", registry_enabled=True, rate_limits=limits)
    async with _node(settings) as app:
        yield app


class Signer:
    """Another node's key, signing for *app*."""

    def __init__(self, app: MeshApp) -> None:
        self.app = app
        self.key, self.did = _key()

    async def send(
        self, path: str, body: dict[str, Any] | None = None, *, client: str | None = "203.0.113.9"
    ) -> Response:
        """Sign *body* for *path* and send it from the address *client*
        (``None``: no address, as over a unix socket)."""
        if body is None:
            body = {"connectionId": new_id(), "did": self.did}
        raw, headers = _signed(self.key, self.did, path, body, audience=self.app.node.identity.did)
        scope = None if client is None else {"client": (client, 40000)}
        return await self.app.test_client().post(path, data=raw, headers=headers, scope_base=scope)

    async def post(
        self, path: str, body: dict[str, Any] | None = None, *, client: str | None = "203.0.113.9"
    ) -> tuple[int, str | None]:
        """:meth:`send`; (status, code)."""
        r = await self.send(path, body, client=client)
        return r.status_code, ((await r.get_json()) or {}).get("code")

    def request(self) -> dict[str, Any]:
        """A connection request's body."""
        return {
            "did": self.did,
            "name": "x",
            "url": "http://203.0.113.50",
            "connectionId": new_id(),
        }

    async def ask(self, *, client: str | None = "203.0.113.9") -> tuple[int, str | None]:
        """A connection request."""
        return await self.post(REQUEST, self.request(), client=client)

    async def known_as(self, direction: str, status: str, *, age_ms: int = 0) -> None:
        """Give this signer a connection here, *age_ms* old."""
        now = now_ms()
        row = connections_repo.ConnectionRow(
            new_id(), self.did, "x", "http://203.0.113.50", direction, status, "", now - age_ms, now
        )
        await self.app.node.db.write(lambda c: connections_repo.replace_connection(c, row))


async def _nonces(app: MeshApp) -> int:
    return await app.node.db.read(nonces_repo.count)


#: (a signer's connection here, or None; then what each of PATHS gets:
#: HEARD, its nonce stored, or the refusal, nothing stored)
ADMISSION = [
    # peers: an accepted connection, or one this node asked for
    (("outbound", "accepted", 0), [HEARD] * 8),
    (("inbound", "accepted", 0), [HEARD] * 8),
    (("outbound", "pending", 0), [HEARD] * 8),
    # strangers: a request, a heartbeat; a notice of an ended connection only with a row
    (None, [HEARD, HEARD, UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN]),
    *(
        (row, [HEARD, HEARD, NOT_CONNECTED, NOT_CONNECTED, HEARD, *[NOT_CONNECTED] * 3])
        for row in (
            ("inbound", "pending", 0),  # its own request, waiting for an admin
            ("inbound", "pending", WEEK_MS + 1000),  # its request, expired
            ("inbound", "declined", 0),
            ("outbound", "declined", 0),
            ("inbound", "disconnected", 0),
            ("outbound", "disconnected", 0),
        )
    ),
]


def _name(row: tuple[str, str, int] | None) -> str:
    if row is None:
        return "no-row"
    direction, status, age = row
    return f"{status}-{direction}" + ("-expired" if age else "")


@pytest.mark.parametrize(("row", "expected"), ADMISSION, ids=[_name(row) for row, _ in ADMISSION])
async def test_who_is_heard_on_which_path_before_its_nonce_is_stored(
    node: MeshApp, row: tuple[str, str, int] | None, expected: list[tuple[int, str] | None]
) -> None:
    for path, refusal in zip(PATHS, expected, strict=True):
        signer = Signer(node)  # one signer per path: what one answer does stays apart
        if row is not None:
            await signer.known_as(row[0], row[1], age_ms=row[2])
        before = await _nonces(node)
        status, code = await signer.post(path)
        stored = await _nonces(node) - before
        if refusal is None:
            assert code not in ("not_connected", "rate_limited"), (path, status, code)
            assert stored == 1, (path, status, code)
        else:
            assert ((status, code), stored) == (refusal, 0), path


async def test_strangers_are_heard_within_a_budget_per_address(tmp_path: Path) -> None:
    limits = RateLimits(federation_stranger_address=Rate(3, 3600))
    settings = Settings(data_dir=tmp_path / "node", registry_enabled=True, rate_limits=limits)
    async with _node(settings) as app:
        declined = Signer(app)
        await declined.known_as("inbound", "declined")
        peer = Signer(app)
        await peer.known_as("outbound", "accepted")
        here = "2001:db8:1:2::1"
        # three requests of a stranger's kinds from one /64, whoever signs them...
        assert (await Signer(app).ask(client=here))[0] == 201
        assert (await Signer(app).post(HEARTBEAT, client="2001:db8:1:2::2"))[0] == 400
        assert await declined.post(DISCONNECTED, client="2001:db8:1:2:ffff::3") == (
            404,
            "connection_not_found",
        )
        stored = await _nonces(app)
        # ...and no more, of any kind, nothing stored
        for refused in (
            await Signer(app).ask(client="2001:db8:1:2::4"),
            await Signer(app).post(HEARTBEAT, client=here),
            await declined.post(DISCONNECTED, client=here),
        ):
            assert refused == (429, "rate_limited")
        stranger = Signer(app)
        r = await stranger.send(REQUEST, stranger.request(), client=here)
        assert RULE_MESSAGES["federation_stranger_address"] in (await r.get_json())["error"]
        assert float(r.headers["Retry-After"]) > 0
        assert await _nonces(app) == stored
        # a peer is not counted; another /64 has its own budget; loopback is exempt
        assert (await peer.post(DISCONNECTED, client=here))[1] == "connection_not_found"
        assert (await Signer(app).ask(client="2001:db8:1:3::1"))[0] == 201
        for _ in range(4):
            assert await Signer(app).post(HEARTBEAT, client="127.0.0.1") == (400, "invalid_field")


async def test_pending_requests_count_an_ipv6_client_by_its_64(tmp_path: Path) -> None:
    """Three pending requests per address (the default), an IPv6 address
    counted as its /64, like every per-address limit; requests whose client
    address is not known (a unix socket) count as one address."""
    async with _node(Settings(data_dir=tmp_path / "node")) as app:
        for host in ("::1", "::2", ":ffff:ffff:ffff:ffff"):
            assert (await Signer(app).ask(client=f"2001:db8:0:7{host}"))[0] == 201
        status, code = await Signer(app).ask(client="2001:db8:0:7:abcd::9")
        assert (status, code) == (429, "rate_limited")
        # the next /64 is another address
        assert (await Signer(app).ask(client="2001:db8:0:8::1"))[0] == 201
        # an address not known: all such requests share one count
        for _ in range(3):
            assert (await Signer(app).ask(client=None))[0] == 201
        assert await Signer(app).ask(client=None) == (429, "rate_limited")

        rows = await app.node.db.read(connections_repo.list_connections)
        counted = sorted(row.request_address or "" for row in rows)
        assert counted == ["2001:db8:0:7::/64"] * 3 + ["2001:db8:0:8::/64"] + ["unknown"] * 3


async def test_a_request_is_declined_with_federation_off_without_contacting_anyone(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """A request that arrived while federation was on can be declined after
    it is turned off; the requester is not contacted (``peerNotified``
    false), even though its URL would answer."""
    requester = Receiver()  # the URL the request gives: records anything sent to it
    url = f"http://127.0.0.1:{await requester.start(nursery)}"
    data_dir = tmp_path / "node"
    async with _node(Settings(data_dir=data_dir)) as app:
        r = await app.test_client().post(
            "/api/setup/init", json={"name": "owner", "password": PASSWORD, "meshName": "M"}
        )
        assert r.status_code == 201
        token = (await r.get_json())["token"]
        signer = Signer(app)
        body = signer.request() | {"url": url}
        assert (await signer.post(REQUEST, body))[0] == 201
    off = Settings(data_dir=data_dir, federation_enabled=False, outbound_allow_private=True)
    async with _node(off) as app:
        client = app.test_client()
        owner = {"Authorization": f"Bearer {token}"}
        path = f"/api/connections/{body['connectionId']}"
        r = await client.post(f"{path}/accept", headers=owner)
        assert r.status_code == 403
        assert (await r.get_json())["code"] == "federation_disabled"
        r = await client.post(f"{path}/decline", headers=owner)
        assert r.status_code == 200, await r.get_data()
        answer = await r.get_json()
        assert (answer["status"], answer["peerNotified"]) == ("declined", False)
        r = await client.get("/api/connections", headers=owner)
        assert [c["status"] for c in await r.get_json()] == ["declined"]
    assert requester.requests == []
