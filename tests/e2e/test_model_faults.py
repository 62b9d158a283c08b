"""The model proxy under an upstream's and a client's faults (a review of
issue 27): a stream whose client went away before its body began frees its
upstream slot and is counted; an upstream that stalls in a plain answer is
a 504 in OpenAI's shape, never a 500; one participant cannot hold every
upstream slot."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio

from quart_mesh import MeshApp, Settings, create_app, serve
from quart_mesh.config import ModelConfig
from quart_mesh.services.model_proxy import OpenAIError, Stream
from tests.helpers import Mesh
from tests.upstream import Upstream

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
def settings(tmp_path: Path, upstream: Upstream) -> Settings:
    base = f"http://127.0.0.1:{upstream.port}/v1"
    return Settings(
        data_dir=tmp_path / "mesh-data",
        models=(
            ModelConfig("gated", base, "gated-model"),
            ModelConfig("stall", base, "stall-model"),
            ModelConfig("echo", base, "echo-model"),
        ),
        model_timeout=1.0,
        model_concurrency=2,
        model_max_concurrent=2,
    )


@pytest.fixture
async def served(settings: Settings, nursery: trio.Nursery) -> AsyncIterator[tuple[MeshApp, Mesh]]:
    app = create_app(settings)
    url: str = await nursery.start(lambda task_status: serve(app, port=0, task_status=task_status))
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
        yield app, Mesh(http)


async def completion(mesh: Mesh, token: str, model: str, **extra: object) -> httpx.Response:
    return await mesh.http.post(
        "/api/models/v1/chat/completions",
        json={"model": model, "messages": MESSAGES, **extra},
        headers={"Authorization": f"Bearer {token}"},
    )


async def test_a_stream_never_relayed_frees_its_slot(
    served: tuple[MeshApp, Mesh], upstream: Upstream
) -> None:
    """The client goes away between the proxy's answer and its first byte
    (Quart never starts the body): the stream must still end."""
    app, mesh = served
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    actor = await app.node.accounts.actor_of(bob.participant_id)
    assert actor is not None
    proxy = app.node.model_proxy
    body = {"model": "gated", "stream": True, "messages": MESSAGES}
    for _ in range(2):  # both upstream slots, and both of bob's requests
        started = await proxy.complete(actor, dict(body), None)
        assert isinstance(started, Stream)
        del started  # never iterated
    # held meanwhile: a third waits for a slot, then is let in
    with trio.fail_after(10):
        while True:
            r = await completion(mesh, bob.token, "echo")
            if r.status_code == 200:
                break
            assert r.status_code in (429, 503), r.text
            await trio.sleep(0.2)
    assert r.json()["choices"][0]["message"]["content"] == "echo: hi"
    # the dropped streams were counted (the estimate: nothing was relayed)
    usage = await mesh.http.get("/api/models/usage", headers=owner.headers)
    assert usage.status_code == 200, usage.text
    assert bob.participant_id in usage.text


async def test_an_upstream_that_stalls_mid_answer_is_a_504(
    served: tuple[MeshApp, Mesh], upstream: Upstream
) -> None:
    _, mesh = served
    await mesh.setup()
    bob = await mesh.register("bob")
    with trio.fail_after(15):
        r = await completion(mesh, bob.token, "stall")
    assert r.status_code == 504, r.text
    assert r.json()["error"]["code"] == "upstream_timeout"
    # and the node goes on
    r = await completion(mesh, bob.token, "echo")
    assert r.status_code == 200, r.text


async def test_one_participant_holds_at_most_its_share_of_slots(
    served: tuple[MeshApp, Mesh], upstream: Upstream, nursery: trio.Nursery
) -> None:
    """``model_max_concurrent`` (2 here): a third request of one participant
    while two stream is refused at once; another participant is not."""
    app, mesh = served
    await mesh.setup()
    bob = await mesh.register("bob")
    carol = await mesh.register("carol")
    actor = await app.node.accounts.actor_of(bob.participant_id)
    assert actor is not None
    proxy = app.node.model_proxy
    streams = []
    for _ in range(2):
        started = await proxy.complete(
            actor, {"model": "gated", "stream": True, "messages": MESSAGES}, None
        )
        assert isinstance(started, Stream)
        streams.append(started)
    with pytest.raises(OpenAIError) as refused:
        await proxy.complete(actor, {"model": "echo", "messages": MESSAGES}, None)
    assert (refused.value.status, refused.value.code) == (429, "rate_limit_exceeded")
    r = await completion(mesh, bob.token, "echo")
    assert r.status_code == 429, r.text
    assert r.json()["error"]["type"] == "rate_limit_exceeded"
    # the streams end (read to their end): bob may again
    upstream.gate.set()
    for started in streams:
        async for _ in started.chunks:
            pass
    r = await completion(mesh, bob.token, "echo")
    assert r.status_code == 200, r.text
    del carol
