"""The mesh's tasks and messages as A2A 1.0 objects (the SDK's protobuf types).

A mesh task (``records.Task``, read here as its ``to_json()``) is an A2A
``Task``: the same id and context id, its state mapped one to one
(:data:`STATES`), the agent's last status text as the status message, the
request and the thread's replies as the history, and the agent's result as
the one artifact (``<taskId>-result``). Where the conversation lives in the
mesh (``roomId``, ``messageId``, ``agentId``) rides in the task's metadata,
so a caller can read it over REST too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

from ..records import Message as MeshMessage

__all__ = [
    "OPEN",
    "STATES",
    "TERMINAL",
    "artifact_event",
    "result_artifact",
    "status_event",
    "text_of",
    "to_a2a_message",
    "to_a2a_task",
]

#: the mesh's task states and A2A's, one to one
STATES: dict[str, TaskState] = {
    "submitted": TaskState.TASK_STATE_SUBMITTED,
    "working": TaskState.TASK_STATE_WORKING,
    "input-required": TaskState.TASK_STATE_INPUT_REQUIRED,
    "completed": TaskState.TASK_STATE_COMPLETED,
    "failed": TaskState.TASK_STATE_FAILED,
    "canceled": TaskState.TASK_STATE_CANCELED,
    "rejected": TaskState.TASK_STATE_REJECTED,
}
TERMINAL = frozenset({"completed", "failed", "canceled", "rejected"})
OPEN = frozenset({"submitted", "working", "input-required"})


def text_of(message: Message) -> str:
    """A message's text: its text parts joined by newlines (other parts are
    not accepted: the mesh carries text)."""
    return "\n".join(part.text for part in message.parts if part.HasField("text"))


def _metadata(values: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata without its empty values (a Struct field takes a dict)."""
    return {k: v for k, v in values.items() if v is not None}


def to_a2a_message(message: MeshMessage, task: Mapping[str, Any]) -> Message:
    """A mesh message of a task's conversation: the creator's are the
    user's, everyone else's (the agent's) the agent's."""
    role = Role.ROLE_USER if message.sender_id == task["creatorId"] else Role.ROLE_AGENT
    return Message(
        message_id=message.message_id,
        context_id=task["contextId"],
        task_id=task["taskId"],
        role=role,
        parts=[Part(text=message.content)],
        metadata=_metadata(
            {
                "roomId": message.room_id,
                "senderId": message.sender_id,
                "senderName": message.sender_name,
            }
        ),
    )


def _status(task: Mapping[str, Any]) -> TaskStatus:
    status = TaskStatus(state=STATES[task["state"]])
    if task.get("statusMessage"):
        status.message.CopyFrom(
            Message(
                message_id=f"{task['taskId']}-status-{task['updatedAt']}",
                context_id=task["contextId"],
                task_id=task["taskId"],
                role=Role.ROLE_AGENT,
                parts=[Part(text=task["statusMessage"])],
            )
        )
    if task.get("updatedAt"):
        status.timestamp.FromDatetime(datetime.fromisoformat(task["updatedAt"]))
    return status


def result_artifact(task: Mapping[str, Any]) -> Artifact | None:
    """The agent's answer as the task's artifact, once there is one."""
    if task.get("result") is None:
        return None
    return Artifact(
        artifact_id=f"{task['taskId']}-result",
        name="result",
        parts=[Part(text=task["result"])],
    )


def to_a2a_task(
    task: Mapping[str, Any],
    history: Iterable[MeshMessage] = (),
    *,
    history_length: int | None = None,
) -> Task:
    """A mesh task (its JSON) as an A2A task, with *history* (oldest first;
    only the last *history_length* when given)."""
    messages = [to_a2a_message(m, task) for m in history]
    if history_length is not None:
        messages = messages[-history_length:] if history_length > 0 else []
    a2a_task = Task(
        id=task["taskId"],
        context_id=task["contextId"],
        status=_status(task),
        history=messages,
        metadata=_metadata(
            {
                "roomId": task["roomId"],
                "messageId": task["messageId"],
                "agentId": task["agentId"],
                "title": task.get("title"),
            }
        ),
    )
    artifact = result_artifact(task)
    if artifact is not None:
        a2a_task.artifacts.append(artifact)
    return a2a_task


def status_event(task: Mapping[str, Any]) -> TaskStatusUpdateEvent:
    """A streamed change of the task's state."""
    return TaskStatusUpdateEvent(
        task_id=task["taskId"], context_id=task["contextId"], status=_status(task)
    )


def artifact_event(task: Mapping[str, Any], artifact: Artifact) -> TaskArtifactUpdateEvent:
    """The task's result, streamed once it is there."""
    return TaskArtifactUpdateEvent(
        task_id=task["taskId"],
        context_id=task["contextId"],
        artifact=artifact,
        last_chunk=True,
    )
