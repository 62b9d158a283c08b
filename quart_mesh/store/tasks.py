"""Repository: tasks (``services/tasks.py``, decision 0063).

State changes are conditional UPDATEs (``WHERE state IN (...)``): a change
applies once whichever process or path tries it first, and the others
learn that it did not (the number of rows changed), so running one again
is harmless.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..records import OPEN_TASK_STATES, Message, Task, TaskState
from . import messages as messages_repo
from .schema import messages, room_members, tasks

__all__ = [
    "claim",
    "complete_unmanaged",
    "first_reply",
    "get_task",
    "insert_task",
    "list_tasks",
    "move",
    "open_unmanaged",
    "rooms_with_open_unmanaged",
    "thread_of",
    "unclaim",
]

_OPEN = sorted(state.value for state in OPEN_TASK_STATES)

#: the reply that completed a task (``result_message_id``): its text, as it is now
_reply = messages.alias("reply")
#: another task, for "is this reply taken"
_other = tasks.alias("other")


def _select() -> sa.Select[Any]:
    """Tasks with the current text of the reply that completed them."""
    return sa.select(tasks, _reply.c.content.label("reply_content")).select_from(
        tasks.outerjoin(_reply, _reply.c.message_id == tasks.c.result_message_id)
    )


def _task(row: Any) -> Task:
    from_reply = row.result_message_id is not None
    return Task(
        task_id=row.task_id,
        room_id=row.room_id,
        agent_id=row.agent_id,
        creator_id=row.creator_id,
        title=row.title,
        state=TaskState(row.state),
        message_id=row.message_id,
        request_seq=row.request_seq,
        context_id=row.context_id,
        status_message=row.status_message,
        # a deleted reply leaves no result (the outer join finds nothing)
        result=row.reply_content if from_reply else row.result,
        managed=bool(row.managed),
        via=row.via,
        created_at=row.created_at,
        updated_at=row.updated_at,
        result_message_id=row.result_message_id,
    )


def insert_task(conn: Connection, task: Task) -> None:
    conn.execute(
        tasks.insert().values(
            task_id=task.task_id,
            room_id=task.room_id,
            agent_id=task.agent_id,
            creator_id=task.creator_id,
            title=task.title,
            state=task.state.value,
            message_id=task.message_id,
            request_seq=task.request_seq,
            context_id=task.context_id,
            status_message=task.status_message,
            result=task.result,
            managed=task.managed,
            via=task.via,
            created_at=task.created_at,
            updated_at=task.updated_at,
            result_message_id=task.result_message_id,
        )
    )


def get_task(conn: Connection, task_id: str) -> Task | None:
    row = conn.execute(_select().where(tasks.c.task_id == task_id)).first()
    return None if row is None else _task(row)


def list_tasks(
    conn: Connection,
    *,
    room_id: str | None = None,
    involving: str | None = None,
    open_only: bool = False,
    before: str | None = None,
    limit: int,
) -> list[Task]:
    """Tasks newest first: in *room_id*, or (*involving*) those the
    participant created or is the agent of, in rooms it is still a member of.
    *before*: a task id; only older tasks."""
    query = _select()
    if room_id is not None:
        query = query.where(tasks.c.room_id == room_id)
    if involving is not None:
        member = sa.exists().where(
            room_members.c.room_id == tasks.c.room_id,
            room_members.c.participant_id == involving,
        )
        query = query.where(
            sa.or_(tasks.c.creator_id == involving, tasks.c.agent_id == involving), member
        )
    if open_only:
        query = query.where(tasks.c.state.in_(_OPEN))
    if before is not None:
        query = query.where(tasks.c.task_id < before)
    query = query.order_by(tasks.c.task_id.desc()).limit(limit)
    return [_task(row) for row in conn.execute(query)]


def move(
    conn: Connection,
    task_id: str,
    *,
    from_states: Collection[TaskState],
    state: TaskState,
    at: int,
    managed: bool | None = None,
    status_message: str | None = None,
    result: str | None = None,
) -> bool:
    """Move the task to *state* if it is in one of *from_states* (keeping
    ``status_message`` and ``result`` when not given). Whether it moved."""
    values: dict[str, Any] = {"state": state.value, "updated_at": at}
    if managed is not None:
        values["managed"] = managed
    if status_message is not None:
        values["status_message"] = status_message
    if result is not None:
        values["result"] = result
    changed = conn.execute(
        tasks.update()
        .where(tasks.c.task_id == task_id, tasks.c.state.in_([s.value for s in from_states]))
        .values(**values)
    ).rowcount
    return bool(changed)


def claim(conn: Connection, task_id: str) -> bool:
    """Mark an open task managed, its state untouched: its agent is about to
    post a status message in its thread, which must not complete it. Whether
    it did (not if it was managed or closed already)."""
    changed = conn.execute(
        tasks.update()
        .where(tasks.c.task_id == task_id, tasks.c.state.in_(_OPEN), tasks.c.managed.is_(False))
        .values(managed=True)
    ).rowcount
    return bool(changed)


def unclaim(conn: Connection, task: Task) -> None:
    """Undo :func:`claim` of *task* (as it was before), if nothing changed it since."""
    conn.execute(
        tasks.update()
        .where(
            tasks.c.task_id == task.task_id,
            tasks.c.state == task.state.value,
            tasks.c.updated_at == task.updated_at,
            tasks.c.managed.is_(True),
        )
        .values(managed=False)
    )


def complete_unmanaged(conn: Connection, task: Task, reply_id: str, at: int) -> bool:
    """Complete an open task the agent never updated itself with its reply
    *reply_id* (the result is that message's text, :func:`get_task`). Whether
    it did: not if it was managed or closed meanwhile, or another task of the
    room took that reply."""
    taken = sa.exists().where(
        _other.c.room_id == task.room_id, _other.c.result_message_id == reply_id
    )
    changed = conn.execute(
        tasks.update()
        .where(
            tasks.c.task_id == task.task_id,
            tasks.c.state.in_(_OPEN),
            tasks.c.managed.is_(False),
            ~taken,
        )
        .values(
            state=TaskState.COMPLETED.value, result_message_id=reply_id, result=None, updated_at=at
        )
    ).rowcount
    return bool(changed)


def open_unmanaged(
    conn: Connection, room_id: str, *, agent_id: str | None = None, upto_seq: int | None = None
) -> list[Task]:
    """A room's open tasks whose agent never updated them, in request order;
    only *agent_id*'s, only those asked at or before *upto_seq*, if given."""
    query = _select().where(
        tasks.c.room_id == room_id, tasks.c.state.in_(_OPEN), tasks.c.managed.is_(False)
    )
    if agent_id is not None:
        query = query.where(tasks.c.agent_id == agent_id)
    if upto_seq is not None:
        query = query.where(tasks.c.request_seq <= upto_seq)
    return [_task(row) for row in conn.execute(query.order_by(tasks.c.request_seq))]


def rooms_with_open_unmanaged(conn: Connection) -> list[str]:
    rows = conn.execute(
        sa.select(tasks.c.room_id)
        .where(tasks.c.state.in_(_OPEN), tasks.c.managed.is_(False))
        .distinct()
    )
    return [row.room_id for row in rows]


def first_reply(
    conn: Connection, task: Task, *, dm: bool, taken: Collection[str] = ()
) -> Message | None:
    """The agent's first reply to *task*: its first message in the task's
    thread after the request, or (in a DM) at the top of the DM, if that
    comes first and no task took it (none completed with it, none of
    *taken*)."""
    in_thread = messages.c.thread_id == task.message_id
    if dm:
        took = sa.exists().where(
            _other.c.room_id == task.room_id, _other.c.result_message_id == messages.c.message_id
        )
        top = sa.and_(
            messages.c.thread_id.is_(None), ~took, messages.c.message_id.not_in(list(taken))
        )
        in_thread = sa.or_(in_thread, top)
    seq = conn.execute(
        sa.select(messages.c.seq)
        .where(
            messages.c.room_id == task.room_id,
            messages.c.sender_id == task.agent_id,
            messages.c.seq > task.request_seq,
            in_thread,
        )
        .order_by(messages.c.seq)
        .limit(1)
    ).scalar()
    if seq is None:
        return None
    return messages_repo.messages_by_seq(conn, [seq])[0]


def thread_of(conn: Connection, task: Task, *, dm: bool, limit: int) -> list[Message]:
    """*task*'s conversation, oldest first, its newest *limit* messages: the
    request and the replies in its thread, and in a DM the agent's messages
    at the top of the DM after the request (until the task closed)."""
    query = sa.select(messages.c.seq).where(
        messages.c.room_id == task.room_id,
        sa.or_(
            messages.c.message_id == task.message_id,
            messages.c.thread_id == task.message_id,
            *(
                [
                    sa.and_(
                        messages.c.sender_id == task.agent_id,
                        messages.c.thread_id.is_(None),
                        messages.c.seq > task.request_seq,
                    )
                ]
                if dm
                else []
            ),
        ),
    )
    if dm and task.state.terminal:
        # a DM goes on after the task: what came after it closed is not its
        in_thread = messages.c.thread_id == task.message_id
        query = query.where(sa.or_(in_thread, messages.c.created_at <= task.updated_at))
    newest: Sequence[int] = [
        row.seq for row in conn.execute(query.order_by(messages.c.seq.desc()).limit(limit))
    ]
    return messages_repo.messages_by_seq(conn, newest[::-1])
