"""The liveness settings: defaults, ``MESH_*`` variables, and what is refused."""

from __future__ import annotations

import pytest

from quart_mesh import Settings
from quart_mesh.errors import ConfigError

pytestmark = pytest.mark.store_free


def test_defaults() -> None:
    settings = Settings()
    assert settings.ws_ping_interval == 20.0
    assert settings.ws_idle_timeout == 60.0
    assert settings.request_head_timeout == 10.0


def test_from_env() -> None:
    settings = Settings.from_env(
        {
            "MESH_WS_PING_INTERVAL": "5",
            "MESH_WS_IDLE_TIMEOUT": "12.5",
            "MESH_REQUEST_HEAD_TIMEOUT": "2",
        }
    )
    assert settings.ws_ping_interval == 5.0
    assert settings.ws_idle_timeout == 12.5
    assert settings.request_head_timeout == 2.0


@pytest.mark.parametrize(
    "env",
    [
        {"MESH_WS_PING_INTERVAL": "0"},
        {"MESH_WS_IDLE_TIMEOUT": "soon"},
        {"MESH_REQUEST_HEAD_TIMEOUT": "-1"},
        {"MESH_WS_PING_INTERVAL": "60"},  # not shorter than the idle timeout
        {"MESH_WS_PING_INTERVAL": "30", "MESH_WS_IDLE_TIMEOUT": "10"},
    ],
)
def test_bad_values_are_refused(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        Settings.from_env(env)


def test_the_ping_comes_before_the_idle_timeout() -> None:
    with pytest.raises(ConfigError, match="ws_ping_interval"):
        Settings(ws_ping_interval=1, ws_idle_timeout=1)
