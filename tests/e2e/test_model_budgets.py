"""Models cost money: the owner decides who spends it (issue 27 item 3,
decision 0053). Over a served node, a real OpenAI-compatible upstream on
loopback (tests/upstream.py) and the official ``openai`` client: who may use
a model, the caps on a body, ``messages`` checked as OpenAI checks them
before anything is forwarded, and budgets per role and participant
(requests a minute, tokens a day counted from the upstream's ``usage``,
streams included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import trio

from quart_mesh import Settings, create_app, serve
from quart_mesh.config import ModelBudget, ModelConfig
from tests.helpers import Mesh, User, assert_error, wait_for
from tests.upstream import Upstream

KEY = "sk-operator-key-0b7e"
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture
def settings(tmp_path: Path, upstream: Upstream) -> Settings:
    url = f"http://127.0.0.1:{upstream.port}/v1"
    return Settings(
        data_dir=tmp_path / "mesh-data",
        models=(
            ModelConfig("configured", url, "echo-model"),
            ModelConfig("open", url, "echo-model", min_role="spectator", guests=True),
        ),
        model_timeout=5.0,
        model_max_n=2,
        model_max_tokens=1000,
    )


def completions(upstream: Upstream) -> list[Any]:
    return [s.body for s in upstream.requests if s.path.endswith("/chat/completions")]


async def ask(mesh: Mesh, user: User, **body: Any) -> httpx.Response:
    return await mesh.http.post(
        "/api/models/v1/chat/completions", json={"messages": HELLO, **body}, headers=user.headers
    )


def openai_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = dict(response.json()["error"])
    assert error["code"] == code, error
    assert isinstance(error["message"], str)
    assert error["message"]
    return error


async def add_keyed_model(mesh: Mesh, owner: User, upstream: Upstream, **extra: Any) -> None:
    r = await mesh.http.post(
        "/api/models",
        json={
            "name": "paid",
            "baseUrl": f"http://127.0.0.1:{upstream.port}/v1",
            "upstreamModel": "echo-model",
            "apiKey": KEY,
            **extra,
        },
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text


async def test_guests_and_spectators_are_kept_out_unless_the_owner_lets_them_in(
    mesh: Mesh, upstream: Upstream
) -> None:
    owner = await mesh.setup(visibility="public")
    await add_keyed_model(mesh, owner, upstream)
    guest = await mesh.guest()
    bob = await mesh.register("bob")
    watcher = await mesh.register("watcher")
    r = await mesh.http.put(
        f"/api/participants/{watcher.participant_id}/role",
        json={"role": "spectator"},
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    bot = (
        await mesh.http.post("/api/agents/bootstrap", json={"name": "asker", "type": "nanoclaw"})
    ).json()
    bot_user = User(bot["agentId"], "asker", bot["token"])

    # the finding: a guest with n=128 and max_tokens=100000 on the operator's key
    for who in (guest, watcher):
        for model in ("paid", "configured"):
            r = await ask(mesh, who, model=model, n=128, max_tokens=100_000)
            error = openai_error(r, 404, "model_not_found")
            assert "do not have access" in error["message"]
        listed = (await mesh.http.get("/api/models/v1/models", headers=who.headers)).json()
        assert [m["id"] for m in listed["data"]] == ["open"]
        shown = (await mesh.http.get("/api/models", headers=who.headers)).json()
        assert [m["name"] for m in shown] == ["open"]
    assert completions(upstream) == []
    # members and bots use it by default (the bots' role, agent, is the default floor)
    for who in (bob, bot_user):
        assert (await ask(mesh, who, model="paid")).status_code == 200
    # a model whose settings let guests in
    assert (await ask(mesh, guest, model="open")).status_code == 200
    assert (await ask(mesh, watcher, model="open")).status_code == 200

    # only those who manage models change who may use one
    r = await mesh.http.patch("/api/models/paid", json={"guests": True}, headers=bob.headers)
    assert_error(r, 403, "forbidden")
    r = await mesh.http.patch("/api/models/paid", json={"minRole": "nobody"}, headers=owner.headers)
    assert_error(r, 400, "invalid_role")
    assert_error(
        await mesh.http.patch("/api/models/nope", json={"guests": True}, headers=owner.headers),
        404,
        "model_not_found",
    )
    # spectators in, guests still out: the guests switch is its own
    r = await mesh.http.patch(
        "/api/models/paid", json={"minRole": "spectator"}, headers=owner.headers
    )
    assert r.status_code == 200, r.text
    assert (r.json()["minRole"], r.json()["guests"]) == ("spectator", False)
    assert (await ask(mesh, watcher, model="paid")).status_code == 200
    openai_error(await ask(mesh, guest, model="paid"), 404, "model_not_found")
    r = await mesh.http.patch("/api/models/paid", json={"guests": True}, headers=owner.headers)
    assert r.status_code == 200, r.text
    assert (r.json()["minRole"], r.json()["guests"]) == ("spectator", True)
    before = len(completions(upstream))
    assert (await ask(mesh, guest, model="paid")).status_code == 200
    assert (await ask(mesh, watcher, model="paid")).status_code == 200
    assert len(completions(upstream)) == before + 2
    # still capped: the finding's body is refused, and nothing reaches the upstream
    r = await ask(mesh, guest, model="paid", n=128, max_tokens=100_000)
    error = openai_error(r, 400, "integer_above_max_value")
    assert error["param"] == "n"
    assert error["type"] == "invalid_request_error"
    assert len(completions(upstream)) == before + 2

    # a configured model: raised to moderators, members are kept out (stored, so it
    # holds for the configured model as for an added one)
    r = await mesh.http.patch(
        "/api/models/configured", json={"minRole": "moderator"}, headers=owner.headers
    )
    assert r.status_code == 200, r.text
    openai_error(await ask(mesh, bob, model="configured"), 404, "model_not_found")
    assert (await ask(mesh, owner, model="configured")).status_code == 200
    # a demoted participant's token loses access at once
    r = await mesh.http.put(
        f"/api/participants/{bob.participant_id}/role",
        json={"role": "spectator"},
        headers=owner.headers,
    )
    assert r.status_code == 200
    r = await mesh.http.patch(
        "/api/models/paid", json={"minRole": "agent", "guests": False}, headers=owner.headers
    )
    assert r.status_code == 200
    openai_error(await ask(mesh, bob, model="paid"), 404, "model_not_found")
    openai_error(await ask(mesh, guest, model="paid"), 404, "model_not_found")
    # an admin's view says who may use each model
    admin_view = {
        m["name"]: (m["minRole"], m["guests"])
        for m in (await mesh.http.get("/api/models", headers=owner.headers)).json()
    }
    assert admin_view == {
        "configured": ("moderator", False),
        "open": ("spectator", True),
        "paid": ("agent", False),
    }


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"messages": [{"role": 5}]}, "messages.[0].role", "invalid_value"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages.[0].role", "invalid_value"),
        ({"messages": [{"content": "x"}]}, "messages.[0].role", "missing_required_parameter"),
        ({"messages": ["hello"]}, "messages.[0]", "invalid_type"),
        ({"messages": []}, "messages", "empty_array"),
        ({"messages": "hello"}, "messages", "invalid_type"),
        ({"messages": None}, "messages", "missing_required_parameter"),
        (
            {"messages": [{"role": "user"}]},
            "messages.[0].content",
            "missing_required_parameter",
        ),
        ({"messages": [{"role": "user", "content": 5}]}, "messages.[0].content", "invalid_type"),
        (
            {"messages": [{"role": "user", "content": [{"text": "no type"}]}]},
            "messages.[0].content.[0]",
            "invalid_type",
        ),
        (
            {"messages": [*HELLO, {"role": "tool", "content": "42"}]},
            "messages.[1].tool_call_id",
            "missing_required_parameter",
        ),
        (
            {"messages": [*HELLO, {"role": "assistant"}]},
            "messages.[1].content",
            "missing_required_parameter",
        ),
        (
            {"messages": [{"role": "user", "content": "x", "name": 3}]},
            "messages.[0].name",
            "invalid_type",
        ),
        ({"n": 3}, "n", "integer_above_max_value"),
        ({"n": 0}, "n", "integer_below_min_value"),
        ({"n": "2"}, "n", "invalid_type"),
        ({"max_tokens": 1001}, "max_tokens", "integer_above_max_value"),
        ({"max_completion_tokens": 100_000}, "max_completion_tokens", "integer_above_max_value"),
        ({"max_tokens": True}, "max_tokens", "invalid_type"),
        ({"stream": "yes"}, "stream", "invalid_type"),
    ],
)
async def test_a_body_openai_would_refuse_is_refused_before_anything_is_forwarded(
    mesh: Mesh, upstream: Upstream, body: dict[str, Any], param: str, code: str
) -> None:
    await mesh.setup()
    bob = await mesh.register("bob")
    error = openai_error(await ask(mesh, bob, model="configured", **body), 400, code)
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    assert completions(upstream) == []


async def test_good_bodies_at_the_caps_pass_through(mesh: Mesh, upstream: Upstream) -> None:
    await mesh.setup()
    bob = await mesh.register("bob")
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "developer", "content": [{"type": "text", "text": "really"}]},
        {"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "bob"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f"}}],
        },
        {"role": "tool", "content": "42", "tool_call_id": "c1"},
        {"role": "user", "content": "and?"},
    ]
    r = await ask(
        mesh, bob, model="configured", messages=messages, n=2, max_tokens=1000, temperature=0.2
    )
    assert r.status_code == 200, r.text
    [seen] = completions(upstream)
    assert seen == {
        "model": "echo-model",
        "messages": messages,
        "n": 2,
        "max_tokens": 1000,
        "temperature": 0.2,
    }


async def test_requests_a_minute_answer_429_rate_limit_exceeded_with_retry_after(
    mesh: Mesh, upstream: Upstream
) -> None:
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    carol = await mesh.register("carol")
    r = await mesh.http.put(
        "/api/models/budgets/roles/member", json={"requestsPerMinute": 2}, headers=owner.headers
    )
    assert r.status_code == 200, r.text
    assert r.json() == {
        "scope": "role",
        "subject": "member",
        "requestsPerMinute": 2,
        "tokensPerDay": None,
    }

    def use_client() -> Any:
        client = openai.OpenAI(
            base_url=str(mesh.http.base_url) + "/api/models/v1", api_key=bob.token, max_retries=0
        )
        try:
            for _ in range(2):
                client.chat.completions.create(model="configured", messages=HELLO)  # type: ignore[arg-type]
            try:
                client.chat.completions.create(model="configured", messages=HELLO)  # type: ignore[arg-type]
            except openai.RateLimitError as error:
                return error
            raise AssertionError("a third request in a minute was let through")
        finally:
            client.close()

    refused = await trio.to_thread.run_sync(use_client)
    assert refused.status_code == 429
    assert refused.code == "rate_limit_exceeded"
    assert refused.type == "rate_limit_exceeded"
    retry = int(refused.response.headers["retry-after"])
    assert 1 <= retry <= 60
    assert len(completions(upstream)) == 2
    # one participant's budget is its own: carol (same role) is not held back
    assert (await ask(mesh, carol, model="configured")).status_code == 200
    # a participant budget wins over its role's: bob gets more at once
    r = await mesh.http.put(
        f"/api/models/budgets/participants/{bob.participant_id}",
        json={"requestsPerMinute": 100},
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    assert (await ask(mesh, bob, model="configured")).status_code == 200
    # the owner has no budget
    for _ in range(4):
        assert (await ask(mesh, owner, model="configured")).status_code == 200


async def test_tokens_a_day_answer_429_insufficient_quota_streams_included(
    mesh: Mesh, upstream: Upstream
) -> None:
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    r = await mesh.http.put(
        f"/api/models/budgets/participants/{bob.participant_id}",
        json={"tokensPerDay": 20},
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text

    async def today() -> dict[str, Any]:
        r = await mesh.http.get("/api/models/budgets", headers=owner.headers)
        assert r.status_code == 200, r.text
        return {p["participantId"]: p for p in r.json()["participants"]}

    # a stream: its usage (5 + 4 words = 9) comes in its last chunk; the proxy
    # asked for it (stream_options.include_usage), since bob did not
    r = await ask(
        mesh,
        bob,
        model="configured",
        stream=True,
        messages=[{"role": "user", "content": "one two three"}],
    )
    assert r.status_code == 200
    assert b"[DONE]" in r.content
    assert completions(upstream)[-1]["stream_options"] == {"include_usage": True}

    async def streamed_counted() -> bool:
        return (await today()).get(bob.participant_id, {}).get("tokens") == 9

    await wait_for(streamed_counted)
    # a plain answer: 8 more (usage of tests/upstream.py), 17 of 20
    assert (await ask(mesh, bob, model="configured")).status_code == 200
    mine = (await today())[bob.participant_id]
    assert (mine["requests"], mine["tokens"]) == (2, 17)
    own = (await mesh.http.get("/api/models/budget", headers=bob.headers)).json()
    assert own["tokensToday"] == 17
    assert own["requestsToday"] == 2
    assert (own["tokensPerDay"], own["requestsPerMinute"]) == (20, 60)
    assert own["renewsAt"].endswith("T00:00:00.000Z")
    assert mine["budget"]["tokensPerDay"] == 20
    assert mine["own"] == {"requestsPerMinute": None, "tokensPerDay": 20}
    # under budget still: one more goes (OpenAI counts after the fact too), 25 of 20
    assert (await ask(mesh, bob, model="configured")).status_code == 200
    sent = len(completions(upstream))

    def use_client() -> Any:
        client = openai.OpenAI(
            base_url=str(mesh.http.base_url) + "/api/models/v1", api_key=bob.token, max_retries=0
        )
        try:
            client.chat.completions.create(model="configured", messages=HELLO)  # type: ignore[arg-type]
        except openai.RateLimitError as error:
            return error
        finally:
            client.close()
        raise AssertionError("a request over the day's tokens was let through")

    refused = await trio.to_thread.run_sync(use_client)
    assert refused.status_code == 429
    assert (refused.code, refused.type) == ("insufficient_quota", "insufficient_quota")
    assert 1 <= int(refused.response.headers["retry-after"]) <= 86_400
    error = openai_error(
        await ask(mesh, bob, model="configured", stream=True), 429, "insufficient_quota"
    )
    assert "quota" in error["message"]
    # the node's own use of the proxy on bob's behalf is held to the same budget
    r = await mesh.http.post(
        "/api/apps/generate",
        json={"prompt": "a counter", "model": "configured"},
        headers=bob.headers,
    )
    assert_error(r, 429, "insufficient_quota")
    assert len(completions(upstream)) == sent
    # raised over REST: it takes effect at once
    r = await mesh.http.put(
        f"/api/models/budgets/participants/{bob.participant_id}",
        json={"tokensPerDay": 1000},
        headers=owner.headers,
    )
    assert r.status_code == 200
    assert (await ask(mesh, bob, model="configured")).status_code == 200
    # 0 is no limit; null inherits the role's and then the settings'
    r = await mesh.http.put(
        f"/api/models/budgets/participants/{bob.participant_id}",
        json={"tokensPerDay": None},
        headers=owner.headers,
    )
    assert r.status_code == 200
    mine = (await today()).get(bob.participant_id)
    assert mine is not None
    assert mine["own"] == {"requestsPerMinute": None, "tokensPerDay": None}
    assert mine["budget"]["tokensPerDay"] == 200_000


async def test_a_stream_whose_client_asked_for_usage_keeps_it_and_one_that_did_not_gets_none(
    mesh: Mesh, upstream: Upstream
) -> None:
    await mesh.setup()
    bob = await mesh.register("bob")

    def use_client() -> tuple[list[Any], list[Any]]:
        client = openai.OpenAI(
            base_url=str(mesh.http.base_url) + "/api/models/v1", api_key=bob.token, max_retries=0
        )
        try:
            plain = list(
                client.chat.completions.create(model="configured", messages=HELLO, stream=True)  # type: ignore[arg-type]
            )
            asked = list(
                client.chat.completions.create(
                    model="configured",
                    messages=HELLO,  # type: ignore[arg-type]
                    stream=True,
                    stream_options={"include_usage": True},
                )
            )
            return plain, asked
        finally:
            client.close()

    plain, asked = await trio.to_thread.run_sync(use_client)
    # every chunk a client that did not ask gets has a choice (``chunk.choices[0]`` works)
    assert all(chunk.choices for chunk in plain)
    assert "".join(c.choices[0].delta.content or "" for c in plain) == "echo: hello"
    assert any(chunk.usage is not None for chunk in asked)


async def test_budgets_are_for_admins_and_only_below_their_own_rank(
    mesh: Mesh, upstream: Upstream
) -> None:
    owner = await mesh.setup()
    admin = await mesh.register("admin")
    bob = await mesh.register("bob")
    r = await mesh.http.put(
        f"/api/participants/{admin.participant_id}/role",
        json={"role": "admin"},
        headers=owner.headers,
    )
    assert r.status_code == 200
    put = mesh.http.put
    # a member may neither read nor set budgets
    assert_error(await mesh.http.get("/api/models/budgets", headers=bob.headers), 403)
    r = await put("/api/models/budgets/roles/member", json={"tokensPerDay": 0}, headers=bob.headers)
    assert_error(r, 403)
    r = await put(
        f"/api/models/budgets/participants/{bob.participant_id}",
        json={"tokensPerDay": 0},
        headers=bob.headers,
    )
    assert_error(r, 403)
    # an admin sets members' budgets, not admins' (its own role or itself) or the owner's
    r = await put(
        "/api/models/budgets/roles/member", json={"tokensPerDay": 5}, headers=admin.headers
    )
    assert r.status_code == 200, r.text
    for path in (
        "/api/models/budgets/roles/admin",
        f"/api/models/budgets/participants/{admin.participant_id}",
        f"/api/models/budgets/participants/{owner.participant_id}",
    ):
        r = await put(path, json={"tokensPerDay": 999_999}, headers=admin.headers)
        assert_error(r, 403, "budget_above_own")
    # bad input is a 400 or 404, never a 500
    for path, body, status, code in [
        ("/api/models/budgets/roles/member", {"tokensPerDay": -1}, 400, "invalid_budget"),
        ("/api/models/budgets/roles/member", {"tokensPerDay": "lots"}, 400, None),
        ("/api/models/budgets/roles/member", {"requestsPerMinute": 1 << 41}, 400, None),
        ("/api/models/budgets/roles/nobody", {"tokensPerDay": 1}, 404, "role_not_found"),
        ("/api/models/budgets/participants/nobody", {"tokensPerDay": 1}, 404, None),
    ]:
        assert_error(await put(path, json=body, headers=owner.headers), status, code)
    listed = (await mesh.http.get("/api/models/budgets", headers=admin.headers)).json()
    roles = {r["role"]: r for r in listed["roles"]}
    assert "owner" not in roles
    assert roles["member"]["tokensPerDay"] == 5
    assert roles["agent"]["tokensPerDay"] is None
    assert listed["defaults"] == {"requestsPerMinute": 60, "tokensPerDay": 200_000}


async def test_a_deleted_bots_token_spends_nothing(mesh: Mesh, upstream: Upstream) -> None:
    owner = await mesh.setup()
    bot = (
        await mesh.http.post("/api/agents/bootstrap", json={"name": "asker", "type": "nanoclaw"})
    ).json()
    asker = User(bot["agentId"], "asker", bot["token"])
    assert (await ask(mesh, asker, model="configured")).status_code == 200
    r = await mesh.http.delete(f"/api/agents/{asker.participant_id}", headers=owner.headers)
    assert r.status_code == 200, r.text
    sent = len(completions(upstream))
    r = await ask(mesh, asker, model="configured")
    assert r.status_code == 401, r.text
    assert len(completions(upstream)) == sent
    listed = (await mesh.http.get("/api/models/budgets", headers=owner.headers)).json()
    assert all(p["participantId"] != asker.participant_id for p in listed["participants"])


async def test_an_answer_without_usage_counts_an_estimate(mesh: Mesh, upstream: Upstream) -> None:
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    r = await mesh.http.post(
        "/api/models",
        json={
            "name": "quiet",
            "baseUrl": f"http://127.0.0.1:{upstream.port}/v1",
            "upstreamModel": "quiet-model",
        },
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text

    async def tokens() -> int:
        listed = (await mesh.http.get("/api/models/budgets", headers=owner.headers)).json()
        mine = [p for p in listed["participants"] if p["participantId"] == bob.participant_id]
        return int(mine[0]["tokens"]) if mine else 0

    words = "word " * 100
    r = await ask(mesh, bob, model="quiet", messages=[{"role": "user", "content": words}])
    assert r.status_code == 200
    assert "usage" not in r.json()
    # the request's and the answer's bytes over four: at least the text's
    # characters over four, both ways (500 characters each)
    plain = await tokens()
    assert plain >= 2 * 500 // 4
    r = await ask(
        mesh, bob, model="quiet", stream=True, messages=[{"role": "user", "content": words}]
    )
    assert r.status_code == 200
    assert b'"usage"' not in r.content

    async def streamed_counted() -> bool:
        return await tokens() >= plain + 2 * 500 // 4

    await wait_for(streamed_counted)


async def test_who_may_use_a_model_and_budgets_survive_a_restart(
    tmp_path: Path, upstream: Upstream
) -> None:
    url = f"http://127.0.0.1:{upstream.port}/v1"
    settings = Settings(
        data_dir=tmp_path / "node", models=(ModelConfig("configured", url, "echo-model"),)
    )

    async def served(nursery: trio.Nursery) -> str:
        app = create_app(settings)
        base: str = await nursery.start(
            lambda task_status: serve(app, port=0, task_status=task_status)
        )
        return base

    async with trio.open_nursery() as nursery:
        base = await served(nursery)
        async with httpx.AsyncClient(base_url=base, timeout=20) as http:
            mesh = Mesh(http)
            owner = await mesh.setup()
            bob = await mesh.register("bob")
            r = await http.patch(
                "/api/models/configured",
                json={"minRole": "spectator", "guests": True},
                headers=owner.headers,
            )
            assert r.status_code == 200, r.text
            r = await http.put(
                "/api/models/budgets/roles/member",
                json={"requestsPerMinute": 1},
                headers=owner.headers,
            )
            assert r.status_code == 200
            assert (await ask(mesh, bob, model="configured")).status_code == 200
        nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        base = await served(nursery)
        async with httpx.AsyncClient(base_url=base, timeout=20) as http:
            mesh = Mesh(http)
            models = (await http.get("/api/models", headers=owner.headers)).json()
            assert [(m["minRole"], m["guests"]) for m in models] == [("spectator", True)]
            # the minute's count is in the store too: bob's one request is spent
            openai_error(await ask(mesh, bob, model="configured"), 429, "rate_limit_exceeded")
            listed = (await http.get("/api/models/budgets", headers=owner.headers)).json()
            member = next(r for r in listed["roles"] if r["role"] == "member")
            assert member["requestsPerMinute"] == 1
        nursery.cancel_scope.cancel()


async def test_role_budgets_from_the_settings_until_an_admin_stores_one(
    tmp_path: Path, upstream: Upstream
) -> None:
    url = f"http://127.0.0.1:{upstream.port}/v1"
    settings = Settings(
        data_dir=tmp_path / "node",
        models=(ModelConfig("configured", url, "echo-model"),),
        model_role_budgets={"member": ModelBudget(tokens_per_day=10)},
    )
    async with trio.open_nursery() as nursery:
        base: str = await nursery.start(
            lambda task_status: serve(create_app(settings), port=0, task_status=task_status)
        )
        async with httpx.AsyncClient(base_url=base, timeout=20) as http:
            mesh = Mesh(http)
            owner = await mesh.setup()
            bob = await mesh.register("bob")
            listed = (await http.get("/api/models/budgets", headers=owner.headers)).json()
            member = next(r for r in listed["roles"] if r["role"] == "member")
            assert member["tokensPerDay"] is None
            assert member["inherited"] == {"requestsPerMinute": 60, "tokensPerDay": 10}
            agent = next(r for r in listed["roles"] if r["role"] == "agent")
            assert agent["inherited"] == {"requestsPerMinute": 60, "tokensPerDay": 200_000}
            for _ in range(2):  # 8 tokens each: the second crosses 10
                assert (await ask(mesh, bob, model="configured")).status_code == 200
            openai_error(await ask(mesh, bob, model="configured"), 429, "insufficient_quota")
            r = await http.put(
                "/api/models/budgets/roles/member",
                json={"tokensPerDay": 100},
                headers=owner.headers,
            )
            assert r.status_code == 200
            assert (await ask(mesh, bob, model="configured")).status_code == 200
        nursery.cancel_scope.cancel()
