"""A webhook receiver that keeps failing is one fault, logged once (issue 33).

A served node delivers to a webhook bot whose receiver is down: the bot's
status still counts every failed attempt (``failedAttempts``), but the log
holds one ``fault started`` line naming the bot, no warning per retry, and
one ``fault ended`` line once the receiver takes the events; the metrics
count the failures."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio

from quart_mesh import Settings
from tests.e2e.test_webhooks import delivered, webhook_bot, webhook_state
from tests.helpers import Mesh, wait_for
from tests.receiver import Receiver, free_port

pytestmark = pytest.mark.timeout(60)

TOKEN = "metrics-token-for-the-receiver-test"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "mesh-data", webhook_max_backoff=0.2, metrics_token=TOKEN)


async def test_a_failing_receiver_is_logged_once(
    base_url: str, mesh: Mesh, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="quart_mesh")
    owner = await mesh.setup()
    port = free_port()
    bot, _ = await webhook_bot(mesh, owner, "flaky", f"http://127.0.0.1:{port}/hook")
    room_id = (await mesh.create_room(owner, "hooks"))["roomId"]
    await mesh.join(bot, room_id)
    await mesh.send(owner, room_id, "m0")

    async def failing() -> bool:
        state = await webhook_state(mesh, owner, bot.participant_id)
        return bool(state["failedAttempts"] >= 10)

    await wait_for(failing)
    r = await mesh.http.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert 'mesh_faults_active{kind="receiver_failing"} 1.0' in r.text
    assert 'mesh_fault_failures_total{kind="receiver_failing"}' in r.text

    receiver = Receiver()
    await receiver.start(nursery, port)
    marker = await mesh.send(owner, room_id, "marker")
    await delivered(receiver, marker)

    said = [r.getMessage() for r in caplog.records if r.name.startswith("quart_mesh")]
    started = [s for s in said if s.startswith("fault started")]
    ended = [s for s in said if s.startswith("fault ended")]
    assert len(started) == 1, said
    assert started[0].startswith(
        f"fault started: a webhook receiver is failing ({bot.participant_id}):"
        f" webhook to bot {bot.participant_id}: ConnectError"
    ), said
    assert len(ended) == 1, said
    assert ended[0].startswith(
        f"fault ended: a webhook receiver is failing ({bot.participant_id}), after"
    ), said
    assert not [s for s in said if "retrying in" in s], said
    state = await webhook_state(mesh, owner, bot.participant_id)
    assert state["failedAttempts"] >= 10  # the bot's own status still counts each
    r = await mesh.http.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert 'mesh_faults_active{kind="receiver_failing"} 0.0' in r.text
