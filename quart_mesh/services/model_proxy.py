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

The owner decides who spends (decision 0053): each model has a lowest role
that may use it (and whether guests may), and every participant below the
owner has a budget — requests per minute and tokens per UTC day, from its
own budget, else its role's, else the settings. A body is checked as OpenAI
checks it, and against the node's caps, before anything is forwarded.
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
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
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
from ..permissions import OWNER
from ..records import iso, now_ms
from ..store import Database, outbox
from ..store import accounts as accounts_repo
from ..store import limits as limits_repo
from ..store import model_registry as repo
from .authz import Actor, authorize, authorize_above, permitted
from .model_rules import Invalid, check_body
from .outbound import tls_context
from .ratelimit import RateLimiter

__all__ = ["RESERVED_NAMES", "Budget", "Model", "ModelProxy", "OpenAIError", "Stream"]

log = logging.getLogger(__name__)

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,99}")
#: not a model's name: the REST API's own paths beside /api/models/<name>
#: (GET /api/models/usage, ...) own those paths, so a model of that name
#: could be neither changed nor removed there
RESERVED_NAMES = frozenset({"budget", "budgets", "usage"})
#: most bytes of an upstream error body read
_MAX_ERROR_BYTES = 64 * 1024
#: most bytes of a non-streamed upstream answer
_MAX_ANSWER_BYTES = 16 * 1024 * 1024
#: the rate-counter rule of per-minute model budgets (store/limits.py)
_MINUTE_RULE = "model_budget"
#: the largest budget figure accepted
_MOST = 1 << 40
_DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class Budget:
    """A participant's budget as it applies: 0 is no limit."""

    requests_per_minute: int
    tokens_per_day: int

    def to_json(self) -> dict[str, int]:
        return {
            "requestsPerMinute": self.requests_per_minute,
            "tokensPerDay": self.tokens_per_day,
        }


#: a plain (not streamed) answer may take this many ``model_timeout`` in all
_ANSWER_TIMEOUTS = 10


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
    #: the lowest role that may use it (a stored choice wins over the settings)
    min_role: str = "agent"
    #: whether guests may use it
    guests: bool = False

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
                "minRole": self.min_role,
                "guests": self.guests,
            }
        return data

    def usable_by(self, actor: Actor) -> bool:
        """Whether *actor*'s role (and kind) may use this model."""
        if actor.kind == "guest" and not self.guests:
            return False
        if actor.policy.role(actor.role) is None:
            return False
        lowest = actor.policy.role(self.min_role)
        # a lowest role that was deleted: only the owner
        floor = lowest.priority if lowest is not None else OWNER
        return actor.priority >= floor


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
        #: (scope, subject) -> the stored budget (decision 0053)
        self._budgets: dict[tuple[str, str], repo.Budget] = {}
        self._limiters: dict[str, trio.CapacityLimiter] = {}
        #: participant id -> its model requests running (``model_max_concurrent``)
        self._running: dict[str, int] = {}
        self._client: httpx.AsyncClient | None = None
        self._nursery: trio.Nursery | None = None

    async def reload(self) -> None:
        """Read the models from the store and the settings (at start, and when
        another process added or removed one)."""

        def load(
            conn: Connection,
        ) -> tuple[list[repo.StoredModel], list[repo.Access], list[repo.Budget]]:
            return repo.list_models(conn), repo.list_access(conn), repo.list_budgets(conn)

        stored, access, budgets = await self._db.read(load)
        default_role = self._settings.model_min_role
        models: dict[str, Model] = {}
        for row in stored:
            key = self._decrypt(row.api_key) if row.api_key else None
            models[row.name] = Model(
                row.name,
                row.base_url,
                row.upstream_model,
                key,
                "api",
                row.created_at,
                default_role,
            )
        for config in self._settings.models:
            models[config.name] = _from_config(config, default_role)
        for choice in access:
            model = models.get(choice.name)
            if model is not None:
                models[choice.name] = _with_access(model, choice)
        self._models = models
        self._budgets = {(b.scope, b.subject): b for b in budgets}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read the models (:meth:`reload`), open the HTTP client for the
        upstreams and the nursery that owns streams' upstream readers,
        report started, and serve until cancelled: the node runs it in its
        nursery. Until it has started, and once it ends, requests that would
        reach an upstream are refused (503 ``api_error``, in OpenAI's shape).

        Cancellation: how it stops; the client closes, and the streams still
        relaying end with it.

        Raises:
            Unavailable: the store could not be read at start.
        """
        await self.reload()
        timeout = self._settings.model_timeout
        async with (
            httpx.AsyncClient(
                timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
                follow_redirects=False,
                trust_env=False,
                verify=tls_context(),
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
        """The models *actor* may use (every model for those who manage them)."""
        authorize(actor, "models.use")
        admin = permitted(actor, "models.manage")  # where models go: for those who manage them
        return [
            m.to_json(admin)
            for m in sorted(self._models.values(), key=lambda m: m.name)
            if admin or m.usable_by(actor)
        ]

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
        min_role: str | None = None,
        guests: bool | None = None,
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
        if name in RESERVED_NAMES:
            raise BadRequest(
                f"{name} is reserved (it names a path of the API): choose another name",
                "invalid_name",
            )
        _check_base_url(base_url)
        if upstream_model is not None and not 1 <= len(upstream_model) <= 200:
            raise BadRequest("upstreamModel must be 1-200 characters", "invalid_field")
        if api_key is not None and not 1 <= len(api_key) <= 4096:
            raise BadRequest("apiKey must be 1-4096 characters", "invalid_field")
        if name in self._models:
            raise Conflict(f"a model named {name} exists", "model_exists")
        _check_min_role(actor, min_role)
        access = repo.Access(name, min_role, guests)
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
            repo.delete_access(conn, name)  # a choice left by a removed model of that name
            if min_role is not None or guests is not None:
                repo.put_access(conn, access, at=row.created_at)
            outbox.change(conn, outbox.Invalidate("models", name))

        await self._db.write(insert)
        model = Model(
            name,
            row.base_url,
            upstream_model,
            api_key,
            "api",
            row.created_at,
            self._settings.model_min_role,
        )
        model = self._models[name] = _with_access(model, access)
        return model

    async def set_access(
        self, actor: Actor, name: str, *, min_role: str | None, guests: bool | None
    ) -> Model:
        """Change who may use a model, configured or added (admin and above);
        a field left ``None`` keeps its value.

        Raises:
            Forbidden: not an admin.
            NotFound: no such model.
            BadRequest: no such role (``invalid_role``).
        """
        authorize(actor, "models.manage")
        model = self._models.get(name)
        if model is None:
            raise NotFound("no such model", "model_not_found")
        _check_min_role(actor, min_role)
        access = repo.Access(
            name,
            min_role if min_role is not None else model.min_role,
            guests if guests is not None else model.guests,
        )

        def put(conn: Connection) -> None:
            repo.put_access(conn, access, at=now_ms())
            outbox.change(conn, outbox.Invalidate("models", name))

        await self._db.write(put)
        model = self._models[name] = _with_access(model, access)
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
            repo.delete_access(conn, name)
            outbox.change(conn, outbox.Invalidate("models", name))

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
            # as a request over the minute's budget: one answer for "too many"
            raise OpenAIError(
                429, error.message, "rate_limit_exceeded", "rate_limit_exceeded", wait
            ) from None
        model = self.get(body.get("model"))
        if not model.usable_by(actor):
            # as OpenAI answers a model one's key may not use: nothing tells
            # a caller kept out which models exist
            raise OpenAIError(
                404,
                f"The model `{model.name}` does not exist or you do not have access to it.",
                "invalid_request_error",
                "model_not_found",
            )
        settings = self._settings
        try:
            check_body(body, max_n=settings.model_max_n, max_tokens=settings.model_max_tokens)
        except Invalid as error:
            raise OpenAIError(
                400, error.message, "invalid_request_error", error.code, param=error.param
            ) from None
        held = self._hold(actor)  # refused at once, before the minute's budget is spent
        try:
            await self._spend(actor)
            return await self._forward(actor, model, body, caller_key, held)
        except BaseException:
            held()
            raise

    def _hold(self, actor: Actor) -> Callable[[], None]:
        """Count a request of *actor* running; the function that ends it
        (once). The owner is not counted.

        Raises:
            OpenAIError: 429 ``rate_limit_exceeded``, *actor* has
                ``model_max_concurrent`` requests running already.
        """
        participant_id = actor.participant_id
        if actor.priority >= OWNER:  # as budgets: the owner is not limited
            return lambda: None
        running = self._running.get(participant_id, 0)
        if running >= self._settings.model_max_concurrent:
            raise OpenAIError(
                429,
                f"you have {running} model requests running: wait for one to end",
                "rate_limit_exceeded",
                "rate_limit_exceeded",
                "1",
            )
        self._running[participant_id] = running + 1
        done = False

        def release() -> None:
            nonlocal done
            if done:
                return
            done = True
            left = self._running.get(participant_id, 1) - 1
            if left > 0:
                self._running[participant_id] = left
            else:
                self._running.pop(participant_id, None)

        return release

    async def _forward(
        self,
        actor: Actor,
        model: Model,
        body: dict[str, Any],
        caller_key: str | None,
        held: Callable[[], None],
    ) -> dict[str, Any] | Stream:
        """:meth:`complete` once the request is allowed: send it upstream.
        *held* ends the request's count (by the stream's end, for a stream)."""
        stream = body.get("stream") is True
        upstream_body = {**body, "model": model.upstream_model or model.name}
        options = body.get("stream_options") or {}
        # a stream's usage comes only when asked for: ask, and keep the extra
        # usage-only chunk from a client that did not ask for it
        strip_usage = stream and options.get("include_usage") is not True
        if strip_usage:
            upstream_body["stream_options"] = {**options, "include_usage": True}
        content = json.dumps(upstream_body).encode()
        estimate = _estimate(len(content))
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = caller_key or model.api_key
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = self._http().build_request(
            "POST",
            model.base_url + "/chat/completions",
            content=content,
            headers=headers,
        )
        limiter = self._limiter(model)
        if stream:
            return await self._stream(actor, model, request, limiter, estimate, strip_usage, held)
        try:
            return await self._answer(actor, model, request, limiter, estimate)
        finally:
            held()

    async def _answer(
        self,
        actor: Actor,
        model: Model,
        request: httpx.Request,
        limiter: trio.CapacityLimiter,
        estimate: int,
    ) -> dict[str, Any]:
        """A non-streamed request: the upstream's JSON answer, counted."""
        async with self._slot(limiter, request):
            response = await self._send(actor, model, request, stream=False)
            try:
                # one deadline for the whole answer (httpx's is per read: a
                # trickle would hold the slot for ever), long enough for a
                # slow model's longest answer
                with trio.fail_after(self._settings.model_timeout * _ANSWER_TIMEOUTS):
                    raw = await _read(response, _MAX_ANSWER_BYTES)
            except (httpx.TimeoutException, trio.TooSlowError):
                # the upstream stalled in its answer: it may have spent tokens
                await self._count(actor, model, error=True, estimate=estimate)
                raise OpenAIError(
                    504, "the upstream stopped answering", "api_error", "upstream_timeout"
                ) from None
            except httpx.HTTPError:
                await self._count(actor, model, error=True, estimate=estimate)
                raise OpenAIError(
                    502, "the upstream broke off its answer", "api_error", "upstream_error"
                ) from None
            except OpenAIError:
                await self._count(actor, model, error=True, estimate=estimate)
                raise
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
        await self._count(actor, model, usage=usage, estimate=estimate + _estimate(len(raw)))
        if not isinstance(answer, dict):
            raise OpenAIError(502, "the upstream answer is not an object", "api_error", None)
        return answer

    async def _stream(
        self,
        actor: Actor,
        model: Model,
        request: httpx.Request,
        limiter: trio.CapacityLimiter,
        estimate: int,
        strip_usage: bool,
        held: Callable[[], None],
    ) -> Stream:
        await self._acquire(limiter, request)
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
        #: the relay began: from then on its ``finally`` ends the stream
        relaying = trio.Event()
        ended = False

        async def end(usage: Any, failed: bool, relayed: int) -> None:
            """Free what the stream holds and count it, once: from the relay's
            end, or from the watchdog when the relay never began (the client
            went away before the body was sent: the generator never ran, and
            a generator's ``finally`` runs only if it started)."""
            nonlocal ended
            if ended:
                return
            ended = True
            held()
            reader.cancel()
            try:
                with trio.CancelScope(shield=True):
                    await response.aclose()
            finally:  # the slot and the count, whatever closing did
                limiter.release_on_behalf_of(request)
                # what was relayed was spent, even if the stream failed afterwards
                spent = estimate + _estimate(relayed) if relayed or not failed else 0
                nursery.start_soon(self._count_quietly, actor, model, usage, failed, spent)

        async def watchdog() -> None:
            with trio.move_on_after(self._settings.model_timeout):
                await relaying.wait()
                return
            await end(None, True, 0)

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
        nursery.start_soon(watchdog)

        async def chunks() -> AsyncIterator[bytes]:
            relaying.set()
            usage: Any = None
            failed = False
            relayed = 0
            held = b""  # an event not yet complete (only while stripping)
            tail = b""  # a line not yet complete (for usage)
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
                        relayed += len(data)
                        # usage is read from whole lines (a chunk may end mid-line)
                        scan = tail + data
                        cut = scan.rfind(b"\n") + 1
                        if b'"usage"' in scan[:cut]:
                            usage = _usage_in(scan[:cut]) or usage
                        tail = scan[cut:][-_MAX_ERROR_BYTES:]
                        if strip_usage:
                            data, held = _strip_usage_chunks(held + data, final=problem is not None)
                        if data:
                            yield data
                        if problem is not None:
                            failed = True
                            yield _stream_error(problem)
                            return
                    if b'"usage"' in tail:
                        usage = _usage_in(tail) or usage
                    if held:  # the upstream ended without a last blank line
                        yield held
            finally:
                # a client that went away lands here cancelled: stopping the
                # reader and closing the response closes the upstream connection
                # (which cancels the upstream request)
                with trio.CancelScope(shield=True):
                    await end(usage, failed, relayed)

        return Stream(chunks(), response.headers.get("content-type", "text/event-stream"))

    async def _acquire(self, limiter: trio.CapacityLimiter, request: httpx.Request) -> None:
        """A slot of the model's upstream for *request*, waiting at most
        ``model_timeout``.

        Raises:
            OpenAIError: 503 ``overloaded``, every slot stayed busy.
        """
        with trio.move_on_after(self._settings.model_timeout):
            await limiter.acquire_on_behalf_of(request)
            return
        raise OpenAIError(
            503, "the model is busy: try again shortly", "api_error", "overloaded", "1"
        )

    @contextlib.asynccontextmanager
    async def _slot(
        self, limiter: trio.CapacityLimiter, request: httpx.Request
    ) -> AsyncIterator[None]:
        await self._acquire(limiter, request)
        try:
            yield
        finally:
            limiter.release_on_behalf_of(request)

    async def _count_quietly(
        self, actor: Actor, model: Model, usage: Any, failed: bool, estimate: int
    ) -> None:
        try:
            await self._count(actor, model, usage=usage, error=failed, estimate=estimate)
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
        self,
        actor: Actor,
        model: Model,
        *,
        usage: Any = None,
        error: bool = False,
        estimate: int = 0,
    ) -> None:
        """Count one request: its tokens from the upstream's *usage*, else
        the *estimate* (decision 0053), toward the day's budget too."""
        prompt = completion = 0
        spent = estimate
        if isinstance(usage, dict) and any(
            k in usage for k in ("prompt_tokens", "completion_tokens", "total_tokens")
        ):
            prompt = _int(usage.get("prompt_tokens"))
            completion = _int(usage.get("completion_tokens"))
            spent = max(prompt + completion, _int(usage.get("total_tokens")))
        at = now_ms()

        def count(conn: Connection) -> None:
            repo.add_usage(
                conn,
                actor.participant_id,
                model.name,
                error=error,
                prompt_tokens=prompt,
                completion_tokens=completion,
                at=at,
            )
            repo.add_daily(conn, actor.participant_id, at // _DAY_MS, tokens=spent)

        await self._db.write(count)

    # budgets ------------------------------------------------------------------

    def budget_of(self, actor: Actor) -> Budget:
        """*actor*'s budget: its own, else its role's, else the settings (the
        owner has none)."""
        if actor.priority >= OWNER:
            return Budget(0, 0)
        return self._resolve(actor.participant_id, actor.role)

    def _resolve(self, participant_id: str, role: str) -> Budget:
        """The budget that applies, figure by figure: the participant's own,
        the role's as stored, the role's in the settings, the default."""
        own = self._budgets.get(("participant", participant_id))
        of_role = self._budgets.get(("role", role))
        settings = self._settings
        configured = settings.model_role_budgets.get(role)

        def pick(field: str, default: int) -> int:
            for budget in (own, of_role, configured):
                value = getattr(budget, field) if budget is not None else None
                if value is not None:
                    return int(value)
            return default

        return Budget(
            pick("requests_per_minute", settings.model_requests_per_minute),
            pick("tokens_per_day", settings.model_tokens_per_day),
        )

    def _settings_budget(self, role: str) -> Budget:
        """What a role's budget is when none is stored: from the settings."""
        settings = self._settings
        configured = settings.model_role_budgets.get(role)
        rpm = configured.requests_per_minute if configured else None
        tpd = configured.tokens_per_day if configured else None
        return Budget(
            settings.model_requests_per_minute if rpm is None else rpm,
            settings.model_tokens_per_day if tpd is None else tpd,
        )

    async def _spend(self, actor: Actor) -> None:
        """Refuse a request over *actor*'s budget; count it toward the minute.

        Raises:
            OpenAIError: 429 ``insufficient_quota`` (tokens of the day spent)
                or ``rate_limit_exceeded`` (requests of the minute), as OpenAI
                answers them, with ``Retry-After``.
        """
        budget = self.budget_of(actor)
        at = now_ms()
        if budget.tokens_per_day:
            day = at // _DAY_MS
            spent = await self._db.read(
                lambda conn: repo.daily_tokens(conn, actor.participant_id, day)
            )
            if spent >= budget.tokens_per_day:
                wait = math.ceil(((day + 1) * _DAY_MS - at) / 1000)
                raise OpenAIError(
                    429,
                    f"You exceeded your current quota: {budget.tokens_per_day} model tokens "
                    "a day on this mesh (it renews at 00:00 UTC; the mesh's admins can "
                    "raise it).",
                    "insufficient_quota",
                    "insufficient_quota",
                    str(max(1, wait)),
                )
        if budget.requests_per_minute:
            interval = max(1, 60_000 // budget.requests_per_minute)
            tolerance = interval * (budget.requests_per_minute - 1)
            wait_ms = await self._db.write(
                lambda conn: limits_repo.take(
                    conn,
                    _MINUTE_RULE,
                    # a budget changed starts afresh (the old one's count
                    # would hold a raised budget back)
                    f"{actor.participant_id} {budget.requests_per_minute}",
                    now=int(time.time() * 1000),
                    interval=interval,
                    tolerance=tolerance,
                )
            )
            if wait_ms:
                raise OpenAIError(
                    429,
                    f"Rate limit reached: {budget.requests_per_minute} model requests a "
                    f"minute on this mesh. Please try again in {wait_ms / 1000:.1f}s.",
                    "rate_limit_exceeded",
                    "rate_limit_exceeded",
                    str(max(1, math.ceil(wait_ms / 1000))),
                )

    async def own_budget(self, actor: Actor) -> dict[str, Any]:
        """*actor*'s budget and what it spent today (anyone who may use models)."""
        authorize(actor, "models.use")
        day = now_ms() // _DAY_MS
        requests, tokens = await self._db.read(
            lambda conn: repo.list_daily(conn, day, actor.participant_id).get(
                actor.participant_id, (0, 0)
            )
        )
        return {
            **self.budget_of(actor).to_json(),
            "requestsToday": requests,
            "tokensToday": tokens,
            "renewsAt": iso((day + 1) * _DAY_MS),
        }

    async def budgets(self, actor: Actor) -> dict[str, Any]:
        """The budgets and today's use against them (admin and above)."""
        authorize(actor, "models.usage")
        day = now_ms() // _DAY_MS

        def load(
            conn: Connection,
        ) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[str, str]]]:
            today = repo.list_daily(conn, day)
            ids = set(today) | {s for (scope, s) in self._budgets if scope == "participant"}
            who: dict[str, tuple[str, str]] = {}
            for pid in sorted(ids):
                found = accounts_repo.get_participant(conn, pid)
                if found is not None:
                    who[pid] = (found.name, found.role)
            return today, who

        today, who = await self._db.read(load)
        settings = self._settings

        def stored(scope: str, subject: str) -> dict[str, int | None]:
            budget = self._budgets.get((scope, subject))
            return {
                "requestsPerMinute": budget.requests_per_minute if budget else None,
                "tokensPerDay": budget.tokens_per_day if budget else None,
            }

        roles = sorted(
            (r for r in actor.policy.roles.values() if r.priority < OWNER),
            key=lambda r: -r.priority,
        )
        usage: list[dict[str, Any]] = []
        for pid, (name, role) in who.items():
            requests, tokens = today.get(pid, (0, 0))
            owner = actor.policy.priority(role) >= OWNER
            budget = Budget(0, 0) if owner else self._resolve(pid, role)
            usage.append(
                {
                    "participantId": pid,
                    "name": name,
                    "role": role,
                    "requests": requests,
                    "tokens": tokens,
                    "budget": budget.to_json(),
                    "own": stored("participant", pid),
                }
            )
        usage.sort(key=lambda u: (-cast("int", u["tokens"]), str(u["name"])))
        return {
            "day": iso(day * _DAY_MS),
            "defaults": {
                "requestsPerMinute": settings.model_requests_per_minute,
                "tokensPerDay": settings.model_tokens_per_day,
            },
            "roles": [
                {
                    "role": r.name,
                    "priority": r.priority,
                    **stored("role", r.name),
                    "inherited": self._settings_budget(r.name).to_json(),
                }
                for r in roles
            ],
            "participants": usage,
        }

    async def set_budget(
        self,
        actor: Actor,
        scope: str,
        subject: str,
        *,
        requests_per_minute: int | None,
        tokens_per_day: int | None,
    ) -> dict[str, Any]:
        """Set a role's or a participant's budget (admin and above); ``None``
        inherits (a participant its role's, a role the settings'), 0 is no limit.

        Raises:
            Forbidden: not an admin, or a role or participant at or above the
                actor's rank (``budget_above_own``).
            NotFound: no such role (``role_not_found``) or participant
                (``participant_not_found``).
            BadRequest: a figure that is not a whole number from 0 (``invalid_budget``).
        """
        authorize(actor, "models.manage")
        for label, value in (
            ("requestsPerMinute", requests_per_minute),
            ("tokensPerDay", tokens_per_day),
        ):
            if value is not None and not 0 <= value <= _MOST:
                raise BadRequest(
                    f"{label} must be a whole number from 0 (no limit), or null (inherit)",
                    "invalid_budget",
                )
        if scope == "role":
            role = actor.policy.role(subject)
            if role is None:
                raise NotFound(f"no role named {subject[:64]}", "role_not_found")
            priority = role.priority
        else:
            found = await self._db.read(lambda conn: accounts_repo.get_participant(conn, subject))
            if found is None:
                raise NotFound("no such participant", "participant_not_found")
            priority = actor.policy.priority(found.role)
        authorize_above(
            actor,
            priority,
            "you may set budgets only for roles and participants below your own rank",
            "budget_above_own",
        )
        budget = repo.Budget(scope, subject, requests_per_minute, tokens_per_day)

        def put(conn: Connection) -> None:
            repo.put_budget(conn, budget, at=now_ms())
            outbox.change(conn, outbox.Invalidate("models", f"budget {scope} {subject}"))

        await self._db.write(put)
        budgets = dict(self._budgets)
        if requests_per_minute is None and tokens_per_day is None:
            budgets.pop((scope, subject), None)
        else:
            budgets[(scope, subject)] = budget
        self._budgets = budgets
        return {
            "scope": scope,
            "subject": subject,
            "requestsPerMinute": requests_per_minute,
            "tokensPerDay": tokens_per_day,
        }

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


def _from_config(config: ModelConfig, default_role: str) -> Model:
    return Model(
        config.name,
        config.base_url,
        config.upstream_model,
        config.api_key,
        "config",
        None,
        config.min_role or default_role,
        config.guests,
    )


def _with_access(model: Model, access: repo.Access) -> Model:
    """*model* with the stored choice of who may use it (a ``None`` keeps its value)."""
    return Model(
        model.name,
        model.base_url,
        model.upstream_model,
        model.api_key,
        model.source,
        model.created_at,
        access.min_role if access.min_role is not None else model.min_role,
        access.guests if access.guests is not None else model.guests,
    )


def _check_min_role(actor: Actor, min_role: str | None) -> None:
    if min_role is not None and actor.policy.role(min_role) is None:
        raise BadRequest(f"minRole: no role named {min_role[:64]}", "invalid_role")


def _estimate(size: int) -> int:
    """A conservative token count for *size* bytes of JSON (decision 0053):
    a token is about four characters of English, and JSON's quoting only
    adds bytes, so a byte count over four is rarely below the real count."""
    return -(-size // 4)


_EVENT_END = re.compile(rb"\r?\n\r?\n")


def _strip_usage_chunks(data: bytes, *, final: bool) -> tuple[bytes, bytes]:
    """(events to relay, the incomplete rest): every complete server-sent
    event of *data* except a usage-only chunk (``"choices": []``), which the
    proxy asked for and the client did not."""
    out: list[bytes] = []
    start = 0
    for end in _EVENT_END.finditer(data):
        event = data[start : end.end()]
        start = end.end()
        if b'"usage"' in event and _usage_only(event):
            continue
        out.append(event)
    rest = data[start:]
    if final:
        out.append(rest)
        rest = b""
    return b"".join(out), rest


def _usage_only(event: bytes) -> bool:
    for line in event.splitlines():
        if line.startswith(b"data:"):
            try:
                chunk = json.loads(line[5:])
            except ValueError:
                return False
            return isinstance(chunk, dict) and chunk.get("choices") == []
    return False


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
