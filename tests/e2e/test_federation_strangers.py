"""Signed requests from nodes this one does not trust (issue 28), between
real nodes (``python -m quart_mesh serve``, the helpers of ``test_relay.py``):
a request a node signed for another node cannot be replayed here. The other
node, M, is a small real server with a DID made here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from quart_mesh.identity import load_or_create_node_identity
from tests.e2e.test_relay import nodes
from tests.helpers import assert_error
from tests.receiver import Receiver, Request

pytestmark = pytest.mark.timeout(120)

REQUEST_PATH = "/api/connections/request"


async def test_a_request_signed_for_another_node_is_refused(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    async with nodes(tmp_path, nursery, "a", "b") as (a, b):
        # M: a node with its own DID, which keeps what B sends it
        did_m = load_or_create_node_identity(tmp_path / "m").did

        def node_m(request: Request) -> tuple[int, Any]:
            if request.path == "/.well-known/mesh-manifest.json":
                return 200, {"did": did_m, "name": "Mesh M"}
            return 201, {"ok": True, "status": "pending"}

        m = Receiver(handler=node_m)
        url_m = f"http://127.0.0.1:{await m.start(nursery)}"
        r = await b.http.post(REQUEST_PATH, json={"url": url_m}, headers=b.owner.headers)
        assert r.status_code == 201, r.text
        [signed] = [x for x in m.requests if x.path == REQUEST_PATH]
        assert signed.json()["did"] == b.did

        # M replays B's request, byte for byte, to A: signed for M, not for A
        headers = {k: v for k, v in signed.headers.items() if k.startswith("x-mesh-")}
        headers["Content-Type"] = "application/json"
        r = await a.http.post(REQUEST_PATH, content=signed.body, headers=headers)
        assert_error(r, 401, "bad_signature")
        assert a.did in r.json()["error"]
        assert await a.connections() == []
        # B's own request to A is not in the way of anything
        r = await b.http.post(REQUEST_PATH, json={"url": a.url}, headers=b.owner.headers)
        assert r.status_code == 201, r.text
        [pending] = await a.connections()
        assert (pending["did"], pending["status"]) == (b.did, "pending")
