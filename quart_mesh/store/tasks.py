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
    "agent_replies",
    "complete_unmanaged",
    "get_task",
    "insert_task",
    "list_tasks",
    "move",
    "open_unmanaged",
    "rooms_with_open_unmanaged",
    "task_from_row",
    "thread_of",
]

_OPEN = sorted(state.value for state in OPEN_TASK_STATES)


def task_from_row(row: Any) -> Task:
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
        result=row.result,
        managed=bool(row.managed),
        via=row.via,
        created_at=row.created_at,
        updated_at=row.updated_at,
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
        )
    )


def get_task(conn: Connection, task_id: str) -> Task | None:
    row = conn.execute(sa.select(tasks).where(tasks.c.task_id == task_id)).first()
    return None if row is None else task_from_row(row)


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
    query = sa.select(tasks)
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
    return [task_from_row(row) for row in conn.execute(query)]


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


def complete_unmanaged(conn: Connection, task_id: str, result: str, at: int) -> bool:
    """Complete an open task the agent never updated itself, with *result*
    (its reply). Whether it did (not if it was managed or closed meanwhile)."""
    changed = conn.execute(
        tasks.update()
        .where(tasks.c.task_id == task_id, tasks.c.state.in_(_OPEN), tasks.c.managed.is_(False))
        .values(state=TaskState.COMPLETED.value, result=result, updated_at=at)
    ).rowcount
    return bool(changed)


def open_unmanaged(conn: Connection, room_id: str) -> list[Task]:
    """A room's open tasks whose agent never updated them, oldest first."""
    rows = conn.execute(
        sa.select(tasks)
        .where(tasks.c.room_id == room_id, tasks.c.state.in_(_OPEN), tasks.c.managed.is_(False))
        .order_by(tasks.c.task_id)
    )
    return [task_from_row(row) for row in rows]


def rooms_with_open_unmanaged(conn: Connection) -> list[str]:
    rows = conn.execute(
        sa.select(tasks.c.room_id)
        .where(tasks.c.state.in_(_OPEN), tasks.c.managed.is_(False))
        .distinct()
    )
    return [row.room_id for row in rows]


def _replies(task: Task, *, dm: bool) -> sa.Select[Any]:
    """The agent's replies to *task*: its messages in the task's thread, or
    (in a DM) any of its messages after the request."""
    query = sa.select(messages.c.seq).where(
        messages.c.room_id == task.room_id,
        messages.c.sender_id == task.agent_id,
        messages.c.seq > task.request_seq,
    )
    if not dm:
        query = query.where(messages.c.thread_id == task.message_id)
    return query


def agent_replies(conn: Connection, task: Task, *, dm: bool, limit: int = 1) -> list[Message]:
    """The agent's first *limit* replies to *task*, oldest first."""
    seqs = [
        row.seq for row in conn.execute(_replies(task, dm=dm).order_by(messages.c.seq).limit(limit))
    ]
    return messages_repo.messages_by_seq(conn, seqs)


def thread_of(conn: Connection, task: Task, *, dm: bool, limit: int) -> list[Message]:
    """*task*'s conversation, oldest first, at most *limit* messages: the
    request and the replies in its thread, and in a DM the agent's other
    messages after the request."""
    query = sa.select(messages.c.seq).where(
        messages.c.room_id == task.room_id,
        sa.or_(
            messages.c.message_id == task.message_id,
            messages.c.thread_id == task.message_id,
            *(
                [sa.and_(messages.c.sender_id == task.agent_id, messages.c.seq > task.request_seq)]
                if dm
                else []
            ),
        ),
    )
    if dm and task.state.terminal:
        # a DM goes on after the task: what came after it closed is not its
        in_thread = messages.c.thread_id == task.message_id
        query = query.where(sa.or_(in_thread, messages.c.created_at <= task.updated_at))
    seqs: Sequence[int] = [
        row.seq for row in conn.execute(query.order_by(messages.c.seq).limit(limit))
    ]
    return messages_repo.messages_by_seq(conn, seqs)
