"""Tasks (``docs/rest.md`` "Tasks"; ``docs/agents-mcp-a2a.md#tasks``)."""

from __future__ import annotations

from typing import Any, Literal

from quart import Blueprint

from ._common import caller, node, reply
from .contract import Body, Query, Shape, accepts, answers, query
from .objects import Id, Message, Timestamp

bp = Blueprint("tasks", __name__)

TaskStateName = Literal[
    "submitted", "working", "input-required", "completed", "failed", "canceled", "rejected"
]


class NewTask(Body):
    #: the room the request is posted in (the caller must be a member)
    room_id: str
    #: the bot asked (a member of the room)
    agent_id: str
    #: the request: posted as the caller's message, the root of the task's thread
    content: str
    #: at most 200 characters (default: the request's first line)
    title: str | None = None


class TaskChange(Body):
    #: the new state (the moves allowed: ``docs/agents-mcp-a2a.md#tasks``)
    state: str
    #: a status text: kept as ``statusMessage`` and posted in the task's thread
    message: str | None = None
    #: the final answer (kept as ``result``)
    result: str | None = None


class TaskAnswer(Body):
    #: the creator's answer, posted in the task's thread
    content: str


class TasksQuery(Query):
    #: only this room's tasks (default: the caller's own, as creator or agent)
    room_id: str | None = None
    #: only open tasks (submitted, working, input-required)
    open: bool | None = None
    #: at most this many (default 50)
    limit: int | None = None
    #: a task id: only tasks older than it (the next page)
    before: str | None = None


class TaskView(Shape):
    """Work asked of an agent in a room, and where it stands."""

    task_id: Id
    room_id: Id
    #: the participant who does it
    agent_id: Id
    creator_id: Id
    title: str
    state: TaskStateName
    #: the request: the creator's message, the root of the task's thread
    message_id: Id
    #: the A2A context (default: the task's id)
    context_id: str
    #: the agent's last status text (its question, when input-required)
    status_message: str | None
    #: the agent's final answer
    result: str | None
    #: the agent updated the task itself (its replies no longer complete it)
    managed: bool
    via: Literal["rest", "ws", "mcp", "a2a"]
    created_at: Timestamp
    updated_at: Timestamp


class TaskList(Shape):
    """Tasks, newest first."""

    tasks: list[TaskView]


class TaskDetails(Shape):
    """A task and its conversation (the request and the thread's replies), oldest first."""

    task: TaskView
    messages: list[Message]


@bp.post("/api/tasks")
@accepts(NewTask)
@answers(TaskView, 201)
async def create_task(data: NewTask) -> tuple[Any, int]:
    """Ask a bot of a room for something (``tasks.create``), posting the request as a message."""
    actor = await caller()
    task = await node().tasks.create(
        actor, room_id=data.room_id, agent_id=data.agent_id, content=data.content, title=data.title
    )
    return reply(task.to_json(), 201)


@bp.get("/api/tasks")
@query(TasksQuery)
@answers(TaskList)
async def list_tasks(args: TasksQuery) -> tuple[Any, int]:
    """A room's tasks, or the caller's own (created or assigned), newest first."""
    actor = await caller()
    found = await node().tasks.list(
        actor,
        room_id=args.room_id,
        open_only=bool(args.open),
        limit=50 if args.limit is None else args.limit,
        before=args.before,
    )
    return reply({"tasks": [task.to_json() for task in found]})


@bp.get("/api/tasks/<task_id>")
@answers(TaskDetails)
async def get_task(task_id: str) -> tuple[Any, int]:
    """A task the caller may see (whoever may read its room) and its conversation."""
    actor = await caller()
    tasks = node().tasks
    task = await tasks.get(actor, task_id)
    history = await tasks.history(actor, task_id)
    return reply({"task": task.to_json(), "messages": [m.to_json() for m in history]})


@bp.patch("/api/tasks/<task_id>")
@accepts(TaskChange)
@answers(TaskView)
async def update_task(task_id: str, data: TaskChange) -> tuple[Any, int]:
    """The task's agent moves it (working, input-required, completed, failed, rejected)."""
    actor = await caller()
    task = await node().tasks.update(
        actor, task_id, state=data.state, message=data.message, result=data.result
    )
    return reply(task.to_json())


@bp.post("/api/tasks/<task_id>/cancel")
@answers(TaskView)
async def cancel_task(task_id: str) -> tuple[Any, int]:
    """Cancel an open task: its creator, or whoever may command agents."""
    actor = await caller()
    return reply((await node().tasks.cancel(actor, task_id)).to_json())


@bp.post("/api/tasks/<task_id>/reply")
@accepts(TaskAnswer)
@answers(TaskView)
async def reply_to_task(task_id: str, data: TaskAnswer) -> tuple[Any, int]:
    """The task's creator answers in its thread; the task goes back to working."""
    actor = await caller()
    return reply((await node().tasks.reply(actor, task_id, data.content)).to_json())
