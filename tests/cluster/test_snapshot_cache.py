"""The snapshot's mesh-wide parts, kept rendered by each process
(decision 0039), follow changes made through another process: a new
participant, a role, a deletion, a new room, a member count, a position.

Real ``quart-mesh serve`` processes (``tests/cluster/nodes.py``); they run
with ``pytest --store postgresql`` only. Every wait is bounded.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.cluster.nodes import two_nodes
from tests.helpers import Mesh, User, connect

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


async def _snapshot(url: str, user: User) -> dict[str, Any]:
    async with connect(url, user) as ws:
        snapshot: dict[str, Any] = ws.snapshot  # type: ignore[attr-defined]
        return snapshot


async def _until(url: str, user: User, check: Callable[[dict[str, Any]], bool]) -> None:
    """A snapshot from *url* satisfies *check* (the other process commits
    first; this one sees it within a bound)."""
    with trio.fail_after(10):
        while not check(await _snapshot(url, user)):
            await trio.sleep(0.05)


def _people(snapshot: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in snapshot["participants"]}


async def test_changes_through_one_process_show_in_the_others_snapshots(tmp_path: Path) -> None:
    async with two_nodes(tmp_path) as (a, _, nodes):
        owner = await a.setup()
        url_b = nodes[1].url
        await _until(url_b, owner, lambda s: set(_people(s)) == {"owner"})  # B renders
        bob = await a.register("bob")
        await _until(url_b, owner, lambda s: "bob" in _people(s))
        r = await a.http.put(
            f"/api/participants/{bob.participant_id}/role",
            json={"role": "admin"},
            headers=owner.headers,
        )
        assert r.status_code == 200, r.text
        await _until(url_b, owner, lambda s: _people(s)["bob"]["role"] == "admin")
        room = await a.create_room(owner, "work")
        await _until(url_b, owner, lambda s: "work" in {r["name"] for r in s["rooms"]})
        await Mesh(a.http).join(bob, room["roomId"])

        def counted(s: dict[str, Any]) -> bool:
            return {r["name"]: r["memberCount"] for r in s["rooms"]}.get("work") == 2

        await _until(url_b, owner, counted)
        async with connect(nodes[0].url, bob) as ws:
            await ws.send(type="move", roomId=room["roomId"], x=1.0, y=2.0, z=3.0)
            await ws.expect("participant_moved", participantId=bob.participant_id)

        def moved(s: dict[str, Any]) -> bool:
            return bool(
                _people(s)["bob"]["position"]
                == {
                    "roomId": room["roomId"],
                    "x": 1.0,
                    "y": 2.0,
                    "z": 3.0,
                }
            )

        await _until(url_b, owner, moved)
        r = await a.http.post(
            "/api/agents/bootstrap",
            json={"name": "helper", "type": "nanoclaw"},
            headers=owner.headers,
        )
        assert r.status_code == 201, r.text
        await _until(url_b, owner, lambda s: "helper" in _people(s))
        r = await a.http.delete(f"/api/agents/{r.json()['agentId']}", headers=owner.headers)
        assert r.status_code in (200, 204), r.text
        await _until(url_b, owner, lambda s: "helper" not in _people(s))
