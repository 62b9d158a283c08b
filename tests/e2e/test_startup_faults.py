"""The store unavailable while a node starts: the first reads of webhook
delivery and of the relay links are retried (``retry.retrying``) like the
bot supervisor's, and the node comes up and serves; before, the one failed
read ended the node as it started."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from quart_mesh import Settings, create_app, serve
from quart_mesh.errors import Unavailable
from quart_mesh.store import agents as agents_repo
from quart_mesh.store import connections as connections_repo

pytestmark = pytest.mark.timeout(60)

#: the read each component starts with: (module, function)
STARTUP_READS: dict[str, tuple[Any, str]] = {
    "webhook delivery": (agents_repo, "webhook_targets"),
    "relay links": (connections_repo, "list_connections"),
}


def _failing_once(original: Callable[..., Any], calls: list[int]) -> Callable[..., Any]:
    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise Unavailable("the storage backend is unavailable", "storage_unavailable")
        return original(*args, **kwargs)

    return flaky


@pytest.mark.parametrize("component", list(STARTUP_READS))
async def test_the_store_unavailable_at_start_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, component: str
) -> None:
    module, name = STARTUP_READS[component]
    calls: list[int] = []
    monkeypatch.setattr(module, name, _failing_once(getattr(module, name), calls))
    app = create_app(Settings(data_dir=tmp_path / "mesh-data"))
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            url: str = await nursery.start(partial(serve, app, port=0))
            async with httpx.AsyncClient(base_url=url, timeout=10) as http:
                r = await http.get("/api/health")
                assert (r.status_code, r.json()["ok"]) == (200, True), r.text
            nursery.cancel_scope.cancel()
    assert len(calls) >= 2  # failed once, then read again
