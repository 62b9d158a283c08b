"""The ``llm`` and ``coder`` managed bots: they answer through the node's
model proxy, with their own token, like any OpenAI client would.

When they answer: a message addressed to them (``to`` them, or ``@name`` in
its text) or any message in a DM with them. A message from another bot only
when it addresses them explicitly (``to`` or ``@name``; a DM is not enough),
and at most :data:`BOT_REPLIES_PER_MINUTE` times a minute per room, so two
bots cannot keep each other talking. They never answer themselves.

How: the room's recent messages (``GET /api/rooms/:id/messages``), up to the
one being answered, become the chat history, sent to
``MESH_MODEL_URL/chat/completions`` as a stream while the bot shows ``typing``;
the answer is posted when complete. The spawn's ``apiKey``, if any, goes along
in ``X-Upstream-Api-Key``. An error from the
model becomes a short visible reply, not a crash.

The ``coder`` bot builds apps through the node's own API with its token:
``POST /api/apps/generate`` (the node asks the model through its proxy),
deploys the app and replies with its run URL; asked to change "the last app",
it asks the model for a new version and stores it with ``PUT
/api/apps/:id/source``. It never runs generated code.

Messages are acknowledged to the supervisor when received, not when
answered: a bot that crashes while generating does not answer that message
again after its restart (no duplicate answers).
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict, deque
from typing import Any

import httpx
import trio

from ..app_source import parse_app_source
from .base import Bot

__all__ = ["BOT_REPLIES_PER_MINUTE", "ModelBot"]

#: answers to other bots per room per minute (loop guard)
BOT_REPLIES_PER_MINUTE = 3
#: messages of the room given to the model as context
HISTORY = 20
#: the node's default message size limit (bytes)
MAX_REPLY_BYTES = 16 * 1024
TYPING_EVERY = 3.0

LLM_PROMPT = (
    "You are {name}, a participant in a chat room on a mesh of humans and bots. "
    "Each user message starts with its author's name. Answer the latest message "
    "helpfully and briefly, in plain text."
)
CODER_PROMPT = (
    "You are {name}, a coding assistant in a chat room. When asked to build "
    "something, answer with ONE complete, self-contained HTML document (inline "
    "<style> and <script>, no external resources) in a single ```html fenced "
    "code block, followed by one sentence describing it."
)


class ModelBot(Bot):
    def __init__(
        self,
        ws: Any,
        me: str,
        bot_type: str,
        *,
        api_url: str,
        model_url: str,
        model: str,
        token: str,
        api_key: str | None,
        nursery: trio.Nursery,
    ) -> None:
        super().__init__(ws, me, bot_type)
        self.api_url = api_url.rstrip("/")
        self.model_url = model_url.rstrip("/")
        self.model = model
        self._headers = {"Authorization": f"Bearer {token}"}
        if api_key:
            self._headers["X-Upstream-Api-Key"] = api_key
        self._nursery = nursery
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(300, connect=10), trust_env=False)
        self._room_kinds: dict[str, str] = {}
        self._room_locks: dict[str, trio.Lock] = defaultdict(trio.Lock)
        self._bot_replies: dict[str, deque[float]] = defaultdict(deque)
        self.last_error: str | None = None
        self.apps_posted = 0
        #: the app this coder built or changed last
        self.last_app: str | None = None

    @classmethod
    def from_env(cls, ws: Any, me: str, bot_type: str, env: Any, nursery: trio.Nursery) -> ModelBot:
        return cls(
            ws,
            me,
            bot_type,
            api_url=env["MESH_API_URL"],
            model_url=env["MESH_MODEL_URL"],
            model=env["MESH_MODEL"],
            token=env["MESH_TOKEN"],
            api_key=env.get("MESH_API_KEY") or None,
            nursery=nursery,
        )

    async def close(self) -> None:
        await self._http.aclose()

    def status(self) -> dict[str, Any]:
        status = super().status() | {"model": self.model, "lastError": self.last_error}
        if self.bot_type == "coder":
            status["appsPosted"] = self.apps_posted
            status["lastApp"] = self.last_app
        return status

    async def on_message(self, event: dict[str, Any]) -> None:
        sender, room_id = event.get("senderId"), event["roomId"]
        content = str(event.get("content", ""))
        addressed = event.get("to") == self.me or (
            bool(self.name) and f"@{self.name.lower()}" in content.lower()
        )
        if sender in self.bots:
            if not addressed or not self._may_answer_bot(room_id):
                return
        elif not addressed and await self._room_kind(room_id) != "dm":
            return
        self.handled += 1
        self._nursery.start_soon(
            self._answer, room_id, int(event["cursor"]), content, self.thread_of_answer(event)
        )

    def _may_answer_bot(self, room_id: str) -> bool:
        recent, now = self._bot_replies[room_id], time.monotonic()
        while recent and now - recent[0] > 60:
            recent.popleft()
        if len(recent) >= BOT_REPLIES_PER_MINUTE:
            return False
        recent.append(now)
        return True

    async def _room_kind(self, room_id: str) -> str:
        if room_id not in self._room_kinds:
            try:
                r = await self._http.get(
                    f"{self.api_url}/api/rooms/{room_id}", headers=self._headers
                )
                self._room_kinds[room_id] = str(r.json().get("kind", "room"))
            except (httpx.HTTPError, ValueError, AttributeError):
                return "room"
        return self._room_kinds[room_id]

    async def _answer(self, room_id: str, upto: int, request: str, thread: str | None) -> None:
        async with self._room_locks[room_id], trio.open_nursery() as nursery:
            nursery.start_soon(self._keep_typing, room_id)
            try:
                if self.bot_type == "coder":
                    text = await self._build(request)
                else:
                    text = await self._generate(room_id, upto)
            except ModelError as error:
                self.last_error = str(error)
                text = f"(I could not answer: {error})"
            nursery.cancel_scope.cancel()
        answer = {"type": "send_message", "roomId": room_id, "content": _fit(text)}
        if thread is not None:
            answer["threadId"] = thread
        await self.send(answer)

    async def _keep_typing(self, room_id: str) -> None:
        while True:
            await self.send({"type": "typing", "roomId": room_id})
            await trio.sleep(TYPING_EVERY)

    async def _history(self, room_id: str, upto: int) -> list[dict[str, str]]:
        """The room's recent messages up to the one being answered (cursor *upto*)."""
        prompt = LLM_PROMPT if self.bot_type == "llm" else CODER_PROMPT
        messages = [{"role": "system", "content": prompt.format(name=self.name)}]
        try:
            r = await self._http.get(
                f"{self.api_url}/api/rooms/{room_id}/messages",
                params={"limit": HISTORY},
                headers=self._headers,
            )
            recent = r.json() if r.is_success else []
        except (httpx.HTTPError, ValueError):
            recent = []
        for message in recent if isinstance(recent, list) else []:
            if int(message.get("cursor", 0)) > upto:
                continue  # said after the message being answered
            if message.get("senderId") == self.me:
                messages.append({"role": "assistant", "content": message["content"]})
            else:
                text = f"{message.get('senderName')}: {message.get('content')}"
                messages.append({"role": "user", "content": text})
        return messages

    async def _generate(self, room_id: str, upto: int) -> str:
        history = await self._history(room_id, upto)
        body = {"model": self.model, "stream": True, "messages": history}
        pieces: list[str] = []
        try:
            async with self._http.stream(
                "POST", f"{self.model_url}/chat/completions", json=body, headers=self._headers
            ) as response:
                if not response.is_success:
                    raise ModelError(_error_message(await response.aread(), response.status_code))
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    chunk = json.loads(data)
                    if "error" in chunk:
                        raise ModelError(_error_message(data.encode(), 502))
                    for choice in chunk.get("choices") or []:
                        pieces.append((choice.get("delta") or {}).get("content") or "")
        except httpx.HTTPError as error:
            raise ModelError(f"the model proxy is unreachable ({type(error).__name__})") from None
        except (ValueError, AttributeError):
            raise ModelError("the model sent something unreadable") from None
        text = "".join(pieces).strip()
        if not text:
            raise ModelError("the model gave an empty answer")
        return text

    # the coder -------------------------------------------------------------

    async def _build(self, request: str) -> str:
        """Build an app (or change the last one) and answer with its run URL.

        Through the node's own API with the bot's token: ``POST
        /api/apps/generate`` (the node asks the model through its proxy),
        then ``POST /api/apps/:id/deploy``. "Change the last app" asks the
        model for a new version of the bot's most recently updated app and
        stores it with ``PUT /api/apps/:id/source``. A node without apps gets
        the source in chat instead. The bot never runs generated code.
        """
        if _CHANGE_LAST.search(request):
            last = await self._last_app()
            if last is not None:
                return await self._change(last, request)
        prompt = _without_mention(request, self.name)
        r = await self._api(
            "POST",
            "/api/apps/generate",
            {"prompt": prompt, "model": self.model, "name": _name(prompt)},
        )
        app = _answer_json(r)
        deployed = _answer_json(await self._api("POST", f"/api/apps/{app['appId']}/deploy"))
        self.apps_posted += 1
        self.last_app = str(app["appId"])
        run_url = deployed.get("runUrl", app["runUrl"])
        return f"Built **{app['name']}** and put it in the app store: {run_url}"

    async def _last_app(self) -> dict[str, Any] | None:
        r = await self._api("GET", "/api/apps")
        if not r.is_success:
            return None
        mine = [a for a in r.json() if a.get("ownerId") == self.me]
        return max(mine, key=lambda a: str(a.get("updatedAt")), default=None)

    async def _change(self, last: dict[str, Any], request: str) -> str:
        current = _answer_json(await self._api("GET", f"/api/apps/{last['appId']}"))
        source = "\n".join(
            f"```{kind}\n{current.get(kind) or ''}\n```" for kind in ("html", "css", "js")
        )
        messages = [
            {"role": "system", "content": CODER_PROMPT.format(name=self.name)},
            {
                "role": "user",
                "content": f"Here is the current app:\n{source}\n\nChange it: "
                + _without_mention(request, self.name),
            },
        ]
        answer = await self._complete(messages)
        parsed = parse_app_source(answer)
        if parsed is None:
            raise ModelError("the model's answer held no app")
        r = await self._api("PUT", f"/api/apps/{last['appId']}/source", parsed)
        app = _answer_json(r)
        self.last_app = str(app["appId"])
        return (
            f"Updated **{app['name']}** to version {app['version']}: "
            f"{app.get('runUrl', last.get('runUrl'))}"
        )

    async def _api(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> httpx.Response:
        try:
            return await self._http.request(
                method, self.api_url + path, json=body, headers=self._headers
            )
        except httpx.HTTPError as error:
            raise ModelError(f"the node's API is unreachable ({type(error).__name__})") from None

    async def _complete(self, messages: list[dict[str, str]]) -> str:
        body = {"model": self.model, "messages": messages}
        try:
            r = await self._http.post(
                f"{self.model_url}/chat/completions", json=body, headers=self._headers
            )
        except httpx.HTTPError as error:
            raise ModelError(f"the model proxy is unreachable ({type(error).__name__})") from None
        if not r.is_success:
            raise ModelError(_error_message(r.content, r.status_code))
        try:
            return str(r.json()["choices"][0]["message"]["content"])
        except (ValueError, KeyError, IndexError, TypeError):
            raise ModelError("the model sent something unreadable") from None


class ModelError(Exception):
    """The model could not answer; the message is shown in the room."""


_CHANGE_LAST = re.compile(
    r"\b(change|update|modify|fix|edit|improve|make)\b.*\b(last|previous|that|the)\s+app\b",
    re.IGNORECASE | re.DOTALL,
)


def _without_mention(text: str, name: str) -> str:
    return re.sub(rf"@{re.escape(name)}\b", "", text, flags=re.IGNORECASE).strip() if name else text


def _name(prompt: str) -> str:
    """A short app name from the request ("build a counter app" -> "counter app")."""
    words = re.sub(
        r"^(please\s+)?(build|make|create|write)\s+(me\s+)?(an?\s+)?", "", prompt, flags=re.I
    )
    return (words.strip(" .!?") or "app")[:60]


def _answer_json(response: httpx.Response) -> dict[str, Any]:
    """The JSON object of a successful answer, or ModelError with the node's message."""
    try:
        data = response.json()
    except ValueError:
        data = None
    if not response.is_success or not isinstance(data, dict):
        message = data.get("error") if isinstance(data, dict) else None
        raise ModelError(str(message or f"the node answered {response.status_code}")[:300])
    return data


def _error_message(raw: bytes, status: int) -> str:
    try:
        error = json.loads(raw).get("error")
        message = error.get("message") if isinstance(error, dict) else error
    except (ValueError, AttributeError):
        message = None
    return str(message)[:300] if message else f"the model proxy answered {status}"


def _fit(text: str) -> str:
    """Cut *text* to the node's message size (UTF-8 bytes)."""
    raw = text.encode()
    if len(raw) <= MAX_REPLY_BYTES:
        return text
    return raw[: MAX_REPLY_BYTES - 20].decode("utf-8", errors="ignore") + "\n…(cut)"
