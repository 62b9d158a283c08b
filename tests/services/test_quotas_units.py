"""The quota decisions themselves, table-driven (the served node's behaviour
is in ``tests/e2e/test_quotas.py``): which room quota a role gets, how seats
are counted and given back, and the settings that name them."""

from __future__ import annotations

import pytest

from quart_mesh.config import DEFAULT_ROOM_QUOTAS, Limits, RateLimits, Settings
from quart_mesh.errors import ConfigError, RateLimited
from quart_mesh.permissions import BUILTIN_ROLES
from quart_mesh.services.ratelimit import RateLimiter
from quart_mesh.services.rooms import room_quota
from quart_mesh.services.seats import Seats

pytestmark = pytest.mark.store_free


@pytest.mark.parametrize(
    ("role", "priority", "quota"),
    [
        ("owner", 999, None),
        ("admin", 900, None),
        ("moderator", 700, 200),
        ("super_agent", 600, 100),
        ("member", 400, 50),
        ("agent", 300, 10),
        ("spectator", 50, 0),
        # custom roles: the highest built-in role at or below their priority
        ("helper", 950, None),
        ("trusted", 800, 200),
        ("writer", 450, 50),
        ("bot-plus", 350, 10),
        ("reader", 100, 0),
        ("nobody", 10, None),
    ],
)
def test_room_quota_by_role(role: str, priority: int, quota: int | None) -> None:
    assert room_quota(DEFAULT_ROOM_QUOTAS, role, priority) == quota


def test_room_quota_listed_roles_win() -> None:
    quotas = {**DEFAULT_ROOM_QUOTAS, "admin": 5, "writer": 7}
    assert room_quota(quotas, "admin", BUILTIN_ROLES["admin"]) == 5
    assert room_quota(quotas, "writer", 450) == 7
    assert room_quota(quotas, "helper", 950) is None  # above admin, not listed


def test_room_quotas_from_the_environment() -> None:
    settings = Settings.from_env({"MESH_ROOM_QUOTAS": '{"member": 3, "agent": 0}'})
    assert settings.room_quotas["member"] == 3
    assert settings.room_quotas["agent"] == 0
    assert settings.room_quotas["moderator"] == 200  # merged over the defaults
    for bad in ('["member"]', '{"member": -1}', '{"member": true}', '{"": 3}', "nope"):
        with pytest.raises(ConfigError, match="MESH_ROOM_QUOTAS"):
            Settings.from_env({"MESH_ROOM_QUOTAS": bad})


def test_limits_from_the_environment() -> None:
    settings = Settings.from_env(
        {
            "MESH_MAX_SESSIONS_PER_PARTICIPANT": "4",
            "MESH_MAX_POLLS_PER_ADDRESS": "9",
            "MESH_MAX_SNAPSHOT_ROOMS": "20",
            "MESH_MAX_UPLOADS_PER_PARTICIPANT": "3",
        }
    )
    limits = settings.limits
    assert (limits.max_sessions_per_participant, limits.max_sessions_per_address) == (4, 256)
    assert (limits.max_polls_per_participant, limits.max_polls_per_address) == (32, 9)
    assert (limits.max_snapshot_rooms, limits.max_uploads_per_participant) == (20, 3)
    with pytest.raises(ConfigError):
        Settings.from_env({"MESH_MAX_SESSIONS_PER_PARTICIPANT": "0"})
    with pytest.raises(ConfigError):
        Limits(default_room_page_size=20, max_room_page_size=10)


def test_seats_are_counted_and_given_back() -> None:
    limits = Limits(
        max_sessions_per_participant=2,
        max_sessions_per_address=3,
        max_polls_per_participant=1,
        max_polls_per_address=5,
    )
    seats = Seats(limits, RateLimiter(RateLimits(exempt_addresses=("127.0.0.0/8",))))
    with seats.hold("session", "a", "10.0.0.1"), seats.hold("session", "a", "10.0.0.1"):
        assert seats.held("session", "a") == 2
        with pytest.raises(RateLimited) as refused, seats.hold("session", "a", "10.0.0.2"):
            pass
        assert (refused.value.code, refused.value.status) == ("too_many_sessions", 429)
        # polls are counted apart from sessions
        with seats.hold("poll", "a", "10.0.0.1"):
            with (
                pytest.raises(RateLimited, match="long polls") as polls,
                seats.hold("poll", "a", "10.0.0.1"),
            ):
                pass
            assert polls.value.code == "too_many_polls"
        with seats.hold("session", "b", "10.0.0.1"):
            # the address holds three: b's second from it is refused, from loopback not
            with (
                pytest.raises(RateLimited, match="address"),
                seats.hold("session", "b", "10.0.0.1"),
            ):
                pass
            with seats.hold("session", "b", "127.0.0.1"), seats.hold("session", "c", None):
                pass
    # all given back, a refusal took nothing
    assert seats.held("session", "a") == seats.held("session", "b") == 0
    assert not seats._participants
    assert not seats._addresses
    # an IPv4-mapped address is its IPv4 address
    with seats.hold("session", "x", "10.0.0.9"), seats.hold("session", "y", "::ffff:10.0.0.9"):
        assert seats._addresses["session", "10.0.0.9"] == 2
    # given back when the block fails too
    with pytest.raises(ValueError, match="boom"), seats.hold("session", "a", "::ffff:10.0.0.1"):
        raise ValueError("boom")
    assert not seats._participants
    assert not seats._addresses
