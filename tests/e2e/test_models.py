"""The model registry and the OpenAI-compatible proxy, over real sockets, with
a real OpenAI-compatible upstream on loopback and the official ``openai`` client."""

from __future__ import annotations

import json
from contextlib import aclosing
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import trio

from quart_mesh import Settings
from quart_mesh.config import ModelConfig
from tests.e2e.test_agents import wait_for
from tests.helpers import Mesh, User, assert_error
from tests.receiver import free_port
from tests.upstream import Upstream

UPSTREAM_KEY = "sk-upstream-secret-4d1f"


@pytest.fixture
def settings(tmp_path: Path, upstream: Upstream) -> Settings:
    configured = ModelConfig("configured", f"http://127.0.0.1:{upstream.port}/v1", "echo-model")
    return Settings(
        data_dir=tmp_path / "mesh-data",
        models=(configured,),
        model_timeout=2.0,
        model_concurrency=1,
    )


async def add_model(mesh: Mesh, admin: User, **body: Any) -> httpx.Response:
    return await mesh.http.post("/api/models", json=body, headers=admin.headers)


def openai_error(response: httpx.Response, status: int, code: str | None = None) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) - {"param"} == {"message", "type", "code"}, error
    if code is not None:
        assert error["code"] == code, error
    return str(error["message"])


async def test_registry(base_url: str, mesh: Mesh, upstream: Upstream, tmp_path: Path) -> None:
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    url = f"http://127.0.0.1:{upstream.port}/v1"
    r = await add_model(
        mesh, owner, name="echo", baseUrl=url, upstreamModel="echo-model", apiKey=UPSTREAM_KEY
    )
    assert r.status_code == 201, r.text
    assert r.json() == {
        "name": "echo",
        "streaming": True,
        "source": "api",
        "createdAt": r.json()["createdAt"],
        "baseUrl": url,
        "upstreamModel": "echo-model",
        "hasApiKey": True,
        "minRole": "agent",
        "guests": False,
    }
    assert_error(await add_model(mesh, bob, name="mine", baseUrl=url), 403, "forbidden")
    assert_error(await add_model(mesh, owner, name="echo", baseUrl=url), 409, "model_exists")
    for body, code in [
        ({"name": "bad name", "baseUrl": url}, "invalid_name"),
        ({"name": "usage", "baseUrl": url}, "invalid_name"),  # GET /api/models/usage's path
        ({"name": "x", "baseUrl": "ftp://x"}, "invalid_url"),
        ({"name": "x", "baseUrl": "http://h:99999"}, "invalid_url"),
        ({"name": "x"}, "missing_field"),
    ]:
        assert_error(await add_model(mesh, owner, **body), 400, code)
    # anyone may list; only admins see where a model goes; nobody sees a key
    listed = (await mesh.http.get("/api/models", headers=bob.headers)).json()
    assert listed == [
        {"name": "configured", "streaming": True, "source": "config", "createdAt": None},
        {"name": "echo", "streaming": True, "source": "api", "createdAt": r.json()["createdAt"]},
    ]
    admin_view = (await mesh.http.get("/api/models", headers=owner.headers)).text
    assert UPSTREAM_KEY not in admin_view
    assert '"hasApiKey":true' in admin_view.replace(" ", "")
    assert_error(await mesh.http.get("/api/models"), 401)
    # the key is stored encrypted: not in any file of the data folder
    for path in (tmp_path / "mesh-data").rglob("*"):
        if path.is_file():
            assert UPSTREAM_KEY.encode() not in path.read_bytes(), path
    # configured models are changed in the settings, not over the API
    r = await mesh.http.delete("/api/models/configured", headers=owner.headers)
    assert_error(r, 409, "configured_model")
    assert_error(await mesh.http.delete("/api/models/echo", headers=bob.headers), 403)
    assert (await mesh.http.delete("/api/models/echo", headers=owner.headers)).status_code == 200
    assert_error(await mesh.http.delete("/api/models/echo", headers=owner.headers), 404)


async def test_the_official_openai_client_streaming_and_not(
    base_url: str, mesh: Mesh, upstream: Upstream
) -> None:
    owner = await mesh.setup()
    url = f"http://127.0.0.1:{upstream.port}/v1"
    r = await add_model(
        mesh, owner, name="echo", baseUrl=url, upstreamModel="echo-model", apiKey=UPSTREAM_KEY
    )
    assert r.status_code == 201
    bot = (
        await mesh.http.post("/api/agents/bootstrap", json={"name": "asker", "type": "nanoclaw"})
    ).json()
    assert bot["modelUrl"] == base_url + "/api/models/v1"

    def use_client() -> tuple[str, str, list[str], Any]:
        client = openai.OpenAI(base_url=bot["modelUrl"], api_key=bot["token"], max_retries=0)
        try:
            names = [m.id for m in client.models.list()]
            answer = client.chat.completions.create(
                model="echo", messages=[{"role": "user", "content": "hello there"}]
            )
            pieces = [
                chunk.choices[0].delta.content or ""
                for chunk in client.chat.completions.create(
                    model="echo",
                    messages=[{"role": "user", "content": "stream me please"}],
                    stream=True,
                )
                if chunk.choices
            ]
            try:
                client.chat.completions.create(
                    model="nope", messages=[{"role": "user", "content": "x"}]
                )
            except openai.NotFoundError as error:
                missing: Any = error
            return str(answer.choices[0].message.content), "".join(pieces), names, missing
        finally:
            client.close()

    content, streamed, names, missing = await trio.to_thread.run_sync(use_client)
    assert content == "echo: hello there"
    assert streamed == "echo: stream me please"
    assert names == ["configured", "echo"]
    assert missing.status_code == 404
    assert "nope" in str(missing)
    # the upstream got the model's upstream name and key, not the mesh token
    seen = [s for s in upstream.requests if s.path.endswith("/chat/completions")]
    assert [s.body["model"] for s in seen] == ["echo-model", "echo-model"]
    assert {s.headers["authorization"] for s in seen} == {f"Bearer {UPSTREAM_KEY}"}
    # usage per participant, tokens as the upstream reported them (a stream's
    # usage is written just after it ends)
    usage: list[Any] = []

    async def counted() -> bool:
        usage[:] = (await mesh.http.get("/api/models/usage", headers=owner.headers)).json()
        return bool(usage) and usage[0]["requests"] == 2

    await wait_for(counted)
    assert [(u["participantId"], u["model"], u["requests"]) for u in usage] == [
        (bot["agentId"], "echo", 2)
    ]
    assert usage[0]["promptTokens"] == 10
    assert usage[0]["completionTokens"] == 3 + 4


async def test_streams_are_relayed_chunk_by_chunk_and_hang_ups_cancel_upstream(
    base_url: str, mesh: Mesh, upstream: Upstream
) -> None:
    owner = await mesh.setup()
    url = f"http://127.0.0.1:{upstream.port}/v1"
    await add_model(mesh, owner, name="gated", baseUrl=url, upstreamModel="gated-model")
    request = {
        "model": "gated",
        "stream": True,
        "messages": [{"role": "user", "content": "one two three"}],
    }
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        # the first chunk arrives while the upstream still holds the rest
        async with http.stream(
            "POST", "/api/models/v1/chat/completions", json=request, headers=owner.headers
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            async with aclosing(response.aiter_lines()) as lines:
                with trio.fail_after(5):
                    first = await anext(lines)
                assert json.loads(first.removeprefix("data: "))["choices"][0]["delta"] == {
                    "content": "echo:"
                }
                assert upstream.chunks_sent == 1
                upstream.gate.set()
                rest = [line async for line in lines if line]
        assert rest[-1] == "data: [DONE]"
        assert len(rest) == 5  # "one", "two", "three", the final chunk, [DONE]

    upstream.gate = trio.Event()
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=10) as http,
        http.stream(
            "POST", "/api/models/v1/chat/completions", json=request, headers=owner.headers
        ) as response,
    ):
        with trio.fail_after(5):
            async with aclosing(response.aiter_lines()) as lines:
                await anext(lines)
        # the client hung up (the stream closed early): the upstream hears of it
    with trio.fail_after(5):
        await upstream.hung_up.wait()
    # and the concurrency slot was given back: the next requests go through,
    # streamed or not (a hang-up never takes the proxy down)
    hi = [{"role": "user", "content": "hi"}]
    answer = await mesh.http.post(
        "/api/models/v1/chat/completions",
        json={"model": "configured", "messages": hi},
        headers=owner.headers,
    )
    assert answer.json()["choices"][0]["message"]["content"] == "echo: hi"
    streamed = await mesh.http.post(
        "/api/models/v1/chat/completions",
        json={"model": "configured", "messages": hi, "stream": True},
        headers=owner.headers,
    )
    assert streamed.text.rstrip().endswith("data: [DONE]")


async def test_errors_come_in_openai_shape(base_url: str, mesh: Mesh, upstream: Upstream) -> None:
    owner = await mesh.setup()
    url = f"http://127.0.0.1:{upstream.port}/v1"
    for name, upstream_model in [
        ("hang", "hang-model"),
        ("picky", "bad-request-model"),
        ("broken", "broken-model"),
        ("busy", "busy-model"),
    ]:
        await add_model(mesh, owner, name=name, baseUrl=url, upstreamModel=upstream_model)
    await add_model(mesh, owner, name="down", baseUrl=f"http://127.0.0.1:{free_port()}/v1")

    async def ask(body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
        return await mesh.http.post(
            "/api/models/v1/chat/completions",
            json=body,
            headers=owner.headers if headers is None else headers,
        )

    hello = [{"role": "user", "content": "hello"}]
    openai_error(await ask({"model": "nope", "messages": hello}), 404, "model_not_found")
    # no model at all is the client's mistake (400, naming the parameter), as at OpenAI
    missing = await ask({"messages": hello})
    openai_error(missing, 400, "missing_required_parameter")
    assert missing.json()["error"]["type"] == "invalid_request_error"
    assert missing.json()["error"]["param"] == "model"
    openai_error(await ask({"model": 7, "messages": hello}), 400, "invalid_type")
    openai_error(await ask({"model": "configured"}), 400)
    openai_error(await ask({"model": "configured", "messages": []}), 400)
    openai_error(await ask({"model": "configured", "messages": hello, "stream": "yes"}), 400)
    openai_error(await ask({"model": "down", "messages": hello}), 502, "upstream_unreachable")
    openai_error(await ask({"model": "hang", "messages": hello}), 504, "upstream_timeout")
    message = openai_error(await ask({"model": "picky", "messages": hello}), 400)
    assert message == "temperature is too hot"
    message = openai_error(await ask({"model": "broken", "messages": hello, "stream": True}), 502)
    assert "the GPU caught fire" in message
    busy = await ask({"model": "busy", "messages": hello})
    assert openai_error(busy, 429) == "slow down"
    assert busy.headers["retry-after"] == "7"
    openai_error(await ask({"model": "configured", "messages": hello}, headers={}), 401)
    r = await mesh.http.post(
        "/api/models/v1/chat/completions",
        content=b"{not json",
        headers={**owner.headers, "Content-Type": "application/json"},
    )
    openai_error(r, 400)
    # chat histories may be larger than other bodies, up to their own limit
    big = [{"role": "user", "content": "x" * 200_000}]
    r = await ask({"model": "configured", "messages": big})
    assert r.status_code == 200
    openai_error(await ask({"model": "configured", "messages": big * 6}), 413)
    # a caller's own upstream key is forwarded (and wins over the model's)
    r = await mesh.http.post(
        "/api/models/v1/chat/completions",
        json={"model": "configured", "messages": hello},
        headers={**owner.headers, "X-Upstream-Api-Key": "sk-callers-own"},
    )
    assert r.status_code == 200
    assert upstream.requests[-1].headers["authorization"] == "Bearer sk-callers-own"
    usage = (await mesh.http.get("/api/models/usage", headers=owner.headers)).json()
    errors = {u["model"]: u["errors"] for u in usage}
    assert errors["down"] == 1
    assert errors["hang"] == 1


async def test_concurrency_to_one_upstream_is_bounded(
    base_url: str, mesh: Mesh, upstream: Upstream
) -> None:
    owner = await mesh.setup()  # model_concurrency=1 in these settings
    url = f"http://127.0.0.1:{upstream.port}/v1"
    await add_model(mesh, owner, name="gated", baseUrl=url, upstreamModel="gated-model")
    request = {"model": "gated", "stream": True, "messages": [{"role": "user", "content": "a b"}]}
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=10) as http,
        http.stream(
            "POST", "/api/models/v1/chat/completions", json=request, headers=owner.headers
        ) as first,
        aclosing(first.aiter_lines()) as first_lines,
    ):
        await anext(first_lines)
        async with trio.open_nursery() as nursery:
            answers: list[Any] = []

            async def second() -> None:
                r = await http.post(
                    "/api/models/v1/chat/completions",
                    json={
                        "model": "configured",
                        "messages": [{"role": "user", "content": "b"}],
                    },
                    headers=owner.headers,
                )
                answers.append(r.json())

            nursery.start_soon(second)
            await trio.sleep(0.5)
            # the second waits for the first's slot: the upstream has not seen it
            assert len(upstream.requests) == 1
            assert answers == []
            upstream.gate.set()
            async for _ in first_lines:
                pass
    assert answers[0]["choices"][0]["message"]["content"] == "echo: b"


async def test_a_stream_outlives_quarts_response_timeout(
    settings: Settings, upstream: Upstream, nursery: trio.Nursery
) -> None:
    """Quart cuts responses after RESPONSE_TIMEOUT (60 s by default); a stream
    must not be cut. Shrunk to 0.5 s here, the stream lasts 1.5 s."""
    from quart_mesh import create_app, serve

    app = create_app(settings)
    app.config["RESPONSE_TIMEOUT"] = 0.5
    base_url: str = await nursery.start(
        lambda task_status: serve(app, port=0, task_status=task_status)
    )
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        url = f"http://127.0.0.1:{upstream.port}/v1"
        await add_model(mesh, owner, name="gated", baseUrl=url, upstreamModel="gated-model")
        request = {
            "model": "gated",
            "stream": True,
            "messages": [{"role": "user", "content": "x y"}],
        }
        async with (
            http.stream(
                "POST", "/api/models/v1/chat/completions", json=request, headers=owner.headers
            ) as response,
            aclosing(response.aiter_lines()) as lines,
        ):
            await anext(lines)
            await trio.sleep(1.5)
            upstream.gate.set()
            rest = [line async for line in lines if line]
    assert rest[-1] == "data: [DONE]"
