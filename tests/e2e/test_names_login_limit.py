"""A name's login limit holds across its spellings: a fullwidth or
differently cased spelling finds the same account (names are stored in NFKC,
decision 0056), so it is counted as the same name, not as a fresh budget of
guesses. Loopback is limited here; port 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from quart_mesh import Settings
from quart_mesh.config import Rate, RateLimits
from tests.helpers import PASSWORD, Mesh, assert_error

pytestmark = pytest.mark.e2e


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        data_dir=tmp_path / "mesh-data",
        rate_limits=RateLimits(login_name=Rate(2, 4), exempt_addresses=()),
    )


async def test_a_names_spellings_share_its_login_limit(mesh: Mesh) -> None:
    await mesh.setup()
    await mesh.register("bob")
    spellings = ["bob", "\uff42ob", "B\uff4fB"]  # plain; a fullwidth b; fullwidth o in capitals
    for spelling in spellings[:2]:
        r = await mesh.http.post("/api/auth/login", json={"name": spelling, "password": "no"})
        assert_error(r, 401, "invalid_credentials")
    r = await mesh.http.post("/api/auth/login", json={"name": spellings[2], "password": PASSWORD})
    assert_error(r, 429, "rate_limited")
