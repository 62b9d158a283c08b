"""The model registry and the OpenAI-compatible proxy (spec §4.8).

``/api/models`` answers errors like every other endpoint (``{error, code}``);
``/api/models/v1/...`` answers them in OpenAI's shape
(``{"error": {"message", "type", "code"}}``) so OpenAI clients show them.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

import msgspec
from quart import Blueprint, Response, request
from werkzeug.exceptions import HTTPException

from ..errors import MeshError, RateLimited
from ..services.authz import Actor
from ..services.model_proxy import OpenAIError, Stream
from ._common import body, caller, node, reply
from .contract import Body, Shape, accepts, answers, reads_body
from .objects import Ok, Timestamp

bp = Blueprint("models", __name__)

#: the proxy's paths take larger bodies (``max_completion_body_bytes``)
PROXY_PREFIX = "/api/models/v1/"
#: the header a caller puts its own upstream key in (forwarded, never stored)
UPSTREAM_KEY_HEADER = "X-Upstream-Api-Key"

_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


# -- the registry -------------------------------------------------------------


class NewModel(Body):
    #: 1-100 characters: letters, digits and . _ : -
    name: str
    #: the upstream's OpenAI-compatible base URL (``.../v1``)
    base_url: str
    #: the model's name upstream (default: ``name``)
    upstream_model: str | None = None
    #: the upstream's key (stored encrypted, never shown)
    api_key: str | None = None
    #: the lowest role that may use it (default: ``model_min_role``, ``agent``)
    min_role: str | None = None
    #: whether guests may use it (default: no)
    guests: bool | None = None


class ModelAccess(Body):
    """Who may use a model; a field left out keeps its value."""

    #: the lowest role that may use it (a built-in or custom role)
    min_role: str | None = None
    #: whether guests (anonymous visitors, role ``spectator``) may use it
    guests: bool | None = None


class BudgetChange(Body):
    """A budget: a whole number from 0 (no limit); ``null`` or left out
    inherits (a participant's from its role, a role's from the settings)."""

    requests_per_minute: int | None = None
    tokens_per_day: int | None = None


class StoredBudget(Shape):
    """A budget as stored (``null``: inherited)."""

    scope: Literal["role", "participant"]
    #: the role's name or the participant's id
    subject: str
    requests_per_minute: int | None
    tokens_per_day: int | None


class BudgetFigures(Shape):
    """A budget as it applies (0: no limit)."""

    requests_per_minute: int
    tokens_per_day: int


class StoredFigures(Shape):
    """A budget as stored (``null``: inherited)."""

    requests_per_minute: int | None
    tokens_per_day: int | None


class RoleBudget(Shape):
    role: str
    priority: int
    #: as stored; ``null``: ``inherited``
    requests_per_minute: int | None
    tokens_per_day: int | None
    #: the settings' budget for the role (``MESH_MODEL_ROLE_BUDGETS``, else the default)
    inherited: BudgetFigures


class ParticipantBudget(Shape):
    """One participant's use of models today against its budget."""

    participant_id: str
    name: str
    role: str
    #: requests and tokens today (UTC)
    requests: int
    tokens: int
    #: the budget that applies (its own, else its role's, else the default)
    budget: BudgetFigures
    #: its own budget as stored
    own: StoredFigures


class OwnBudget(Shape):
    """The caller's model budget (0: no limit) and its use today (UTC)."""

    requests_per_minute: int
    tokens_per_day: int
    requests_today: int
    tokens_today: int
    #: when the day's tokens renew (00:00 UTC)
    renews_at: Timestamp


class Budgets(Shape):
    """Model budgets and today's use against them."""

    #: the start of today (UTC), when daily budgets renewed
    day: Timestamp
    #: the settings' budget (``MESH_MODEL_REQUESTS_PER_MINUTE``, ``MESH_MODEL_TOKENS_PER_DAY``)
    defaults: BudgetFigures
    #: every role below the owner
    roles: list[RoleBudget]
    #: who used a model today, or has a budget of its own
    participants: list[ParticipantBudget]


class ModelView(Shape):
    """A model; where it goes only for those who manage models."""

    name: str
    streaming: bool
    #: config: from the settings (``MESH_MODELS``); api: added over the API
    source: Literal["config", "api"]
    created_at: Timestamp | None
    base_url: str | msgspec.UnsetType = msgspec.UNSET
    upstream_model: str | msgspec.UnsetType | None = msgspec.UNSET
    has_api_key: bool | msgspec.UnsetType = msgspec.UNSET
    min_role: str | msgspec.UnsetType = msgspec.UNSET
    guests: bool | msgspec.UnsetType = msgspec.UNSET


class ManagedModel(Shape):
    """A model and where it goes (its key is never shown)."""

    name: str
    streaming: bool
    source: Literal["config", "api"]
    created_at: Timestamp | None
    base_url: str
    upstream_model: str | None
    has_api_key: bool
    #: the lowest role that may use it
    min_role: str
    #: whether guests may use it
    guests: bool


class DeletedModel(Ok):
    name: str


class Usage(Shape):
    """One participant's use of one model."""

    participant_id: str
    model: str
    requests: int
    errors: int
    prompt_tokens: int
    completion_tokens: int
    updated_at: Timestamp


# -- OpenAI's shapes (snake_case, as OpenAI writes them) ----------------------


class OpenAIErrorDetail(Shape, rename=None):
    message: str
    type: str
    code: str | None
    #: the request parameter at fault, when one is
    param: str | msgspec.UnsetType = msgspec.UNSET


class OpenAIErrorBody(Shape, rename=None):
    """An error in OpenAI's shape (``/api/models/v1/...``)."""

    error: OpenAIErrorDetail


class OpenAIModel(Shape, rename=None):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class OpenAIModelList(Shape, rename=None):
    """The models the caller may use, in OpenAI's list-models shape."""

    object: Literal["list"]
    data: list[OpenAIModel]


class ChatRequest(msgspec.Struct):
    """OpenAI's chat-completions request: ``model`` is a model of this node's
    registry that the caller's role may use. ``messages`` are checked as
    OpenAI checks them, and ``n``, ``max_tokens`` and ``max_completion_tokens``
    against this node's caps, before anything is forwarded (400
    ``invalid_request_error`` naming the ``param``); over the caller's budget
    the answer is 429 ``rate_limit_exceeded`` or ``insufficient_quota``. Every
    other field (``temperature``, ``tools``, ...) is passed on to the upstream
    as it is."""

    model: str
    #: at least one message, checked as OpenAI checks them before anything is
    #: forwarded: an object with ``role`` (system, developer, user, assistant,
    #: tool, function) and ``content`` (a string or a list of parts), ...
    messages: list[dict[str, Any]]
    #: answer as server-sent events (``text/event-stream``)
    stream: bool = False
    #: choices to generate: at most this node's ``model_max_n`` (4)
    n: int | None = None
    #: at most this node's ``model_max_tokens`` (4096)
    max_tokens: int | None = None
    #: at most this node's ``model_max_tokens`` (4096)
    max_completion_tokens: int | None = None
    #: ``{"include_usage": true}``: a last chunk with the stream's usage
    stream_options: dict[str, Any] | None = None


class ChatCompletion(Shape, rename=None):
    """The upstream's answer, passed on as it is (a JSON object: OpenAI's
    chat completion)."""

    id: str | msgspec.UnsetType = msgspec.UNSET
    object: str | msgspec.UnsetType = msgspec.UNSET
    created: int | msgspec.UnsetType = msgspec.UNSET
    model: str | msgspec.UnsetType = msgspec.UNSET
    choices: list[dict[str, Any]] | msgspec.UnsetType = msgspec.UNSET
    usage: dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET


@bp.get("/api/models")
@answers(list[ModelView])
async def list_models() -> tuple[Any, int]:
    """The models of the registry (``baseUrl``... only for those who manage them)."""
    actor = await caller()
    return reply(node().model_proxy.list_models(actor))


@bp.post("/api/models")
@accepts(NewModel)
@answers(ManagedModel, 201)
async def add_model(data: NewModel) -> tuple[Any, int]:
    """Add a model to the registry (its key is stored encrypted)."""
    actor = await caller()
    model = await node().model_proxy.add_model(
        actor,
        name=data.name,
        base_url=data.base_url,
        upstream_model=data.upstream_model,
        api_key=data.api_key,
        min_role=data.min_role,
        guests=data.guests,
    )
    return reply(model.to_json(admin=True), 201)


@bp.patch("/api/models/<name>")
@accepts(ModelAccess)
@answers(ManagedModel)
async def change_model_access(name: str, data: ModelAccess) -> tuple[Any, int]:
    """Change who may use a model (configured or added); errors as every endpoint."""
    actor = await caller()
    model = await node().model_proxy.set_access(
        actor, name, min_role=data.min_role, guests=data.guests
    )
    return reply(model.to_json(admin=True))


@bp.get("/api/models/budget")
@answers(OwnBudget)
async def own_budget() -> tuple[Any, int]:
    """The caller's model budget and what it spent today."""
    actor = await caller()
    return reply(await node().model_proxy.own_budget(actor))


@bp.get("/api/models/budgets")
@answers(Budgets)
async def budgets() -> tuple[Any, int]:
    """The budgets per role and participant, and today's use against them."""
    actor = await caller()
    return reply(await node().model_proxy.budgets(actor))


@bp.put("/api/models/budgets/roles/<role>")
@accepts(BudgetChange)
@answers(StoredBudget)
async def set_role_budget(role: str, data: BudgetChange) -> tuple[Any, int]:
    """Set a role's model budget (for roles below one's own)."""
    actor = await caller()
    return reply(
        await node().model_proxy.set_budget(
            actor,
            "role",
            role,
            requests_per_minute=data.requests_per_minute,
            tokens_per_day=data.tokens_per_day,
        )
    )


@bp.put("/api/models/budgets/participants/<participant_id>")
@accepts(BudgetChange)
@answers(StoredBudget)
async def set_participant_budget(participant_id: str, data: BudgetChange) -> tuple[Any, int]:
    """Set one participant's model budget (for participants below one's own rank)."""
    actor = await caller()
    return reply(
        await node().model_proxy.set_budget(
            actor,
            "participant",
            participant_id,
            requests_per_minute=data.requests_per_minute,
            tokens_per_day=data.tokens_per_day,
        )
    )


@bp.delete("/api/models/<name>")
@answers(DeletedModel)
async def delete_model(name: str) -> tuple[Any, int]:
    """Remove a model added over the API."""
    actor = await caller()
    await node().model_proxy.delete_model(actor, name)
    return reply({"ok": True, "name": name})


@bp.get("/api/models/usage")
@answers(list[Usage])
async def usage() -> tuple[Any, int]:
    """Requests and tokens per participant and model."""
    actor = await caller()
    return reply(await node().model_proxy.usage(actor))


@bp.get("/api/models/v1/models")
@answers(OpenAIModelList)
@answers(OpenAIErrorBody, "4XX")
@answers(OpenAIErrorBody, "5XX")
async def openai_models() -> Response | tuple[Any, int]:
    """The models the caller may use (OpenAI's list models; errors in OpenAI's shape)."""
    try:
        actor = await caller()
        models = node().model_proxy.list_models(actor)
    except MeshError as error:
        return _openai_error(_from_mesh(error))
    data = [{"id": m["name"], "object": "model", "created": 0, "owned_by": "mesh"} for m in models]
    return reply({"object": "list", "data": data})


@bp.post("/api/models/v1/chat/completions")
@reads_body(ChatRequest)
@answers(ChatCompletion)
@answers(OpenAIErrorBody, "4XX")
@answers(OpenAIErrorBody, "5XX")
async def chat_completions() -> Response | tuple[Any, int]:
    """A chat completion from the model's upstream (OpenAI's API; errors in OpenAI's shape).

    With ``stream: true`` the 200 answer is not JSON but ``text/event-stream``:
    the upstream's server-sent events, relayed as they come (an error after
    the start is a last ``data:`` event in OpenAI's error shape). Errors the
    upstream answers (any 4XX) are passed on in OpenAI's shape; its 5XX as 502.
    The caller's own upstream key may be sent in ``X-Upstream-Api-Key``
    (forwarded, never stored).
    """
    try:
        actor = await caller()
        fields = await body()
        return await _complete(actor, fields.data)
    except OpenAIError as error:
        return _openai_error(error)
    except MeshError as error:
        return _openai_error(_from_mesh(error))
    except HTTPException as error:  # the body is too large
        status = error.code or 400
        message = "the request body is too large" if status == 413 else str(error.description)
        return _openai_error(
            OpenAIError(status, message, _OPENAI_TYPES.get(status, "api_error"), None)
        )


async def _complete(actor: Actor, data: dict[str, Any]) -> Response | tuple[Any, int]:
    key = request.headers.get(UPSTREAM_KEY_HEADER) or None
    result = await node().model_proxy.complete(actor, data, key)
    if not isinstance(result, Stream):
        return reply(result)
    response = Response(
        result.chunks,
        status=200,
        content_type=result.content_type,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
    response.timeout = None  # a long answer must not be cut at Quart's 60 s
    return response


def _from_mesh(error: MeshError) -> OpenAIError:
    status = error.status
    retry_after = None
    if isinstance(error, RateLimited):
        retry_after = str(max(1, math.ceil(error.retry_after)))
    kind = _OPENAI_TYPES.get(status, "api_error")
    return OpenAIError(status, error.message, kind, error.code, retry_after)


def _openai_error(error: OpenAIError) -> Response:
    response = Response(
        json.dumps(error.to_json()), status=error.status, content_type="application/json"
    )
    if error.status == 401:
        response.headers["WWW-Authenticate"] = "Bearer"
    if error.retry_after is not None:
        response.headers["Retry-After"] = error.retry_after
    return response
