"""The model registry and the OpenAI-compatible proxy (spec §4.8).

``/api/models`` answers errors like every other endpoint (``{error, code}``);
``/api/models/v1/...`` answers them in OpenAI's shape
(``{"error": {"message", "type", "code"}}``) so OpenAI clients show them.
"""

from __future__ import annotations

import json
import math
from typing import Any

from quart import Blueprint, Response, request
from werkzeug.exceptions import HTTPException

from ..errors import MeshError, RateLimited
from ..services.authz import Actor
from ..services.model_proxy import OpenAIError, Stream
from ._common import body, caller, node, reply

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


@bp.get("/api/models")
async def list_models() -> tuple[Any, int]:
    actor = await caller()
    return reply(node().model_proxy.list_models(actor))


@bp.post("/api/models")
async def add_model() -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    model = await node().model_proxy.add_model(
        actor,
        name=fields.req_str("name"),
        base_url=fields.req_str("baseUrl"),
        upstream_model=fields.opt_str("upstreamModel"),
        api_key=fields.opt_str("apiKey"),
    )
    return reply(model.to_json(admin=True), 201)


@bp.delete("/api/models/<name>")
async def delete_model(name: str) -> tuple[Any, int]:
    actor = await caller()
    await node().model_proxy.delete_model(actor, name)
    return reply({"ok": True, "name": name})


@bp.get("/api/models/usage")
async def usage() -> tuple[Any, int]:
    actor = await caller()
    return reply(await node().model_proxy.usage(actor))


@bp.get("/api/models/v1/models")
async def openai_models() -> Response | tuple[Any, int]:
    try:
        actor = await caller()
        models = node().model_proxy.list_models(actor)
    except MeshError as error:
        return _openai_error(_from_mesh(error))
    data = [{"id": m["name"], "object": "model", "created": 0, "owned_by": "mesh"} for m in models]
    return reply({"object": "list", "data": data})


@bp.post("/api/models/v1/chat/completions")
async def chat_completions() -> Response | tuple[Any, int]:
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
