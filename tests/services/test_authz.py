"""The one access checkpoint: roles, priorities, tiers, ownership."""

from __future__ import annotations

import pytest

from quart_mesh.errors import Forbidden
from quart_mesh.services.authz import (
    BUILTIN_ROLES,
    PERMISSIONS,
    Actor,
    Policy,
    Role,
    RoomRef,
    authorize,
    capped_at_tier_4,
    permitted,
    tier_of,
)

pytestmark = pytest.mark.store_free


def actor(role: str, kind: str = "human", pid: str = "A", guests_can_send: bool = False) -> Actor:
    return Actor(pid, "n", kind, kind, role, guests_can_send=guests_can_send)


def test_builtin_priorities() -> None:
    assert dict(BUILTIN_ROLES) == {
        "owner": 999,
        "admin": 900,
        "moderator": 700,
        "super_agent": 600,
        "member": 400,
        "agent": 300,
        "spectator": 50,
    }


@pytest.mark.parametrize(
    ("priority", "tier"), [(999, 1), (900, 2), (600, 2), (599, 3), (400, 3), (300, 4), (50, 4)]
)
def test_tiers(priority: int, tier: int) -> None:
    assert tier_of(priority) == tier


def test_each_permission_follows_priority() -> None:
    for permission, entry in PERMISSIONS.items():
        lowest = entry.lowest
        for role, priority in BUILTIN_ROLES.items():
            if priority >= lowest:
                authorize(actor(role), permission)
            else:
                with pytest.raises(Forbidden):
                    authorize(actor(role), permission)


def test_ownership_grants_own_things_only() -> None:
    member = actor("member", pid="M")
    own = RoomRef("R", "room", owner_id="M")
    other = RoomRef("R", "room", owner_id="X")
    for permission in ("rooms.delete", "messages.edit", "messages.delete"):
        authorize(member, permission, own)
        with pytest.raises(Forbidden):
            authorize(member, permission, other)
    with pytest.raises(Forbidden):
        authorize(member, "mesh.settings", own)


def test_guests_send_only_when_the_mesh_allows() -> None:
    with pytest.raises(Forbidden):
        authorize(actor("spectator", kind="guest"), "messages.send")
    authorize(actor("spectator", kind="guest", guests_can_send=True), "messages.send")
    with pytest.raises(Forbidden):
        authorize(actor("spectator", kind="guest", guests_can_send=True), "rooms.create")


def test_unknown_role_has_nothing() -> None:
    with pytest.raises(Forbidden):
        authorize(actor("nobody"), "rooms.read")


def test_a_remote_participant_acts_at_tier_4_at_most() -> None:
    """Relayed actions (federation): built-in roles above Tier 4 and custom
    roles that hold more than ``agent`` act as ``agent``; lesser roles stay."""
    policy = Policy()
    policy.put_role(Role("low_deleter", 100, frozenset({"messages.delete"})))
    policy.put_role(Role("reader", 100, frozenset({"rooms.read"} & set(PERMISSIONS))))
    for role, expected in [
        ("owner", "agent"),
        ("admin", "agent"),
        ("member", "agent"),
        ("agent", "agent"),
        ("spectator", "spectator"),
        ("low_deleter", "agent"),  # low priority, but a right agent lacks
        ("reader", "reader"),
        ("gone", "gone"),  # a role that no longer exists holds nothing
    ]:
        who = Actor("R", "r@peer", "human", "human", role, policy=policy)
        assert capped_at_tier_4(who).role == expected, role
    capped = capped_at_tier_4(Actor("R", "r@peer", "human", "human", "low_deleter", policy=policy))
    assert not permitted(capped, "messages.delete")
