"""A Trio-native A2A ``RequestHandler`` over the mesh's tasks (decision 0062).

The SDK's own handlers run the agent in-process on asyncio queues; the mesh's
agents are participants that answer in a conversation, so this handler only
translates: ``SendMessage`` is :meth:`Tasks.ask` (a DM between the caller and
the bot, or a reply in the task's thread), ``GetTask`` is :meth:`Tasks.get`
plus :meth:`Tasks.history`, ``CancelTask`` is :meth:`Tasks.cancel`, and the
streams follow the task through the caller's own feed
(:meth:`Delivery.follow`: only rooms it may read), reading the stored task
again whenever something happens in its room. Each re-read authenticates
the caller's token again (:class:`Caller`), so a sign-out, a deletion or a
role change since the request arrived takes effect at once; the feed
carries the token's id, so that signing it out ends the wait at once, as
it ends the token's long polls and WebSocket sessions. Every wait is bounded
(:data:`BLOCKING_SECONDS`, :data:`STREAM_SECONDS`), a re-read every
:data:`RECHECK_SECONDS` covers a lagging feed, and each wait holds one of the
caller's long-poll seats (``Seats``: ``max_polls_per_participant`` and
``..._per_address``), as a waiting ``POST /api/poll`` does.

Who calls is decided before the dispatcher runs (``routes.py``): the context
carries the authenticated :class:`Caller` and, on a bot's own interface,
that bot's id. The services decide everything else; their errors become A2A
errors with the service's message and code (:func:`a2a_error`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, cast

import trio
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from ..errors import (
    BadRequest,
    Conflict,
    Forbidden,
    MeshError,
    NotFound,
    Unauthorized,
    Unavailable,
)
from ..events import TaskUpdated
from ..ids import is_ulid, new_id
from ..services.delivery import refuse_if_access_ended
from .mapping import (
    STATES,
    TERMINAL,
    artifact_event,
    result_artifact,
    status_event,
    text_of,
    to_a2a_task,
)

if TYPE_CHECKING:
    from ..node import Node
    from ..services.authz import Actor
    from ..services.delivery import Feed

__all__ = [
    "BLOCKING_SECONDS",
    "MAX_LISTED",
    "RECHECK_SECONDS",
    "STREAM_SECONDS",
    "Caller",
    "MeshRequestHandler",
    "a2a_error",
]

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

#: longest a blocking SendMessage waits for the task to finish or ask back;
#: then it answers with the task as it is (the caller polls or subscribes)
BLOCKING_SECONDS = 60.0
#: longest one stream (SendStreamingMessage, SubscribeToTask) stays open;
#: the caller subscribes again to go on
STREAM_SECONDS = 600.0
#: the stored task is read again at least this often while waiting (a feed
#: that lagged, a change made by another process)
RECHECK_SECONDS = 5.0
#: events a waiting call's feed holds before it lags (then it re-reads)
FEED_CAPACITY = 64
#: the most history one GetTask returns
MAX_HISTORY = 200
#: the most of the caller's tasks one ListTasks reads (its filters apply
#: before the page is cut, so it reads them all: ``totalSize`` counts up to this)
MAX_LISTED = 5000
#: the most of a caller-given id an error message repeats
SHOWN_ID_CHARS = 64
#: states in which a sent message's wait ends (the agent has answered or asks back)
_SETTLED = TERMINAL | {"input-required"}


@dataclass(frozen=True, slots=True)
class Caller:
    """Who calls, as ``routes.py`` authenticated it before the dispatcher ran."""

    #: the participant as it was when the request arrived
    actor: Actor
    #: the token's id: its feeds carry it, so that signing it out ends them
    token_id: str
    #: the client's address (behind trusted proxies the forwarded one)
    address: str | None
    #: authenticate the request's token again: the participant as it is now
    #: (``Unauthorized`` once signed out, deleted, expired); keeps the token
    #: out of the handler's state and its logs
    authenticate: Callable[[], Awaitable[Actor]] = field(repr=False)


def _shown(value: str) -> str:
    """A caller-given id as an error message repeats it: bounded."""
    if len(value) <= SHOWN_ID_CHARS:
        return value
    return value[:SHOWN_ID_CHARS] + "…"


def a2a_error(error: MeshError, *, task: bool = False) -> A2AError:
    """A service's refusal as the A2A error a client understands, with the
    mesh's message and machine code (``data.code``). An unknown task (with
    *task*, any 404) is "task not found"; with *task* a closed task cannot
    be canceled."""
    data = {"code": error.code}
    if isinstance(error, NotFound) and (task or error.code == "task_not_found"):
        return TaskNotFoundError(message=error.message, data=data)
    if isinstance(error, Conflict) and error.code == "task_closed" and task:
        return TaskNotCancelableError(message=error.message, data=data)
    if isinstance(error, (BadRequest, NotFound, Conflict)):
        return InvalidParamsError(message=error.message, data=data)
    if isinstance(error, Forbidden):
        return InvalidRequestError(message=error.message, data=data)
    if isinstance(error, Unavailable):
        return InternalError(message=error.message, data=data)
    return InvalidRequestError(message=error.message, data=data)


@contextlib.contextmanager
def _translated(*, task: bool = False) -> Iterator[None]:
    """Service errors leave as A2A errors (the dispatcher renders those)."""
    try:
        yield
    except MeshError as error:
        raise a2a_error(error, task=task) from error


def _internals_hidden(method: F) -> F:
    """An unexpected error leaves as an A2A internal error naming a request
    id, logged with its traceback here, instead of its own text (the
    dispatcher would send ``str(error)``, which may hold internals)."""

    def internal(error: Exception) -> InternalError:
        request_id = new_id()
        log.error("unhandled error in A2A call %s", request_id, exc_info=error)
        return InternalError(message=f"internal error (request id {request_id})")

    if inspect.isasyncgenfunction(method):

        @functools.wraps(method)
        async def stream(*args: Any, **kwargs: Any) -> AsyncGenerator[Any]:
            try:
                async with contextlib.aclosing(method(*args, **kwargs)) as inner:
                    async for item in inner:
                        yield item
            except A2AError:
                raise
            except Exception as error:
                raise internal(error) from None

        return cast("F", stream)

    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return await method(*args, **kwargs)
        except A2AError:
            raise
        except Exception as error:
            raise internal(error) from None

    return cast("F", call)


def _unsupported(what: str) -> NoReturn:
    raise PushNotificationNotSupportedError(
        message=f"{what}: this node does not send push notifications; stream or poll instead"
    )


class MeshRequestHandler(RequestHandler):
    """The mesh's agents behind the SDK's JSON-RPC dispatcher.

    Args:
        node: returns the open node (the app opens it when it is served).
    """

    def __init__(self, node: Callable[[], Node]) -> None:
        self._node = node

    # who ---------------------------------------------------------------------

    @staticmethod
    def _caller(context: ServerCallContext) -> Caller:
        caller: Caller | None = context.state.get("mesh_caller")
        if caller is None:  # routes.py authenticates every call first
            raise InvalidRequestError(message="a bearer token is required")
        return caller

    def _actor(self, context: ServerCallContext) -> Actor:
        """The caller as it was when the request arrived (enough for a call
        that does not wait)."""
        return self._caller(context).actor

    async def _actor_now(self, context: ServerCallContext) -> Actor:
        """The caller as it is now: its token authenticated again.

        Raises:
            InvalidRequestError: the token was signed out, or its
                participant deleted, since the request arrived.
        """
        with _translated():
            return await self._caller(context).authenticate()

    async def _follow(self, context: ServerCallContext) -> Feed:
        """The caller's feed for a wait, ended by a sign-out of its token."""
        return await self._node().delivery.follow(
            self._actor(context), capacity=FEED_CAPACITY, token_id=self._caller(context).token_id
        )

    @contextlib.contextmanager
    def _seat(self, context: ServerCallContext) -> Iterator[None]:
        """A long-poll seat of the caller's for the block (a wait or a stream).

        Raises:
            InvalidRequestError: the caller (``too_many_polls``) or its
                address holds as many as allowed.
        """
        caller = self._caller(context)
        with (
            _translated(),
            self._node().seats.hold("poll", caller.actor.participant_id, caller.address),
        ):
            yield

    async def _agent_of(self, context: ServerCallContext, params: SendMessageRequest) -> str:
        """The bot a message is for: the interface's own; on the node's
        interface the one named in the message's (or the request's) metadata
        as ``agentId`` (or ``skillId``: the node card's skill ids are the
        bots' ids), else the agent of the task a follow-up names (as the
        caller sees it: one it cannot see stays unknown), else the node's
        only A2A agent if it has just one.

        Raises:
            TaskNotFoundError: the follow-up's task is not the caller's to see.
            InvalidParamsError: no bot named, and the node has several.
        """
        agent_id: str | None = context.state.get("mesh_agent_id")
        if agent_id:
            return agent_id
        for metadata in (params.message.metadata, params.metadata):
            for key in ("agentId", "skillId"):
                named = metadata.fields.get(key)
                if named is not None and named.string_value:
                    return str(named.string_value)
        node = self._node()
        if params.message.task_id:
            with _translated(task=True):
                task = await node.tasks.get(self._actor(context), params.message.task_id)
            return task.agent_id
        with _translated():
            agents = await node.agents.a2a_agents()
        if len(agents) == 1:
            return agents[0].agent_id
        raise InvalidParamsError(
            message="name the bot: message.metadata.agentId (a skill id of the node's card), "
            "or send to the bot's own interface at /a2a/agents/<agentId>",
            data={"code": "missing_agent"},
        )

    async def _visible_task(
        self, context: ServerCallContext, task_id: str, actor: Actor | None = None
    ) -> dict[str, Any]:
        """The task as the caller (*actor*: as it is now) sees it, reconciled
        first: on a bot's own interface, only that bot's tasks."""
        node = self._node()
        actor = actor or self._actor(context)
        with _translated(task=True):
            task: dict[str, Any] = (await node.tasks.get(actor, task_id)).to_json()
        agent_id = context.state.get("mesh_agent_id")
        if agent_id and task["agentId"] != agent_id:
            raise TaskNotFoundError(message="no such task for this agent")
        return task

    async def _a2a_task(
        self,
        actor: Actor,
        task: dict[str, Any],
        history_length: int | None = None,
    ) -> Task:
        limit = MAX_HISTORY if history_length is None else min(history_length, MAX_HISTORY)
        if limit <= 0:
            return to_a2a_task(task, (), history_length=0)
        with _translated(task=True):
            history = await self._node().tasks.history(actor, task["taskId"])
        return to_a2a_task(task, history, history_length=limit)

    # sending -----------------------------------------------------------------

    async def _ask(self, params: SendMessageRequest, context: ServerCallContext) -> dict[str, Any]:
        actor = self._actor(context)
        agent_id = await self._agent_of(context, params)
        content = text_of(params.message)
        if not content.strip():
            raise InvalidParamsError(
                message="the message needs a text part (the mesh carries text)",
                data={"code": "empty_message"},
            )
        node = self._node()
        if not await node.agents.a2a_enabled(agent_id):
            raise InvalidParamsError(
                message=f"no such A2A agent: {_shown(agent_id)}",
                data={"code": "agent_not_found"},
            )
        with _translated():
            task = await node.tasks.ask(
                actor,
                agent_id=agent_id,
                content=content,
                task_id=params.message.task_id or None,
                context_id=params.message.context_id or None,
                via="a2a",
            )
        return dict(task.to_json())

    @_internals_hidden
    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        """Ask the bot (a new task, or a follow-up of the caller's open one)
        and, unless the caller asked to return at once, wait up to
        :data:`BLOCKING_SECONDS` for it to finish or ask back.

        The wait ends with an error when the caller's access does (a
        sign-out, a role that may no longer read the task).

        Cancellation: safe; the task stays asked (the caller can GetTask it)."""
        actor = self._actor(context)
        if params.configuration.return_immediately:
            task = await self._ask(params, context)
        else:
            with self._seat(context):
                task = await self._ask(params, context)
                deadline = trio.current_time() + BLOCKING_SECONDS
                with await self._follow(context) as feed:
                    task = await self._reread(context, feed, task)
                    while task["state"] not in _SETTLED:
                        changed = await self._next_change(context, feed, task, deadline)
                        if changed is None:
                            break
                        task = changed
                actor = await self._actor_now(context)
        history_length = (
            params.configuration.history_length
            if params.configuration.HasField("history_length")
            else None
        )
        return await self._a2a_task(actor, task, history_length)

    @_internals_hidden
    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """Ask the bot, then stream the task: the task first, then each
        change of state (and the result as an artifact) until it finishes or
        asks back, or :data:`STREAM_SECONDS` pass. It ends with an error
        when the caller's access does (a sign-out, a role that may no
        longer read the task)."""
        with self._seat(context):
            task = await self._ask(params, context)
            async for event in self._stream(context, task, until=_SETTLED):
                yield event

    @_internals_hidden
    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """Follow a stored task (after a node restart too): the task as it
        is, then its changes until it finishes (or :data:`STREAM_SECONDS`).
        A finished task has nothing to follow: read it with GetTask."""
        task = await self._visible_task(context, params.id)
        if task["state"] in TERMINAL:
            raise UnsupportedOperationError(
                message=f"task {params.id} is {task['state']}: read it with GetTask",
                data={"code": "task_closed"},
            )
        with self._seat(context):
            async for event in self._stream(context, task, until=TERMINAL):
                yield event

    async def _stream(
        self, context: ServerCallContext, task: dict[str, Any], *, until: frozenset[str]
    ) -> AsyncGenerator[Event]:
        """The task, then its changes. The result is sent as an artifact
        each time it changes (a draft, then the final one): the same
        artifact id, not appended, so a client's copy is replaced."""
        # no yield inside a cancel scope or nursery: every wait is scoped
        # inside _next_change, between the yields
        deadline = trio.current_time() + STREAM_SECONDS
        # each change the feed carries, in order: two quick updates are two
        # status events, not the later one alone (a re-read would merge them)
        changes: deque[dict[str, Any]] = deque()
        with await self._follow(context) as feed:
            yield await self._a2a_task(self._actor(context), task)
            sent_result = task.get("result")
            current: dict[str, Any] | None = await self._reread(context, feed, task)
            while current is not None:
                if current != task:
                    artifact = result_artifact(current)
                    if artifact is not None and current["result"] != sent_result:
                        sent_result = current["result"]
                        yield artifact_event(current, artifact)
                    if current["state"] != task["state"] or current.get(
                        "statusMessage"
                    ) != task.get("statusMessage"):
                        yield status_event(current)
                    task = current
                if task["state"] in until:
                    return
                current = await self._next_change(context, feed, task, deadline, changes)

    async def _reread(
        self, context: ServerCallContext, feed: Feed, task: dict[str, Any]
    ) -> dict[str, Any]:
        """The stored task as the caller, as it is now, sees it.

        Raises:
            InvalidRequestError: the caller's token was signed out, or its
                participant deleted.
            TaskNotFoundError: the caller may no longer read the task.
        """
        try:
            refuse_if_access_ended(feed.sub)
        except Unauthorized as refused:
            raise a2a_error(refused) from None
        actor = await self._actor_now(context)
        return await self._visible_task(context, task["taskId"], actor)

    async def _next_change(
        self,
        context: ServerCallContext,
        feed: Feed,
        task: dict[str, Any],
        deadline: float,
        changes: deque[dict[str, Any]] | None = None,
    ) -> dict[str, Any] | None:
        """Wait for the stored task to differ from *task*; None at *deadline*.

        Wakes on any event of the task's room in the caller's feed (a reply
        there may complete the task: ``Tasks.get`` reconciles; the room
        hidden from the caller), when the feed ends because the caller's
        access did (then :meth:`_reread` raises), and every
        :data:`RECHECK_SECONDS` regardless.

        With *changes* (a stream's), the task's ``task_updated`` events are
        kept there and given one at a time, oldest first, each after the
        caller's access is checked again: a stream shows every change, where
        a re-read alone would show only the latest of two quick ones. A
        change no newer than *task* (one the first read already saw) is
        passed over. Cancellation: safe."""
        room_id = task["roomId"]
        while True:
            while changes:
                change = changes.popleft()
                if _newer(change, task):
                    await self._reread(context, feed, task)  # may the caller still?
                    return change
            if trio.current_time() >= deadline:
                return None
            with trio.move_on_at(min(deadline, trio.current_time() + RECHECK_SECONDS)):
                while True:
                    ending = feed.sub.ending
                    if ending is not None and ending.access_ended:
                        break
                    if ending is not None:
                        await trio.sleep_forever()  # lagged: the re-reads go on
                    batch = await feed.sub.get_batch()
                    if changes is not None:
                        changes.extend(
                            event.task.to_json()
                            for event, _ in batch
                            if isinstance(event, TaskUpdated)
                            and event.task.task_id == task["taskId"]
                        )
                    if any(getattr(event, "room_id", None) == room_id for event, _ in batch):
                        break
            if changes and any(_newer(change, task) for change in changes):
                continue
            fresh = await self._reread(context, feed, task)
            if fresh != task:
                return fresh

    # reading and cancelling ------------------------------------------------

    @_internals_hidden
    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        task = await self._visible_task(context, params.id)
        history_length = params.history_length if params.HasField("history_length") else None
        return await self._a2a_task(self._actor(context), task, history_length)

    @_internals_hidden
    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        await self._visible_task(context, params.id)
        actor = self._actor(context)
        with _translated(task=True):
            task = (await self._node().tasks.cancel(actor, params.id)).to_json()
        return await self._a2a_task(actor, task)

    @_internals_hidden
    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        """The caller's tasks (those it asked, or does), newest first; on a
        bot's interface only that bot's; pages of up to 100.

        The filters (context, status) apply before the page is cut, so
        ``totalSize`` counts every task that matches and a next page token
        comes only when more match: the page token is the last task id of
        the page before (the tasks service pages by task id, newest first).
        """
        actor = self._actor(context)
        page_size = min(params.page_size, 100) if params.page_size > 0 else 50
        token = params.page_token or None
        if token is not None and not is_ulid(token):
            raise InvalidParamsError(
                message="pageToken must be a nextPageToken of ListTasks",
                data={"code": "invalid_cursor"},
            )
        agent_id = context.state.get("mesh_agent_id")
        matching = [
            task
            for task in await self._all_tasks(actor)
            if (not agent_id or task["agentId"] == agent_id)
            and (not params.context_id or task["contextId"] == params.context_id)
            and (not params.status or STATES[task["state"]] == params.status)
        ]
        after = [task for task in matching if token is None or task["taskId"] < token]
        page = after[:page_size]
        history_length = params.history_length if params.HasField("history_length") else 0
        response = ListTasksResponse(page_size=page_size, total_size=len(matching))
        for task in page:
            response.tasks.append(await self._a2a_task(actor, task, history_length))
        if len(after) > page_size:
            response.next_page_token = page[-1]["taskId"]
        return response

    async def _all_tasks(self, actor: Actor) -> list[dict[str, Any]]:
        """The caller's tasks, newest first: up to :data:`MAX_LISTED`, read
        from the tasks service a page at a time."""
        node = self._node()
        limit = node.settings.limits.max_page_size
        found: list[dict[str, Any]] = []
        before: str | None = None
        while len(found) < MAX_LISTED:
            with _translated():
                tasks = await node.tasks.list(actor, limit=limit, before=before)
            if not tasks:  # a page may be short of tasks the caller cannot read
                break
            found.extend(task.to_json() for task in tasks)
            before = tasks[-1].task_id
        return found[:MAX_LISTED]

    # not offered -------------------------------------------------------------

    @_internals_hidden
    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        _unsupported("CreateTaskPushNotificationConfig")

    @_internals_hidden
    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        _unsupported("GetTaskPushNotificationConfig")

    @_internals_hidden
    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        _unsupported("ListTaskPushNotificationConfigs")

    @_internals_hidden
    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        _unsupported("DeleteTaskPushNotificationConfig")

    @_internals_hidden
    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise UnsupportedOperationError(
            message="no extended card: the public card is the whole card"
        )


def _newer(change: dict[str, Any], task: dict[str, Any]) -> bool:
    """Whether *change* (a ``task_updated`` event's task) comes after *task*
    (the last one a stream gave): a later ``updatedAt``; or the same
    millisecond, a different task, and *task* not finished (nothing follows
    a finished task)."""
    if change["updatedAt"] != task["updatedAt"]:
        return bool(change["updatedAt"] > task["updatedAt"])
    return change != task and task["state"] not in TERMINAL
