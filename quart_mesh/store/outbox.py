"""What a unit of work publishes, recorded with the unit itself.

A write function (``fn(conn)`` given to :meth:`Database.write`) does not
publish events or touch the broker's routing directly: it *records* them on
its connection, and they take effect only if, and once, the unit commits:

- :func:`emit`: an event for a room's members (or everyone);
- :func:`emit_to`: an event for one participant's sessions (a command);
- :func:`change`: a change to what every process keeps in memory — the
  broker's routing (:class:`Join`, :class:`Leave`, ...) or a cache
  (:class:`Invalidate`).

On one process (SQLite) the store hands the entries of each committed unit
to the broker right after the commit, in commit order. With several
processes on one PostgreSQL database the entries are also written, in the
same transaction, to the ``cluster_stream`` table at the transaction's
block (``blocks.py``) and sent as notifications; every process applies
them in block order (``services/bus.py``). Nothing is delivered that was
not committed, and nothing committed is missed.

A unit that fails is rolled back with its entries (its savepoint).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from sqlalchemy.engine import Connection

from .._version import __version__
from ..ends import EndReason
from ..events import CommandIssued, Event, MessagePosted, Relayed, TaskCreated, TaskUpdated
from ..records import Message, Reaction, Task, TaskState, Upload

__all__ = [
    "FRAME_CARRIED",
    "Change",
    "Disconnect",
    "DisconnectToken",
    "DropParticipant",
    "DropRoom",
    "Entry",
    "Invalidate",
    "Join",
    "Leave",
    "Publish",
    "Routing",
    "SendTo",
    "begin",
    "change",
    "decode",
    "emit",
    "emit_to",
    "encode",
    "encode_each",
    "entries",
    "take",
]

log = logging.getLogger(__name__)

#: ``conn.info`` key of the running unit's entries
_KEY = "mesh_outbox"

#: the longest frame a message's stream entry carries (UTF-8 bytes: the entry
#: then fits one notification, 7,600 bytes, whatever the text); a longer one
#: is made again by each process that delivers it (decision 0085)
FRAME_CARRIED = 2048


@dataclass(frozen=True, slots=True)
class Publish:
    event: Event


@dataclass(frozen=True, slots=True)
class SendTo:
    participant_id: str
    event: Event


# changes to what every process keeps in memory: the broker's routing (applied
# by every process, also the one that wrote them, at once after its commit)
# and caches (``Invalidate``). Their wire form is ``{"k": "change", "kind":
# KIND, "args": [...]}``, the fields in order.


@dataclass(frozen=True, slots=True)
class Join:
    """A participant joined a room."""

    kind: ClassVar[str] = "join"
    room_id: str
    participant_id: str


@dataclass(frozen=True, slots=True)
class Leave:
    """A participant left a room (or may no longer be in it)."""

    kind: ClassVar[str] = "leave"
    room_id: str
    participant_id: str


@dataclass(frozen=True, slots=True)
class DropRoom:
    """A room was deleted."""

    kind: ClassVar[str] = "drop_room"
    room_id: str


@dataclass(frozen=True, slots=True)
class DropParticipant:
    """A participant was deleted: its subscriptions end as ``removed``."""

    kind: ClassVar[str] = "drop_participant"
    participant_id: str


@dataclass(frozen=True, slots=True)
class Disconnect:
    """A participant's subscriptions end (its memberships stay)."""

    kind: ClassVar[str] = "disconnect"
    participant_id: str
    reason: EndReason


@dataclass(frozen=True, slots=True)
class DisconnectToken:
    """The subscriptions a participant opened with one token end."""

    kind: ClassVar[str] = "disconnect_token"
    participant_id: str
    token_id: str
    reason: EndReason


@dataclass(frozen=True, slots=True)
class Invalidate:
    """A cache of every process is stale for *key* (``Bus.on_invalidate``)."""

    kind: ClassVar[str] = "invalidate"
    cache: str
    key: str


#: a change to the broker's routing
Routing = Join | Leave | DropRoom | DropParticipant | Disconnect | DisconnectToken
Change = Routing | Invalidate

#: each change's class by its wire ``kind``
_CHANGES: dict[str, type[Change]] = {
    cls.kind: cls
    for cls in (Join, Leave, DropRoom, DropParticipant, Disconnect, DisconnectToken, Invalidate)
}


def _change_args(change: Change) -> list[str]:
    """A change's fields, in order: its wire ``args``."""
    return [str(getattr(change, f.name)) for f in dataclasses.fields(change)]


def _decode_change(kind: str, args: list[str]) -> Change | None:
    """The change of a wire item, or None for one this release cannot read
    (a newer process's kind or shape: ignored, as older releases did)."""
    cls = _CHANGES.get(kind)
    try:
        if cls is Disconnect:
            participant_id, reason = args
            return Disconnect(participant_id, _reason(reason))
        if cls is DisconnectToken:
            participant_id, token_id, reason = args
            return DisconnectToken(participant_id, token_id, _reason(reason))
        if cls is None:
            return None
        made: Callable[..., Change] = cls  # the others' fields are all str
        return made(*args)
    except (TypeError, ValueError):
        log.warning("a %s change of an unknown shape was ignored: %r", kind, args)
        return None


def _reason(value: str) -> EndReason:
    """A disconnect's reason; one this release does not know (a newer
    process's) still disconnects, as ``closed``: the client connects again."""
    try:
        return EndReason(value)
    except ValueError:
        return EndReason.CLOSED


Entry = Publish | SendTo | Change


def begin(conn: Connection) -> list[Entry]:
    """Start recording a unit's entries on *conn* (the store calls this)."""
    found: list[Entry] = []
    conn.info[_KEY] = found
    return found


def take(conn: Connection) -> list[Entry]:
    """Stop recording; the entries recorded since :func:`begin`."""
    found: list[Entry] = conn.info.pop(_KEY, None) or []
    return found


def entries(conn: Connection) -> list[Entry]:
    recorded: list[Entry] | None = conn.info.get(_KEY)
    if recorded is None:
        # a write function run outside Database.write (a bug): fail loudly
        raise RuntimeError("outbox entries recorded outside a unit of work")
    return recorded


def emit(conn: Connection, event: Event) -> None:
    """Publish *event* once this unit commits."""
    entries(conn).append(Publish(event))


def emit_to(conn: Connection, participant_id: str, event: Event) -> None:
    """Send *event* to *participant_id*'s sessions once this unit commits."""
    entries(conn).append(SendTo(participant_id, event))


def change(conn: Connection, change: Change) -> None:
    """Record a change to in-memory state every process keeps: the broker's
    routing (:data:`Routing`) or a cache (:class:`Invalidate`)."""
    entries(conn).append(change)


# the stream's wire form --------------------------------------------------------


def _event_json(event: Event) -> dict[str, Any]:
    if isinstance(event, MessagePosted):
        # the message as stored by the unit (an edit or a deletion follows
        # as its own entry): receivers read it with the row, no second query
        return {"type": "message", "message": _message_json(event.message)}
    if isinstance(event, CommandIssued):
        return {
            "type": "command",
            "agentId": event.agent_id,
            "commandId": event.command_id,
            "command": event.command,
            "args": event.args,
            "sentBy": event.sent_by,
            "createdAt": event.created_at,
        }
    if isinstance(event, TaskCreated):  # TaskUpdated too
        # the task itself: a receiver (an A2A stream) reads its fields
        return {"type": event.type, "task": dataclasses.asdict(event.task)}
    return {
        "type": event.type,
        "roomId": event.room_id,
        "exclude": event.exclude,
        "chat": event.chat,
        "frame": event.frame,
    }


def encode(found: list[Entry]) -> str:
    """One unit's entries as the JSON text of a stream row."""
    return "[" + ",".join(encode_each(found)) + "]"


def encode_each(found: list[Entry]) -> list[str]:
    """Each entry as JSON text, the items of :func:`encode`'s array (a
    notification carries a run of them)."""
    out: list[str] = []
    for entry in found:
        item: dict[str, Any]
        if isinstance(entry, Publish):
            item = {"k": "publish", "e": _event_json(entry.event)}
            if isinstance(entry.event, MessagePosted):
                # its frame too, serialized once here: every process of the
                # same release that follows the stream delivers it as is
                # (``decode``), none serializes the message again; not for
                # a long message (its text twice, escaped twice, would pass a
                # notification's size sooner: its commit read from the table)
                frame = entry.event.frame
                if len(frame.encode()) <= FRAME_CARRIED:
                    item["f"] = frame
                    item["v"] = __version__
        elif isinstance(entry, SendTo):
            item = {"k": "send", "to": entry.participant_id, "e": _event_json(entry.event)}
        else:
            item = {"k": "change", "kind": entry.kind, "args": _change_args(entry)}
        out.append(_dumps(item))
    return out


def _dumps(item: dict[str, Any]) -> str:
    return json.dumps(item, ensure_ascii=False, separators=(",", ":"))


_MESSAGE_NAMES = tuple(f.name for f in dataclasses.fields(Message))
_MESSAGE_FIELDS = frozenset(_MESSAGE_NAMES)
_REACTION_NAMES = tuple(f.name for f in dataclasses.fields(Reaction))
_UPLOAD_NAMES = tuple(f.name for f in dataclasses.fields(Upload))


def _message_json(message: Message) -> dict[str, Any]:
    """``dataclasses.asdict(message)``, written out: it is on the path of
    every send (each committed message is encoded once), and ``asdict``'s
    generic recursion, a deep copy of every value, was half of the writer
    thread's time on PostgreSQL."""
    data = {name: getattr(message, name) for name in _MESSAGE_NAMES}
    data["reactions"] = [
        {name: _plain(getattr(r, name)) for name in _REACTION_NAMES} for r in message.reactions
    ]
    data["attachments"] = [
        {name: _plain(getattr(a, name)) for name in _UPLOAD_NAMES} for a in message.attachments
    ]
    return data


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _message(data: dict[str, Any]) -> Message:
    # fields a newer version added are left out, so a row still reads
    known = data if data.keys() <= _MESSAGE_FIELDS else _known(data)
    reactions, attachments = data["reactions"], data["attachments"]
    return Message(
        **{
            **known,
            "reactions": tuple(Reaction(r["emoji"], tuple(r["participant_ids"])) for r in reactions)
            if reactions
            else (),
            "attachments": tuple(Upload(**a) for a in attachments) if attachments else (),
        }
    )


def _known(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k in _MESSAGE_FIELDS}


_TASK_FIELDS = frozenset(f.name for f in dataclasses.fields(Task))
_TASK_EVENTS: dict[str, type[TaskCreated]] = {
    TaskCreated.type: TaskCreated,
    TaskUpdated.type: TaskUpdated,
}


def _task(data: dict[str, Any]) -> Task:
    known = {k: v for k, v in data.items() if k in _TASK_FIELDS}
    return Task(**{**known, "state": TaskState(data["state"])})


def decode(body: str) -> list[Entry]:
    """A stream row's entries (:func:`encode`'s inverse)."""
    out: list[Entry] = []
    for item in json.loads(body):
        if item["k"] == "change":
            change = _decode_change(item["kind"], item["args"])
            if change is not None:
                out.append(change)
            continue
        data = item["e"]
        to = item.get("to")
        event: Event
        if data["type"] == "message":
            message = _message(data["message"])
            event = MessagePosted(message.room_id, message=message)
            # a frame made by this release only: another may shape it otherwise
            if item.get("v") == __version__ and isinstance(frame := item.get("f"), str):
                event.adopt_frame(frame)
        elif data["type"] == "command":
            event = CommandIssued(
                None,
                command_id=data["commandId"],
                agent_id=data["agentId"],
                command=data["command"],
                args=data["args"],
                sent_by=data["sentBy"],
                created_at=data["createdAt"],
            )
        elif data["type"] in _TASK_EVENTS:
            task = _task(data["task"])
            event = _TASK_EVENTS[data["type"]](task.room_id, task=task)
        else:
            event = Relayed.of(
                data["type"],
                data["roomId"],
                data["frame"],
                chat=data["chat"],
                exclude=data["exclude"],
            )
        out.append(SendTo(to, event) if to is not None else Publish(event))
    return out
