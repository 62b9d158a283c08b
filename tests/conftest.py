"""Shared fixtures: settings in a temporary data folder, the app in-process,
and the real app served by hypercorn on a loopback port."""

from __future__ import annotations

import os
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
import trio
from argon2 import PasswordHasher

from quart_mesh import MeshApp, Settings, create_app, serve
from quart_mesh import node as node_module
from quart_mesh.security import Passwords
from tests import stores
from tests.browser import require_browser
from tests.helpers import Mesh
from tests.openapi_check import check_answer
from tests.upstream import Upstream

if TYPE_CHECKING:
    from quart.typing import TestClientProtocol


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--store",
        choices=("sqlite", "postgresql"),
        default=os.environ.get("MESH_TEST_STORE", "sqlite"),
        help="the store every node of the suite uses (tests/stores.py)",
    )
    parser.addoption(
        "--store-free-on",
        choices=("sqlite", "postgresql"),
        default="sqlite",
        help="the run that takes the tests that touch no store (store_free): "
        "python -m tests gives them to the PostgreSQL run, which is shorter",
    )
    parser.addoption(
        "--clients-on",
        choices=("sqlite", "split"),
        default="sqlite",
        help="the run that takes the web client's tests (client_only): all in the "
        "SQLite run, or split by file between the two (python -m tests)",
    )


#: of every eight web client test files (by a stable hash of the file's
#: name), how many ``--clients-on split`` gives the PostgreSQL run: the knob
#: that makes the two runs of ``python -m tests`` end together. None since
#: issue 34: the PostgreSQL run has the tests that touch no store and, alone,
#: the cluster's; one eighth is about a minute of browser tests.
CLIENT_EIGHTHS_ON_POSTGRESQL = 0


def _client_run(item: pytest.Item, config: pytest.Config) -> str:
    """The run a web client test belongs to: SQLite, or with ``--clients-on
    split`` :data:`CLIENT_EIGHTHS_ON_POSTGRESQL` of the files on PostgreSQL."""
    if config.getoption("--clients-on") != "split":
        return "sqlite"
    share = zlib.crc32(item.path.name.encode()) % 8
    return "postgresql" if share < CLIENT_EIGHTHS_ON_POSTGRESQL else "sqlite"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    free_here = config.getoption("--store-free-on") == config.getoption("--store")
    if config.getoption("--store") != "postgresql":
        if not free_here:
            elsewhere = pytest.mark.skip(reason="touches no store: run in the PostgreSQL run")
            for item in items:
                # (one about SQLite itself stays here: the other run skips it)
                if (
                    item.get_closest_marker("store_free") is not None
                    and item.get_closest_marker("sqlite_only") is None
                ):
                    item.add_marker(elsewhere)
        for item in items:
            if (
                item.get_closest_marker("client_only") is not None
                and _client_run(item, config) != "sqlite"
            ):
                item.add_marker(
                    pytest.mark.skip(reason="the web client: this file runs on PostgreSQL")
                )
        return
    skip = pytest.mark.skip(reason="about SQLite itself (--store postgresql)")
    once = pytest.mark.skip(reason="the web client, the same on every store: run on SQLite")
    free = pytest.mark.skip(reason="touches no store: run on SQLite")
    for item in items:
        if item.get_closest_marker("sqlite_only") is not None:
            item.add_marker(skip)
        elif (
            item.get_closest_marker("client_only") is not None
            and _client_run(item, config) == "sqlite"
        ):
            item.add_marker(once)
        elif item.get_closest_marker("store_free") is not None and not free_here:
            item.add_marker(free)


def pytest_report_header(config: pytest.Config) -> str:
    return f"store: {config.getoption('--store')}"


class _QuickPasswords(Passwords):
    """The node's argon2id, at argon2's lowest cost (8 MiB, one pass, one
    lane) instead of RFC 9106's (64 MiB, three passes, four lanes: ~0.25 s
    of CPU a hash on two cores), for in-process nodes: the suite hashes
    and checks thousands of passwords. The code is the product's; only the
    parameters differ (a hash carries its own, so the release fixtures'
    hashes, made at full cost, still verify: ``tests/test_release.py``);
    ``tests/test_tokens.py`` checks the parameters new hashes get."""

    def __init__(self, threads: int = 2) -> None:
        super().__init__(threads, PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1))


@pytest.fixture(autouse=True)
def _quick_passwords(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    # (not for a test whose race needs the hash to take its real time)
    if request.node.get_closest_marker("full_cost_passwords") is None:
        monkeypatch.setattr(node_module, "Passwords", _QuickPasswords)


@pytest.fixture(scope="session")
def _store(request: pytest.FixtureRequest) -> Iterator[stores.Cluster | None]:
    """The session's PostgreSQL cluster with ``--store postgresql``; on
    SQLite, the migrated store a node's new one is a copy of."""
    if request.config.getoption("--store") != "postgresql":
        with stores.sqlite_template():
            yield None
        return
    with stores.postgres_cluster() as cluster:
        yield cluster


@pytest.fixture(autouse=True)
def _node_store(
    request: pytest.FixtureRequest, _store: stores.Cluster | None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """On SQLite, a node's new store is a copy of a migrated one
    (:class:`tests.stores.SeededDatabase`). On PostgreSQL, a node with no
    database URL of its own gets the database of its data folder
    (in-process here; subprocesses through :func:`tests.stores.node_env`).
    The test's databases are dropped once it has ended (set up first, this
    fixture is torn down last)."""
    if request.config.getoption("--store") != "postgresql":
        # a node's new SQLite store starts as a copy of a migrated one
        monkeypatch.setattr(node_module, "Database", stores.SeededDatabase)
        yield
        return
    if _store is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    cluster = _store

    def resolved(self: Settings) -> str:
        return self.database_url or cluster.url_for(self.data_dir)

    monkeypatch.setattr(Settings, "resolved_database_url", property(resolved))
    try:
        yield
    finally:
        cluster.forget_new()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "mesh-data")


@pytest.fixture
async def app(settings: Settings) -> AsyncIterator[MeshApp]:
    """The app with its lifespan running (the node started), in-process."""
    app = create_app(settings)
    async with app.test_app():
        yield app


@pytest.fixture
def client(app: MeshApp) -> TestClientProtocol:
    return app.test_client()


@pytest.fixture
async def base_url(settings: Settings, nursery: trio.Nursery) -> str:
    """A real node served by hypercorn's trio worker on 127.0.0.1, port 0."""
    app = create_app(settings)
    url: str = await nursery.start(lambda task_status: serve(app, port=0, task_status=task_status))
    return url


@pytest.fixture
async def http(base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    # every JSON answer is checked against the OpenAPI document (tests/openapi_check.py)
    async with httpx.AsyncClient(
        base_url=base_url, timeout=10, event_hooks={"response": [check_answer]}
    ) as client:
        yield client


@pytest.fixture
def mesh(http: httpx.AsyncClient) -> Mesh:
    return Mesh(http)


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> Upstream:
    """A real OpenAI-compatible upstream on loopback (see tests/upstream.py)."""
    server = Upstream()
    await server.start(nursery)
    return server


@pytest.fixture
def browser_ready() -> None:
    """Chromium and Playwright are there (tests/browser.py), or the test is skipped."""
    require_browser()
