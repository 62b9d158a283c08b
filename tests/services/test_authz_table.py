"""The access decision itself, table-driven (as Synapse tests its event
auth rules): :func:`authorize`, the visibility decision
(:func:`readable_rooms`, :func:`may_read`) and :func:`authorize_grant`,
beside the end-to-end tests of every path (``tests/e2e/test_visibility.py``)."""

from __future__ import annotations

import pytest

from quart_mesh.errors import Forbidden
from quart_mesh.permissions import Override, Role
from quart_mesh.services.authz import (
    Actor,
    Policy,
    RoomRef,
    authorize_grant,
    capped_at_tier_4,
    may_read,
    permitted,
    readable_rooms,
)

pytestmark = pytest.mark.store_free

ROOM, OTHER = "R1", "R2"


def policy(*overrides: tuple[str, str, str, str], presets: dict[str, str] | None = None) -> Policy:
    made = Policy()
    made.load(
        [Role("blind", 100, frozenset({"participants.read"}))],
        [
            Override(f"o{n}", ROOM, kind, target, permission, effect)
            for n, (kind, target, permission, effect) in enumerate(overrides)
        ],
        (presets or {}).items(),
    )
    return made


def actor(role: str, p: Policy, pid: str = "alice", kind: str = "human") -> Actor:
    return Actor(pid, pid, kind, kind, role, policy=p)


# (role, overrides in ROOM, preset of ROOM, permission, owner of the thing, allowed in ROOM)
CASES = [
    # the role decides where no rule does
    ("member", (), None, "rooms.read", None, True),
    ("blind", (), None, "rooms.read", None, False),
    # a participant's rule beats its role's; admins are above room rules
    ("member", (("participant", "alice", "rooms.read", "deny"),), None, "rooms.read", None, False),
    ("member", (("role", "member", "rooms.read", "deny"),), None, "rooms.read", None, False),
    (
        "member",
        (
            ("role", "member", "rooms.read", "deny"),
            ("participant", "alice", "rooms.read", "allow"),
        ),
        None,
        "rooms.read",
        None,
        True,
    ),
    ("admin", (("participant", "alice", "rooms.read", "deny"),), None, "rooms.read", None, True),
    ("blind", (("participant", "alice", "rooms.read", "allow"),), None, "rooms.read", None, True),
    # authors edit and delete their own messages, unless what governs posting stops it
    ("member", (), None, "messages.edit", "alice", True),
    ("member", (), None, "messages.edit", "bob", False),
    ("member", (), "read_only", "messages.edit", "alice", False),
    ("member", (), "read_only", "messages.delete", "alice", False),
    ("member", (), "read_only", "messages.react", None, False),
    ("member", (), "announcements", "messages.edit", "alice", False),
    ("member", (), "announcements", "messages.delete", "alice", False),
    ("member", (), "announcements", "messages.react", None, True),
    ("moderator", (), "announcements", "messages.edit", "bob", True),
    # a moderator's own message is posting too
    ("moderator", (), "read_only", "messages.edit", "alice", False),
    (
        "moderator",
        (("participant", "alice", "messages.send", "deny"),),
        None,
        "messages.edit",
        "alice",
        False,
    ),
    # an explicit allow to post lets one edit one's posts, preset or not
    (
        "member",
        (("participant", "alice", "messages.send", "allow"),),
        "read_only",
        "messages.edit",
        "alice",
        True,
    ),
    # moderation is not posting: moderators still remove others' messages
    ("moderator", (), "read_only", "messages.delete", "bob", True),
    (
        "moderator",
        (("participant", "alice", "messages.send", "deny"),),
        None,
        "messages.delete",
        "bob",
        True,
    ),
    (
        "member",
        (("participant", "alice", "messages.send", "deny"),),
        None,
        "messages.edit",
        "alice",
        False,
    ),
    (
        "member",
        (("participant", "alice", "messages.send", "deny"),),
        None,
        "messages.react",
        None,
        True,
    ),
    (
        "member",
        (("participant", "alice", "messages.edit", "deny"),),
        None,
        "messages.edit",
        "alice",
        False,
    ),
]


@pytest.mark.parametrize(("role", "overrides", "preset", "permission", "owner", "allowed"), CASES)
def test_the_decision(
    role: str,
    overrides: tuple[tuple[str, str, str, str], ...],
    preset: str | None,
    permission: str,
    owner: str | None,
    allowed: bool,
) -> None:
    p = policy(*overrides, presets={ROOM: preset} if preset else None)
    who = actor(role, p)
    assert permitted(who, permission, RoomRef(ROOM, owner_id=owner)) is allowed
    # rules of one room never decide in another
    if permission == "rooms.read":
        assert may_read(who, ROOM) is allowed
        readable = readable_rooms(who)
        assert readable(ROOM) is allowed
        assert readable(OTHER) is permitted(who, "rooms.read")
        assert readable.unrestricted is (allowed and permitted(who, "rooms.read"))


# a federated participant's relayed actions (capped at Tier 4): a room
# override allows it nothing the agent role lacks; denials and its rights on
# its own messages are as for anyone
# (role here, overrides in ROOM, preset of ROOM, permission, owner, allowed capped, uncapped)
CAPPED_CASES = [
    (
        "agent",
        (("participant", "alice", "messages.delete", "allow"),),
        None,
        "messages.delete",
        "bob",
        False,
        True,
    ),
    (
        "agent",
        (("role", "agent", "messages.delete", "allow"),),
        None,
        "messages.delete",
        "bob",
        False,
        True,
    ),
    # a role above Tier 4 counts as agent, and its rules as agent's rules do
    (
        "moderator",
        (("participant", "alice", "messages.edit", "allow"),),
        None,
        "messages.edit",
        "bob",
        False,
        True,
    ),
    ("moderator", (), None, "messages.delete", "bob", False, True),
    # its own messages: as any author
    (
        "agent",
        (("participant", "alice", "messages.delete", "allow"),),
        None,
        "messages.delete",
        "alice",
        True,
        True,
    ),
    (
        "agent",
        (("participant", "alice", "messages.delete", "deny"),),
        None,
        "messages.delete",
        "alice",
        False,
        False,
    ),
    # an allow skipped leaves the next rule to decide (the role's deny)
    (
        "agent",
        (
            ("participant", "alice", "messages.delete", "allow"),
            ("role", "agent", "messages.delete", "deny"),
        ),
        None,
        "messages.delete",
        "alice",
        False,
        True,
    ),
    # an allow of what agent holds still counts, over a preset too
    (
        "spectator",
        (("participant", "alice", "messages.send", "allow"),),
        None,
        "messages.send",
        None,
        True,
        True,
    ),
    (
        "agent",
        (("participant", "alice", "messages.send", "allow"),),
        "read_only",
        "messages.send",
        None,
        True,
        True,
    ),
    (
        "agent",
        (("participant", "alice", "messages.send", "deny"),),
        None,
        "messages.send",
        None,
        False,
        False,
    ),
    ("agent", (("role", "agent", "rooms.read", "deny"),), None, "rooms.read", None, False, False),
]


@pytest.mark.parametrize(
    ("role", "overrides", "preset", "permission", "owner", "capped", "uncapped"), CAPPED_CASES
)
def test_the_decision_at_tier_4(
    role: str,
    overrides: tuple[tuple[str, str, str, str], ...],
    preset: str | None,
    permission: str,
    owner: str | None,
    capped: bool,
    uncapped: bool,
) -> None:
    p = policy(*overrides, presets={ROOM: preset} if preset else None)
    who = actor(role, p)
    room = RoomRef(ROOM, owner_id=owner)
    assert permitted(who, permission, room) is uncapped
    assert permitted(capped_at_tier_4(who), permission, room) is capped


@pytest.mark.parametrize(
    ("role", "grants", "ok"),
    [
        ("owner", Role("admin", 900).held(), True),
        ("admin", Role("moderator", 700).held(), True),
        ("member", ["messages.send", "rooms.read"], True),
        ("member", ["messages.delete"], False),
        ("blind", Role("agent", 300).held(), False),
        ("blind", ["participants.read"], True),
    ],
)
def test_no_grant_above_ones_own(role: str, grants: list[str], ok: bool) -> None:
    who = actor(role, policy())
    if ok:
        authorize_grant(who, grants)
    else:
        with pytest.raises(Forbidden) as raised:
            authorize_grant(who, grants)
        assert raised.value.code == "permission_too_high"
