"""In-process checks of the app: error rendering, token revocation, fuzzing.

Fast unit-level tests with Quart's test client; the same behaviours are
covered over real sockets in tests/e2e/.
"""

from __future__ import annotations

import json
import string
from typing import TYPE_CHECKING, Any

import pytest
import trio
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from quart_mesh import MeshApp, Settings, create_app
from quart_mesh.errors import Forbidden, NotFound
from tests.helpers import PASSWORD

if TYPE_CHECKING:
    from quart.typing import TestClientProtocol


async def _setup(client: TestClientProtocol) -> dict[str, str]:
    r = await client.post(
        "/api/setup/init", json={"name": "owner", "password": PASSWORD, "meshName": "M"}
    )
    assert r.status_code == 201
    body = await r.get_json()
    return {"Authorization": f"Bearer {body['token']}"}


async def test_unexpected_errors_are_500_json_without_internals(settings: Settings) -> None:
    app = create_app(settings)

    @app.get("/api/boom")
    async def boom() -> str:
        raise RuntimeError("secret internals /etc/passwd")

    async with app.test_app():
        r = await app.test_client().get("/api/boom")
        assert r.status_code == 500
        body = await r.get_json()
        assert body["code"] == "internal_error"
        assert "request id" in body["error"]
        assert "secret" not in json.dumps(body)


async def test_deleted_participant_token_stops_working(
    app: MeshApp, client: TestClientProtocol
) -> None:
    owner_headers = await _setup(client)
    r = await client.post("/api/auth/register", json={"name": "bob", "password": PASSWORD})
    bob = await r.get_json()
    headers = {"Authorization": f"Bearer {bob['token']}"}
    assert (await client.get("/api/auth/me", headers=headers)).status_code == 200  # cached now
    accounts = app.node.accounts
    owner = await accounts.authenticate(owner_headers["Authorization"].split()[1])
    await accounts.delete_participant(owner, bob["participantId"])
    r = await client.get("/api/auth/me", headers=headers)
    assert r.status_code == 401
    assert (await r.get_json())["code"] == "invalid_token"
    # only an admin deletes, and never the owner
    r = await client.post("/api/auth/register", json={"name": "carol", "password": PASSWORD})
    carol = await accounts.authenticate((await r.get_json())["token"])
    with pytest.raises(Forbidden):
        await accounts.delete_participant(carol, owner.participant_id)
    with pytest.raises(Forbidden):
        await accounts.delete_participant(owner, owner.participant_id)
    with pytest.raises(NotFound):
        await accounts.delete_participant(owner, bob["participantId"])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)
field_names = st.sampled_from(
    [
        "name",
        "password",
        "meshName",
        "content",
        "to",
        "threadId",
        "participantId",
        "emoji",
        "description",
        "visibility",
        "registrationMode",
    ]
)
bodies = st.one_of(
    st.dictionaries(field_names, json_values, max_size=5).map(json.dumps),
    json_values.map(json.dumps),
    st.binary(max_size=64).map(lambda b: b.decode("latin-1")),
)
path_parts = st.text(alphabet=string.ascii_letters + string.digits + "-_%.", max_size=30)

ENDPOINTS = [
    ("POST", "/api/setup/init"),
    ("POST", "/api/auth/register"),
    ("POST", "/api/auth/login"),
    ("POST", "/api/auth/guest"),
    ("POST", "/api/rooms"),
    ("POST", "/api/rooms/{room}/messages"),
    ("GET", "/api/rooms/{room}/messages?limit={x}&before={x}&since={x}"),
    ("GET", "/api/rooms/{x}"),
    ("DELETE", "/api/rooms/{x}"),
    ("POST", "/api/rooms/{x}/join"),
    ("POST", "/api/dms"),
    ("DELETE", "/api/dms/{x}"),
    ("PATCH", "/api/rooms/{room}/messages/{x}"),
    ("POST", "/api/rooms/{room}/messages/{x}/reactions"),
    ("DELETE", "/api/rooms/{room}/messages/{x}/reactions/{x}"),
    ("POST", "/api/poll"),
    ("POST", "/api/agents/bootstrap"),
    ("POST", "/api/agents/{agent}/command"),
    ("POST", "/api/agents/{x}/command"),
    ("GET", "/api/agents/{agent}/commands/{x}"),
    ("POST", "/api/commands/{x}/result"),
    ("DELETE", "/api/agents/{x}"),
]


async def test_fuzz_endpoints_never_500(settings: Settings) -> None:
    """Random bodies and path segments: always a JSON answer below 500."""
    app = create_app(settings)
    async with app.test_app():
        client = app.test_client()
        headers = await _setup(client)
        r = await client.post("/api/rooms", json={"name": "fuzz"}, headers=headers)
        room = (await r.get_json())["roomId"]
        r = await client.post(
            "/api/agents/bootstrap", json={"name": "fuzzbot", "type": "simple"}, headers=headers
        )
        agent = (await r.get_json())["agentId"]
        cases: list[tuple[str, str, str]] = []

        @settings_profile
        @given(
            endpoint=st.sampled_from(ENDPOINTS), body=bodies, part=path_parts, auth=st.booleans()
        )
        def collect(endpoint: tuple[str, str], body: str, part: str, auth: bool) -> None:
            method, template = endpoint
            path = template.format(room=room, agent=agent, x=part)
            cases.append((method, path, body if auth else ""))

        # hypothesis drives a sync function; the requests run afterwards under trio
        await trio.to_thread.run_sync(collect)
        assert len(cases) >= 200
        for method, path, body in cases:
            r = await client.open(
                path,
                method=method,
                data=body.encode("utf-8", "surrogatepass"),
                headers={**headers, "Content-Type": "application/json"},
            )
            assert r.status_code < 500, (method, path, body, await r.get_data())
            if r.status_code >= 400:
                error: Any = await r.get_json()
                assert set(error) == {"error", "code"}, (method, path, error)
        assert (await client.get("/api/health")).status_code == 200


settings_profile = hypothesis_settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.store_free
def test_urls_build_with_any_value_name(settings: Settings) -> None:
    """The app's rules compile their URL builders when first used; a value
    called ``rule`` (a route's variable, or a query argument) builds as
    with werkzeug's own rules."""
    app = create_app(settings)

    @app.get("/api/things/<rule>")
    async def thing(rule: str) -> str:
        return rule

    urls = app.url_map.bind("mesh.example")
    assert urls.build("thing", {"rule": "r1"}) == "/api/things/r1"
    assert urls.build("thing", {"rule": "r1", "page": 2}) == "/api/things/r1?page=2"
    assert urls.build("static", {"filename": "a b.js", "rule": "q"}) == "/static/a%20b.js?rule=q"
