"""The model registry and the OpenAI-compatible proxy (spec §4.8).

Models come from the settings (``MESH_MODELS``/``MESH_MODELS_FILE``, fixed for
the life of the process) and from ``POST /api/models`` (stored; their upstream
keys encrypted with a key derived from the node secret). The proxy forwards
``chat/completions`` to the model's upstream with the upstream key — the
model's, or one the caller supplies per request in ``X-Upstream-Api-Key``
(a managed bot's spawn key), which is forwarded and never stored. Streams are
relayed chunk by chunk as they arrive; a client that goes away cancels the
upstream request. Errors use OpenAI's shape so OpenAI clients show them.
Concurrency to each upstream is bounded; usage is counted per participant.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import math
import os
import re
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

import httpx
import trio
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy.engine import Connection

from ..config import ModelConfig, Settings
from ..errors import BadRequest, Conflict, Forbidden, NotFound, RateLimited
from ..records import iso, now_ms
from ..store import Database, outbox
from ..store import model_registry as repo
from .authz import Actor, authorize, permitted
from .ratelimit import RateLimiter

__all__ = ["Model", "ModelProxy", "OpenAIError", "Stream"]

log = logging.getLogger(__name__)

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,99}")
#: most bytes of an upstream error body read
_MAX_ERROR_BYTES = 64 * 1024
#: most bytes of a non-streamed upstream answer
_MAX_ANSWER_BYTES = 16 * 1024 * 1024


class OpenAIError(Exception):
    """An error in OpenAI's shape: ``{"error": {"message", "type", "code"}}``,
    plus ``param`` when one request parameter is at fault."""

    def __init__(
        self,
        status: int,
        message: str,
        type: str,
        code: str | None,
        retry_after: str | None = None,
        *,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.code = status, message, type, code
        #: the upstream's ``Retry-After`` (a 429 or 503 passed on)
        self.retry_after = retry_after
        self.param = param

    def to_json(self) -> dict[str, Any]:
        error = {"message": self.message, "type": self.type, "code": self.code}
        if self.param is not None:
            error["param"] = self.param
        return {"error": error}


@dataclass(frozen=True)
class Model:
    name: str
    base_url: str
    upstream_model: str | None
    api_key: str | None
    source: str  # config | api
    created_at: int | None = None

    def to_json(self, admin: bool) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "streaming": True,
            "source": self.source,
            "createdAt": iso(self.created_at),
        }
        if admin:  # where it goes is the operator's business; the key is nobody's
            data |= {
                "baseUrl": self.base_url,
                "upstreamModel": self.upstream_model,
                "hasApiKey": self.api_key is not None,
            }
        return data


@dataclass
class Stream:
    """An upstream stream that has answered 2xx: relay :meth:`chunks`."""

    chunks: AsyncIterator[bytes]
    content_type: str


class ModelProxy:
    """Runs in the node's nursery (:meth:`run`), which owns the HTTP client."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        secret: bytes,
        rate_limits: RateLimiter | None = None,
    ) -> None:
        self._settings = settings
        self._rate = rate_limits or RateLimiter(settings.rate_limits)
        self._db = db
        self._cipher = AESGCM(hashlib.sha256(b"quart-mesh model keys\0" + secret).digest())
        self._models: dict[str, Model] = {}
        self._limiters: dict[str, trio.CapacityLimiter] = {}
        self._client: httpx.AsyncClient | None = None
        self._nursery: trio.Nursery | None = None

    async def reload(self) -> None:
        """Read the models from the store and the settings (at start, and when
        another process added or removed one)."""
        stored = await self._db.read(repo.list_models)
        models: dict[str, Model] = {}
        for row in stored:
            key = self._decrypt(row.api_key) if row.api_key else None
            models[row.name] = Model(
                row.name, row.base_url, row.upstream_model, key, "api", row.created_at
            )
        for config in self._settings.models:
            models[config.name] = _from_config(config)
        self._models = models

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.reload()
        timeout = self._settings.model_timeout
        async with (
            httpx.AsyncClient(
                timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
                follow_redirects=False,
                trust_env=False,
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=32),
            ) as client,
            trio.open_nursery() as nursery,
        ):
            self._client = client
            self._nursery = nursery  # owns each stream's upstream reader
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._client = None
                self._nursery = None

    # registry ---------------------------------------------------------------

    def list_models(self, actor: Actor) -> list[dict[str, Any]]:
        authorize(actor, "models.use")
        admin = permitted(actor, "models.manage")  # where models go: for those who manage them
        return [m.to_json(admin) for m in sorted(self._models.values(), key=lambda m: m.name)]

    def get(self, name: Any) -> Model:
        """The model a request names.

        Raises:
            OpenAIError: 400 if *name* is missing or not a string (as OpenAI
                answers), 404 if no such model is configured.
        """
        if name is None:
            raise OpenAIError(
                400,
                "you must provide a model parameter",
                "invalid_request_error",
                "missing_required_parameter",
                param="model",
            )
        if not isinstance(name, str):
            raise OpenAIError(
                400,
                "model must be a string",
                "invalid_request_error",
                "invalid_type",
                param="model",
            )
        model = self._models.get(name)
        if model is None:
            raise OpenAIError(
                404,
                f"The model `{str(name)[:100]}` does not exist",
                "invalid_request_error",
                "model_not_found",
            )
        return model

    async def add_model(
        self,
        actor: Actor,
        *,
        name: str,
        base_url: str,
        upstream_model: str | None,
        api_key: str | None,
    ) -> Model:
        """Add a model (admin and above); its key is stored encrypted, never shown.

        Raises:
            Forbidden: not an admin.
            BadRequest: a bad name, URL, upstream model or key.
            Conflict: the name is taken.
        """
        authorize(actor, "models.manage")
        if not _NAME.fullmatch(name):
            raise BadRequest(
                "name must be 1-100 characters: letters, digits and . _ : -", "invalid_name"
            )
        _check_base_url(base_url)
        if upstream_model is not None and not 1 <= len(upstream_model) <= 200:
            raise BadRequest("upstreamModel must be 1-200 characters", "invalid_field")
        if api_key is not None and not 1 <= len(api_key) <= 4096:
            raise BadRequest("apiKey must be 1-4096 characters", "invalid_field")
        if name in self._models:
            raise Conflict(f"a model named {name} exists", "model_exists")
        row = repo.StoredModel(
            name,
            base_url.rstrip("/"),
            upstream_model,
            self._encrypt(api_key) if api_key else None,
            actor.participant_id,
            now_ms(),
        )

        def insert(conn: Connection) -> None:
            if not repo.insert_model(conn, row):
                raise Conflict(f"a model named {name} exists", "model_exists")
            outbox.change(conn, "invalidate", "models", name)

        await self._db.write(insert)
        model = Model(name, row.base_url, upstream_model, api_key, "api", row.created_at)
        self._models[name] = model
        return model

    async def delete_model(self, actor: Actor, name: str) -> None:
        """Remove a model added over the API (admin and above).

        Raises:
            Forbidden: not an admin.
            NotFound: no such model.
            Conflict: the model comes from the settings.
        """
        authorize(actor, "models.manage")
        model = self._models.get(name)
        if model is None:
            raise NotFound("no such model", "model_not_found")
        if model.source == "config":
            raise Conflict(
                "this model is configured at start-up (MESH_MODELS); change it there",
                "configured_model",
            )

        def delete(conn: Connection) -> None:
            repo.delete_model(conn, name)
            outbox.change(conn, "invalidate", "models", name)

        await self._db.write(delete)
        self._models.pop(name, None)

    async def usage(self, actor: Actor) -> list[dict[str, Any]]:
        """Usage per participant and model (admin and above)."""
        authorize(actor, "models.usage")
        return [
            {
                "participantId": row.participant_id,
                "model": row.model,
                "requests": row.requests,
                "errors": row.errors,
                "promptTokens": row.prompt_tokens,
                "completionTokens": row.completion_tokens,
                "updatedAt": iso(row.updated_at),
            }
            for row in await self._db.read(repo.list_usage)
        ]

    # the proxy --------------------------------------------------------------

    async def complete(
        self, actor: Actor, body: dict[str, Any], caller_key: str | None
    ) -> dict[str, Any] | Stream:
        """Forward one chat-completions request: the upstream's JSON answer, or
        a :class:`Stream` for ``stream: true``.

        Raises:
            OpenAIError: every failure, in OpenAI's shape.
        """
        try:
            authorize(actor, "models.use")
        except Forbidden as error:
            raise OpenAIError(403, error.message, "permission_error", error.code) from None
        try:
            self._rate.participant("models", actor)
        except RateLimited as error:
            wait = str(max(1, math.ceil(error.retry_after)))
            raise OpenAIError(429, error.message, "rate_limit_error", error.code, wait) from None
        model = self.get(body.get("model"))
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise OpenAIError(
                400, "messages must be a non-empty list", "invalid_request_error", "invalid_value"
            )
        if not all(isinstance(m, dict) for m in messages):
            raise OpenAIError(
                400, "each message must be an object", "invalid_request_error", "invalid_value"
            )
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise OpenAIError(
                400, "stream must be a boolean", "invalid_request_error", "invalid_value"
            )
        upstream_body = {**body, "model": model.upstream_model or model.name}
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = caller_key or model.api_key
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = self._http().build_request(
            "POST",
            model.base_url + "/chat/completions",
            content=json.dumps(upstream_body).encode(),
            headers=headers,
        )
        limiter = self._limiter(model)
        if stream:
            return await self._stream(actor, model, request, limiter)
        async with limiter:
            response = await self._send(actor, model, request, stream=False)
            try:
                raw = await _read(response, _MAX_ANSWER_BYTES)
            finally:
                await response.aclose()
        try:
            answer = json.loads(raw)
        except ValueError:
            await self._count(actor, model, error=True)
            raise OpenAIError(
                502,
                "the upstream answered with something that is not JSON",
                "api_error",
                "upstream_error",
            ) from None
        usage = answer.get("usage") if isinstance(answer, dict) else None
        await self._count(actor, model, usage=usage)
        if not isinstance(answer, dict):
            raise OpenAIError(502, "the upstream answer is not an object", "api_error", None)
        return answer

    async def _stream(
        self,
        actor: Actor,
        model: Model,
        request: httpx.Request,
        limiter: trio.CapacityLimiter,
    ) -> Stream:
        await limiter.acquire_on_behalf_of(request)
        try:
            response = await self._send(actor, model, request, stream=True)
        except BaseException:
            limiter.release_on_behalf_of(request)
            raise

        nursery = self._nursery
        if nursery is None:
            limiter.release_on_behalf_of(request)
            await response.aclose()
            raise OpenAIError(503, "the model proxy is not running", "api_error", None)
        # A reader task drains the upstream into a channel; the relay sends what
        # has arrived since its last send as one chunk, never waiting for more.
        # Relaying each upstream chunk on its own costs a full response write
        # apiece, so an upstream faster than the relay would make the node the
        # bottleneck (bench/bench_proxy.py).
        send_channel, receive_channel = trio.open_memory_channel[bytes | BaseException](256)
        reader = trio.CancelScope()

        async def read_upstream() -> None:
            with reader:
                async with send_channel:
                    try:
                        async with aclosing(_raw(response)) as raw:
                            async for chunk in raw:
                                await send_channel.send(chunk)
                    except httpx.HTTPError as exc:
                        with contextlib.suppress(trio.BrokenResourceError):
                            await send_channel.send(exc)
                    except trio.BrokenResourceError:
                        pass  # the client went away: the relay closed its end
                    except Exception as exc:  # never let one stream take the proxy down
                        log.exception("reading a model stream failed")
                        with contextlib.suppress(trio.BrokenResourceError):
                            await send_channel.send(exc)

        nursery.start_soon(read_upstream)

        async def chunks() -> AsyncIterator[bytes]:
            usage: Any = None
            failed = False
            try:
                async with receive_channel:
                    async for first in receive_channel:
                        batch = [first]
                        while not isinstance(batch[-1], BaseException):
                            try:
                                batch.append(receive_channel.receive_nowait())
                            except (trio.WouldBlock, trio.EndOfChannel):
                                break
                        last = batch[-1]
                        problem = last if isinstance(last, BaseException) else None
                        data = b"".join(c for c in batch if isinstance(c, bytes))
                        if b'"usage"' in data:
                            usage = _usage_in(data) or usage
                        if data:
                            yield data
                        if problem is not None:
                            failed = True
                            yield _stream_error(problem)
                            return
            finally:
                # a client that went away lands here cancelled: stopping the
                # reader and closing the response closes the upstream connection
                # (which cancels the upstream request)
                reader.cancel()
                with trio.CancelScope(shield=True):
                    await response.aclose()
                limiter.release_on_behalf_of(request)
                nursery.start_soon(self._count_quietly, actor, model, usage, failed)

        return Stream(chunks(), response.headers.get("content-type", "text/event-stream"))

    async def _count_quietly(self, actor: Actor, model: Model, usage: Any, failed: bool) -> None:
        try:
            await self._count(actor, model, usage=usage, error=failed)
        except Exception:  # the store is going away: counting is best effort
            log.warning("could not count model usage", exc_info=True)

    async def _send(
        self, actor: Actor, model: Model, request: httpx.Request, *, stream: bool
    ) -> httpx.Response:
        """Send *request*; a 2xx response (to read and close), or OpenAIError.

        ``model_timeout`` bounds everything up to the answer's head in total
        (resolving the name, connecting, sending): httpx's own timeouts apply
        to each step, so a slow trickle would otherwise never time out."""
        try:
            with trio.fail_after(self._settings.model_timeout):
                response = await self._http().send(request, stream=True)
        except (httpx.TimeoutException, trio.TooSlowError):
            await self._count(actor, model, error=True)
            raise OpenAIError(
                504,
                f"the upstream of {model.name} did not answer in time",
                "api_error",
                "upstream_timeout",
            ) from None
        except httpx.HTTPError as exc:
            await self._count(actor, model, error=True)
            log.warning("model %s: upstream unreachable: %s", model.name, exc)
            raise OpenAIError(
                502,
                f"the upstream of {model.name} is unreachable",
                "api_error",
                "upstream_unreachable",
            ) from None
        if response.is_success:
            return response
        try:
            raw = await _read(response, _MAX_ERROR_BYTES)
        except httpx.HTTPError:
            raw = b""
        finally:
            await response.aclose()
        await self._count(actor, model, error=True)
        message, kind, code = _upstream_error(raw, response.status_code)
        if response.status_code >= 500:
            raise OpenAIError(502, f"the upstream failed: {message}", "api_error", code)
        retry_after = response.headers.get("retry-after")
        if retry_after is not None and not (retry_after.isascii() and len(retry_after) <= 40):
            retry_after = None
        raise OpenAIError(response.status_code, message, kind, code, retry_after)

    async def _count(
        self, actor: Actor, model: Model, *, usage: Any = None, error: bool = False
    ) -> None:
        prompt = completion = 0
        if isinstance(usage, dict):
            prompt = _int(usage.get("prompt_tokens"))
            completion = _int(usage.get("completion_tokens"))
        at = now_ms()
        await self._db.write(
            lambda conn: repo.add_usage(
                conn,
                actor.participant_id,
                model.name,
                error=error,
                prompt_tokens=prompt,
                completion_tokens=completion,
                at=at,
            )
        )

    def _limiter(self, model: Model) -> trio.CapacityLimiter:
        upstream = urlsplit(model.base_url).netloc
        limiter = self._limiters.get(upstream)
        if limiter is None:
            limiter = self._limiters[upstream] = trio.CapacityLimiter(
                self._settings.model_concurrency
            )
        return limiter

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            raise OpenAIError(503, "the model proxy is not running", "api_error", None)
        return self._client

    def _encrypt(self, key: str) -> str:
        nonce = os.urandom(12)
        sealed = self._cipher.encrypt(nonce, key.encode(), b"model-key")
        return "v1:" + base64.b64encode(nonce + sealed).decode()

    def _decrypt(self, stored: str) -> str | None:
        try:
            raw = base64.b64decode(stored.removeprefix("v1:"))
            return self._cipher.decrypt(raw[:12], raw[12:], b"model-key").decode()
        except Exception:  # a key sealed under another secret: unusable, not fatal
            log.warning("a stored model key cannot be decrypted (was secret.key replaced?)")
            return None


def _from_config(config: ModelConfig) -> Model:
    return Model(config.name, config.base_url, config.upstream_model, config.api_key, "config")


def _check_base_url(url: str) -> None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise BadRequest("baseUrl must be an http(s) URL", "invalid_url") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or len(url) > 2000:
        raise BadRequest("baseUrl must be an http(s) URL", "invalid_url")


async def _read(response: httpx.Response, limit: int) -> bytes:
    raw = b""
    async with aclosing(_raw(response)) as chunks:
        async for chunk in chunks:
            raw += chunk
            if len(raw) > limit:
                raise OpenAIError(502, "the upstream answer is too large", "api_error", None)
    return raw


def _stream_error(problem: BaseException) -> bytes:
    """The SSE event that ends a stream the upstream broke off."""
    if isinstance(problem, httpx.TimeoutException):
        error = OpenAIError(504, "the upstream stopped sending", "api_error", "timeout")
    else:
        error = OpenAIError(502, f"the upstream stream broke: {problem}", "api_error", None)
    return b"data: " + json.dumps(error.to_json()).encode() + b"\n\n"


def _raw(response: httpx.Response) -> AsyncGenerator[bytes, None]:
    """The body's chunks as they arrive (an async generator: close it)."""
    return cast("AsyncGenerator[bytes, None]", response.aiter_raw())


def _upstream_error(raw: bytes, status: int) -> tuple[str, str, str | None]:
    """(message, type, code) from an upstream error body (OpenAI's shape or not)."""
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        kind = error.get("type") if isinstance(error.get("type"), str) else "invalid_request_error"
        code = error.get("code") if isinstance(error.get("code"), str) else None
        return error["message"][:2000], str(kind), code
    if isinstance(error, str):
        return error[:2000], "invalid_request_error", None
    text = raw.decode("utf-8", errors="replace").strip()[:500]
    return text or f"the upstream answered {status}", "invalid_request_error", None


def _usage_in(chunk: bytes) -> Any:
    for line in chunk.split(b"\n"):
        if line.startswith(b"data:") and b'"usage"' in line:
            try:
                usage = json.loads(line[5:]).get("usage")
            except (ValueError, AttributeError):
                continue
            if isinstance(usage, dict):
                return usage
    return None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and 0 <= value < 1 << 40 else 0
