"""Tasks: work asked of an agent in a room, followed through A2A's states
(``docs/decisions/0063-tasks.md``).

A task's request is a message its creator posts in the room (through
:meth:`Messages.send`, the one send path): the root of the task's thread.
The agent answers there and moves the task (:meth:`Tasks.update`); an agent
that knows nothing of tasks still completes one, by replying
(:func:`reconcile`):

- a message of the task's agent in the task's room that replies in the
  task's thread is a reply to the task;
- in a DM (where an agent that knows nothing of threads answers at the
  top), the agent's top-level messages are shared out first in, first out:
  each open unmanaged task, in request order, takes the first top-level
  message of its agent after its request that no earlier task took;
- while the agent never updated the task itself (``managed`` false), its
  first reply completes the task, and that reply is its result
  (``result_message_id``: the task shows the message's text as it is now —
  an edit shows, a delete clears it); once managed, replies are only the
  task's history, and a result is what the agent gives.

:func:`reconcile` is the one place that rule is applied: eagerly by the
:class:`TaskReconciler` (one process of the mesh follows message events
and catches up on open tasks when it starts) and lazily whenever a task is
read (:meth:`Tasks.get`, :meth:`Tasks.list`). Its UPDATE is conditional,
so the two may race and run more than once: the task completes once.

Who may see a task: whoever may read its room (the one visibility
decision, ``require_member``); to the others it does not exist (404).

Every change counts against its actor's ``messages`` rate rule, once: the
ones that post a message through :meth:`Messages.send` (which counts it),
the others here (an update without a message, a cancel). An update's text
(its status message, its result) is published to the room, so it needs
what sending there needs.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Awaitable, Callable
from functools import partial

import trio
from sqlalchemy.engine import Connection

from ..broker import Broker
from ..config import Limits
from ..errors import BadRequest, Conflict, Forbidden, MeshError, NotFound
from ..events import Event, MessagePosted, TaskCreated, TaskUpdated
from ..ids import is_ulid, new_id
from ..records import OPEN_TASK_STATES, Message, Task, TaskState, now_ms
from ..retry import retrying
from ..store import Database, outbox
from ..store import accounts as accounts_repo
from ..store import rooms as rooms_repo
from ..store import tasks as repo
from ..store.dialect import one_snapshot
from .authz import Actor, RoomRef, authorize
from .dms import DirectMessages
from .messages import Messages
from .ratelimit import RateLimiter
from .rooms import require_member
from .validation import check_content, check_id

__all__ = ["MAX_TITLE", "MOVES", "VIA", "TaskReconciler", "Tasks", "reconcile"]

log = logging.getLogger(__name__)

#: the longest title, in characters
MAX_TITLE = 200
#: the longest A2A context id a caller may give
MAX_CONTEXT_ID = 64
#: the paths a task can be created through
VIA = frozenset({"rest", "ws", "mcp", "a2a"})

#: the moves a task's agent may make (:meth:`Tasks.update`)
MOVES: dict[TaskState, frozenset[TaskState]] = {
    TaskState.SUBMITTED: frozenset(
        {
            TaskState.WORKING,
            TaskState.INPUT_REQUIRED,
            TaskState.COMPLETED,
            TaskState.FAILED,
            TaskState.REJECTED,
        }
    ),
    TaskState.WORKING: frozenset({TaskState.INPUT_REQUIRED, TaskState.COMPLETED, TaskState.FAILED}),
    TaskState.INPUT_REQUIRED: frozenset({TaskState.WORKING, TaskState.COMPLETED, TaskState.FAILED}),
}

#: is this bot an A2A agent (``Agents.a2a_enabled``)
A2aEnabled = Callable[[str], Awaitable[bool]]


def _not_found() -> NotFound:
    return NotFound("no such task", "task_not_found")


def _closed(task: Task) -> Conflict:
    return Conflict(f"the task is {task.state.value}: it can no longer change", "task_closed")


def _is_dm(conn: Connection, task: Task) -> bool:
    room = rooms_repo.get_room(conn, task.room_id)
    return room is not None and room.kind == "dm"


def _answer(conn: Connection, task: Task) -> Message | None:
    """The reply that completes *task* now, if any (module docstring)."""
    if not task.open or task.managed:
        return None
    if not _is_dm(conn, task):
        return repo.first_reply(conn, task, dm=False)
    # first in, first out: the earlier open tasks take their replies first
    taken: set[str] = set()
    queue = repo.open_unmanaged(
        conn, task.room_id, agent_id=task.agent_id, upto_seq=task.request_seq
    )
    for earlier in queue:
        reply = repo.first_reply(conn, earlier, dm=True, taken=taken)
        if earlier.task_id == task.task_id:
            return reply
        if reply is not None and reply.thread_id is None:
            taken.add(reply.message_id)
    return None  # closed or managed meanwhile


def _due(conn: Connection, task: Task) -> bool:
    """Whether :func:`reconcile` would complete *task* now."""
    return _answer(conn, task) is not None


def reconcile(conn: Connection, task: Task) -> Task:
    """Apply the reconciliation rule (module docstring) to *task*, in a unit
    of work: if the agent never updated it and has replied, complete it with
    its reply (:func:`_answer`) and publish ``task_updated``. The task as it
    is now.

    May run more than once, on any process, for the same task: the UPDATE
    applies only to a task still open and unmanaged, and to a reply no task
    of the room took, and only the unit that applied it publishes."""
    reply = _answer(conn, task)
    if reply is not None and repo.complete_unmanaged(conn, task, reply.message_id, now_ms()):
        done = repo.get_task(conn, task.task_id)
        assert done is not None
        outbox.emit(conn, TaskUpdated(done.room_id, task=done))
        return done
    return repo.get_task(conn, task.task_id) or task


def _visible(conn: Connection, actor: Actor, task_id: str) -> Task:
    """The task, if *actor* may read its room.

    Raises:
        NotFound: no such task, or the actor may not see it.
    """
    task = repo.get_task(conn, task_id) if is_ulid(task_id) else None
    if task is None:
        raise _not_found()
    try:
        require_member(conn, actor, task.room_id)
    except (NotFound, Forbidden):
        raise _not_found() from None
    return task


def _title(title: str | None, content: str) -> str:
    if title is None:
        first = content.strip().splitlines()[0].strip() if content.strip() else ""
        return first[: MAX_TITLE - 1] + "…" if len(first) > MAX_TITLE else first
    if not title.strip() or any(c < " " for c in title):
        raise BadRequest("title must be one line of text", "invalid_title")
    if len(title) > MAX_TITLE:
        raise BadRequest(f"title must be at most {MAX_TITLE} characters", "invalid_title")
    return title.strip()


def _state(value: str) -> TaskState:
    try:
        return TaskState(value)
    except ValueError:
        states = ", ".join(s.value for s in TaskState)
        raise BadRequest(f"state must be one of {states}", "invalid_state") from None


class Tasks:
    """Create, follow, update, cancel and answer tasks (module docstring).

    Every method checks the acting participant's rights itself (through
    :func:`authorize` and the visibility decision), counts its rate (module
    docstring) and raises the usual :class:`~quart_mesh.errors.MeshError`
    subclasses. Each is safe to cancel the way :meth:`Messages.send` is: a
    method that posts a message and changes the task checks first, posts,
    then changes the task, and a cancellation between leaves the message
    posted and the task as it was (an update's task marked managed, at most).
    """

    def __init__(
        self,
        db: Database,
        limits: Limits,
        messages: Messages,
        dms: DirectMessages,
        *,
        a2a_enabled: A2aEnabled | None = None,
        rate_limits: RateLimiter | None = None,
    ) -> None:
        self._db = db
        self._limits = limits
        self._messages = messages
        self._dms = dms
        #: the node's limiter (the one :class:`Messages` counts on)
        self._rate = rate_limits or RateLimiter()
        #: which bots take A2A requests (until the agents service says: every bot)
        self.a2a_enabled = a2a_enabled

    # creating --------------------------------------------------------------

    async def create(
        self,
        actor: Actor,
        *,
        room_id: str,
        agent_id: str,
        content: str,
        title: str | None = None,
        via: str = "rest",
    ) -> Task:
        """Ask *agent_id* (a bot, a member of the room) for something in
        *room_id*: post *content* there as the actor's message, the task's
        request, and open the task on it (``submitted``); publish
        ``task_created``.

        Raises:
            Forbidden: the actor may not create tasks (``tasks.create``),
                read or send in the room, or is not a member.
            NotFound: no such room, or no such participant.
            BadRequest: bad ids, title or content; the participant is not a
                bot (``not_an_agent``) or not in the room (``agent_not_in_room``).
            PayloadTooLarge: content over the message limit.
        """
        check_id(room_id, "roomId")
        check_id(agent_id, "agentId")
        check_content(content, self._limits)
        title = _title(title, content)
        self._check_via(via)
        authorize(actor, "tasks.create", RoomRef(room_id))

        def check(conn: Connection) -> None:
            require_member(conn, actor, room_id)
            self._require_agent(conn, agent_id)
            if not rooms_repo.is_member(conn, room_id, agent_id):
                raise BadRequest("the agent is not a member of this room", "agent_not_in_room")

        await self._db.read(check)
        # addressed to the agent: bots that answer only what is addressed to
        # them see it, and the built-in bots answer it in its thread
        request = await self._messages.send(actor, room_id, content, to=agent_id)
        return await self._open(actor, request, agent_id, title, via, None)

    async def ask(
        self,
        actor: Actor,
        *,
        agent_id: str,
        content: str,
        task_id: str | None = None,
        context_id: str | None = None,
        via: str = "a2a",
    ) -> Task:
        """A2A's way in: what a DM needs, no ``tasks.create``.

        Without *task_id*: open (or reuse) the DM of the actor and the agent,
        post *content* there and open a task on it (its context *context_id*,
        or its own id). With *task_id* (the actor's own task with that
        agent): a follow-up, posted in the task's thread; the task goes to
        ``working``.

        Raises:
            NotFound: no such participant, or no such task of the actor's
                with this agent.
            BadRequest: the participant is not a bot (or takes no A2A
                requests: ``not_an_agent``), bad ids or content.
            Conflict: the task is closed (``task_closed``).
            Forbidden: the actor may not open DMs or send.
        """
        check_id(agent_id, "agentId")
        self._check_via(via)
        check_content(content, self._limits)
        if context_id is not None and not 0 < len(context_id) <= MAX_CONTEXT_ID:
            raise BadRequest(
                f"contextId must be 1 to {MAX_CONTEXT_ID} characters", "invalid_context_id"
            )
        if task_id is not None:
            task = await self._db.read(lambda conn: _visible(conn, actor, task_id))
            if task.creator_id != actor.participant_id or task.agent_id != agent_id:
                raise _not_found()
            if not task.open:
                raise _closed(task)
            await self._messages.send(actor, task.room_id, content, thread_id=task.message_id)
            return await self._move(task, OPEN_TASK_STATES, TaskState.WORKING)
        await self._db.read(lambda conn: self._require_agent(conn, agent_id))
        if self.a2a_enabled is not None and not await self.a2a_enabled(agent_id):
            raise BadRequest("this bot takes no A2A requests", "not_an_agent")
        dm, _ = await self._dms.open(actor, agent_id)
        # addressed to the agent, as in a room (:meth:`create`): the built-in
        # bots answer it in its thread, so two tasks cannot take each
        # other's answer
        request = await self._messages.send(actor, dm.room.room_id, content, to=agent_id)
        return await self._open(actor, request, agent_id, _title(None, content), via, context_id)

    async def _open(
        self,
        actor: Actor,
        request: Message,
        agent_id: str,
        title: str,
        via: str,
        context_id: str | None,
    ) -> Task:
        now = now_ms()
        task_id = new_id()
        task = Task(
            task_id=task_id,
            room_id=request.room_id,
            agent_id=agent_id,
            creator_id=actor.participant_id,
            title=title,
            state=TaskState.SUBMITTED,
            message_id=request.message_id,
            request_seq=request.seq,
            context_id=context_id or task_id,
            status_message=None,
            result=None,
            managed=False,
            via=via,
            created_at=now,
            updated_at=now,
        )

        def write(conn: Connection) -> Task:
            repo.insert_task(conn, task)
            outbox.emit(conn, TaskCreated(task.room_id, task=task))
            # the agent may have answered already (the request was posted first)
            return reconcile(conn, task)

        return await self._db.write(write)

    # reading ---------------------------------------------------------------

    async def get(self, actor: Actor, task_id: str) -> Task:
        """The task, reconciled first (module docstring).

        Raises:
            NotFound: no such task, or the actor may not read its room.
        """

        def read(conn: Connection) -> tuple[Task, bool]:
            # one snapshot: a task completed by another process between two
            # statements of _answer would hide its reply from a later task
            one_snapshot(conn)
            task = _visible(conn, actor, task_id)
            return task, _due(conn, task)

        task, due = await self._db.read(read)
        if not due:
            return task
        return (await self._reconciled([task]))[0]

    async def history(
        self, actor: Actor, task_id: str, *, limit: int | None = None
    ) -> builtins.list[Message]:
        """The task's conversation, its newest *limit* messages (by default
        and at most the page size limit) oldest first: its request and the
        replies in its thread (in a DM, also the agent's top-level messages
        after the request, up to when the task closed).

        Raises:
            NotFound: no such task, or the actor may not read its room.
            BadRequest: a bad limit.
        """
        most = self._limits.max_page_size
        if limit is None:
            limit = most
        if not 1 <= limit <= most:
            raise BadRequest(f"limit must be between 1 and {most}", "invalid_limit")

        def read(conn: Connection) -> builtins.list[Message]:
            task = _visible(conn, actor, task_id)
            return repo.thread_of(conn, task, dm=_is_dm(conn, task), limit=limit)

        return await self._db.read(read)

    async def list(
        self,
        actor: Actor,
        *,
        room_id: str | None = None,
        open_only: bool = False,
        limit: int = 50,
        before: str | None = None,
    ) -> builtins.list[Task]:
        """Tasks, newest first: in *room_id* (if the actor may read it), or
        else those the actor created or is the agent of (in rooms it may
        read). *before*: a task id, for the next page. Reconciled first.

        Raises:
            BadRequest: a bad limit, ``before`` or room id.
            NotFound / Forbidden: the room is unknown, or the actor may not read it.
        """
        if not 1 <= limit <= self._limits.max_page_size:
            raise BadRequest(
                f"limit must be between 1 and {self._limits.max_page_size}", "invalid_limit"
            )
        if before is not None and not is_ulid(before):
            raise BadRequest("before must be a task id", "invalid_cursor")
        if room_id is not None:
            check_id(room_id, "roomId")

        def read(conn: Connection) -> tuple[builtins.list[Task], builtins.list[Task]]:
            one_snapshot(conn)  # as in get
            if room_id is not None:
                require_member(conn, actor, room_id)
                found = repo.list_tasks(
                    conn, room_id=room_id, open_only=open_only, before=before, limit=limit
                )
            else:
                found = [
                    task
                    for task in repo.list_tasks(
                        conn,
                        involving=actor.participant_id,
                        open_only=open_only,
                        before=before,
                        limit=limit,
                    )
                    if _readable(actor, task.room_id)
                ]
            return found, [task for task in found if _due(conn, task)]

        found, due = await self._db.read(read)
        if due:
            done = {task.task_id: task for task in await self._reconciled(due)}
            found = [done.get(task.task_id, task) for task in found]
            if open_only:
                found = [task for task in found if task.open]
        return found

    async def _reconciled(self, tasks: builtins.list[Task]) -> builtins.list[Task]:
        def write(conn: Connection) -> builtins.list[Task]:
            return [reconcile(conn, task) for task in tasks]

        return await self._db.write(write)

    # changing --------------------------------------------------------------

    async def update(
        self,
        actor: Actor,
        task_id: str,
        *,
        state: str,
        message: str | None = None,
        result: str | None = None,
    ) -> Task:
        """The task's agent moves it to *state* (:data:`MOVES`); the task is
        managed from now on. *message* is posted by the agent in the task's
        thread and kept as its status message; *result* is kept as its
        result. Publishes ``task_updated``.

        Everything that can refuse is checked before anything changes: the
        move, what sending in the room needs (for a message or a result:
        both are published to the room), the rate; then the message is
        posted, and the task moved only if it still may (a refused post
        leaves the task as it was).

        Raises:
            NotFound: no such task (that the actor may see).
            Forbidden: the actor is not the task's agent (``not_task_agent``),
                or may not send in the room.
            BadRequest: an unknown state, bad message or result.
            Conflict: the task is closed (``task_closed``), or the move is not
                one the task's state allows (``invalid_transition``).
            RateLimited: the actor updates too fast (the ``messages`` rule).
        """
        target = _state(state)
        if message is not None:
            check_content(message, self._limits)
        if result is not None:
            check_content(result, self._limits)
        task = await self._db.read(lambda conn: _visible(conn, actor, task_id))
        if task.agent_id != actor.participant_id:
            raise Forbidden("only the task's agent updates it", "not_task_agent")
        if not task.open:
            raise _closed(task)
        sources = {source for source, targets in MOVES.items() if target in targets}
        if task.state not in sources:
            raise Conflict(
                f"a {task.state.value} task cannot become {target.value}", "invalid_transition"
            )
        if message is not None or result is not None:
            # one may publish text only where one may send (as Messages does)
            authorize(actor, "rooms.read", RoomRef(task.room_id))
            authorize(actor, "messages.send", RoomRef(task.room_id))
        if message is None:
            self._rate.participant("messages", actor)
        else:
            await self._post_status(actor, task, message)  # counted by the send
        return await self._move(
            task, sources, target, managed=True, status_message=message, result=result
        )

    async def _post_status(self, actor: Actor, task: Task, message: str) -> None:
        """Post an update's *message* in *task*'s thread. The task is marked
        managed first, so the reconciliation does not take the message for
        the reply that completes it; if the post is refused, it is unmarked.

        Raises:
            as :meth:`Messages.send`; Conflict: the task closed meanwhile
                (``task_closed``).
        """

        def claim(conn: Connection) -> bool:
            if repo.claim(conn, task.task_id):
                return True
            now = repo.get_task(conn, task.task_id)
            if now is None:  # its room was deleted meanwhile
                raise _not_found()
            if not now.open:  # its reply completed it meanwhile: post nothing
                raise _closed(now)
            return False  # managed already

        claimed = not task.managed and await self._db.write(claim)
        try:
            await self._messages.send(actor, task.room_id, message, thread_id=task.message_id)
        except MeshError:
            if claimed:
                await self._db.write(lambda conn: repo.unclaim(conn, task))
            raise

    async def cancel(self, actor: Actor, task_id: str) -> Task:
        """Cancel an open task: its creator, or whoever may command agents
        (``agents.command``). Publishes ``task_updated``.

        Raises:
            NotFound: no such task (that the actor may see).
            Forbidden: neither its creator nor allowed to command agents.
            Conflict: the task is closed (``task_closed``).
            RateLimited: the actor changes tasks too fast (the ``messages`` rule).
        """
        task = await self._db.read(lambda conn: _visible(conn, actor, task_id))
        if task.creator_id != actor.participant_id:
            authorize(actor, "agents.command", RoomRef(task.room_id))
        if not task.open:
            raise _closed(task)
        self._rate.participant("messages", actor)
        return await self._move(task, OPEN_TASK_STATES, TaskState.CANCELED)

    async def reply(self, actor: Actor, task_id: str, content: str) -> Task:
        """The task's creator answers (the agent's question, typically):
        *content* is posted in the task's thread and the task goes to
        ``working``. Publishes ``task_updated``.

        Raises:
            NotFound: no such task (that the actor may see).
            Forbidden: the actor is not the task's creator (``not_task_creator``).
            Conflict: the task is closed (``task_closed``).
            BadRequest / PayloadTooLarge: bad content.
        """
        check_content(content, self._limits)
        task = await self._db.read(lambda conn: _visible(conn, actor, task_id))
        if task.creator_id != actor.participant_id:
            raise Forbidden("only the task's creator answers it", "not_task_creator")
        if not task.open:
            raise _closed(task)
        await self._messages.send(actor, task.room_id, content, thread_id=task.message_id)
        return await self._move(task, OPEN_TASK_STATES, TaskState.WORKING)

    async def _move(
        self,
        task: Task,
        sources: frozenset[TaskState] | set[TaskState],
        target: TaskState,
        *,
        managed: bool | None = None,
        status_message: str | None = None,
        result: str | None = None,
    ) -> Task:
        """Move *task* to *target* if it is in one of *sources*; publish it.

        Raises:
            Conflict: it moved elsewhere meanwhile (closed: ``task_closed``).
        """

        def write(conn: Connection) -> Task:
            moved = repo.move(
                conn,
                task.task_id,
                from_states=sources,
                state=target,
                at=now_ms(),
                managed=managed,
                status_message=status_message,
                result=result,
            )
            now = repo.get_task(conn, task.task_id)
            if now is None:  # its room was deleted meanwhile
                raise _not_found()
            if not moved:
                if not now.open:
                    raise _closed(now)
                raise Conflict(
                    f"the task is {now.state.value} now: it cannot become {target.value}",
                    "invalid_transition",
                )
            outbox.emit(conn, TaskUpdated(now.room_id, task=now))
            return now

        return await self._db.write(write)

    @staticmethod
    def _require_agent(conn: Connection, agent_id: str) -> None:
        agent = accounts_repo.get_participant(conn, agent_id)
        if agent is None:
            raise NotFound("no such participant", "participant_not_found")
        if agent.kind != "bot":
            raise BadRequest("tasks are for bots: agentId names a person", "not_an_agent")

    @staticmethod
    def _check_via(via: str) -> None:
        if via not in VIA:
            raise ValueError(f"via must be one of {sorted(VIA)}")  # a caller's bug


def _readable(actor: Actor, room_id: str) -> bool:
    try:
        authorize(actor, "rooms.read", RoomRef(room_id))
    except Forbidden:
        return False
    return True


class TaskReconciler:
    """Applies :func:`reconcile` as messages arrive: the eager half of the
    reconciliation (module docstring). One process of the mesh runs it
    (``store/leases.py``: ``TASK_RECONCILER``).

    It watches the rooms that have open tasks their agents never updated
    (loaded when it starts, then from ``task_created`` events); a message
    in one of them marks the room, and the loop reconciles the marked
    rooms' tasks. Marks coalesce (a set of rooms, bounded by the rooms
    watched), so a busy room costs one check per pass, not one per message.
    """

    def __init__(self, db: Database, broker: Broker) -> None:
        self._db = db
        #: watched rooms -> how many tasks were created in each while watched
        #: (a room is dropped only if none was since its check began)
        self._watched: dict[str, int] = {}
        self._marked: set[str] = set()
        self._wake = trio.Event()
        self._running = False
        broker.observe(self._observed)

    def _observed(self, event: Event) -> None:
        if not self._running or event.room_id is None:
            return
        room_id = event.room_id
        if event.type == TaskCreated.type:
            self._watched[room_id] = self._watched.get(room_id, 0) + 1
        elif event.type != MessagePosted.type or room_id not in self._watched:
            return
        self._marked.add(room_id)
        self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Catch up on every room with open unmanaged tasks, report started,
        then reconcile rooms as their messages arrive, until cancelled.

        Cancellation: safe at any point; a unit of work cut short is rolled
        back, and the next run (or a read of the task) catches up."""
        self._running = True
        try:
            rooms = await retrying(
                "loading open tasks", lambda: self._db.read(repo.rooms_with_open_unmanaged)
            )
            for room_id in rooms:
                self._watched.setdefault(room_id, 0)
                self._marked.add(room_id)
            task_status.started()
            while True:
                if not self._marked:
                    self._wake = trio.Event()
                    await self._wake.wait()
                marked, self._marked = self._marked, set()
                for room_id in marked:
                    created = self._watched.get(room_id, 0)
                    left = await retrying("reconciling tasks", partial(self._check, room_id))
                    if not left and self._watched.get(room_id) == created:
                        self._watched.pop(room_id, None)
        finally:
            self._running = False
            self._watched.clear()
            self._marked.clear()

    async def _check(self, room_id: str) -> int:
        """Reconcile *room_id*'s open unmanaged tasks; how many stay so."""

        def read(conn: Connection) -> tuple[int, builtins.list[Task]]:
            one_snapshot(conn)  # as in get
            found = repo.open_unmanaged(conn, room_id)
            return len(found), [task for task in found if _due(conn, task)]

        count, due = await self._db.read(read)
        if not due:
            return count

        def write(conn: Connection) -> int:
            return sum(1 for task in due if reconcile(conn, task).open)

        return count - len(due) + await self._db.write(write)
