"""A small real OpenAI-compatible server for tests (h11 over trio sockets).

It plays the upstream the node's model proxy calls. What it does depends on
the requested ``model``:

- ``echo-model``: answers ``echo: <last message>``; streams it word by word,
  and, as OpenAI does, only when asked (``stream_options.include_usage``)
  ends the stream with a usage-only chunk (``"choices": []``).
- ``quiet-model``: as ``echo-model`` but never reports ``usage``.
- ``gated-model``: streams one chunk, then waits for :attr:`Upstream.gate`
  before the rest (so a test can see chunks arrive one at a time, or hang up).
- ``hang-model``: never answers.
- ``stall-model``: starts its answer, then never finishes it.
- ``bad-request-model``: 400 in OpenAI's error shape.
- ``broken-model``: 500.
- ``coder-model``: answers with an HTML page in a fenced block.
- ``app-model``: answers an app in the format the last message asks for:
  ``json`` (a JSON object), ``document`` (one fenced HTML document),
  ``nothing`` (prose, no code); otherwise fenced html, css and js blocks.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import h11
import trio

from tests.receiver import read_request


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Upstream:
    requests: list[Seen] = field(default_factory=list)
    gate: trio.Event = field(default_factory=trio.Event)
    #: set when a client hung up in the middle of a stream
    hung_up: trio.Event = field(default_factory=trio.Event)
    chunks_sent: int = 0
    port: int = 0

    async def start(self, nursery: trio.Nursery) -> str:
        """Serve on 127.0.0.1; returns the base URL (``.../v1``)."""

        async def serve(task_status: trio.TaskStatus[int]) -> None:
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            task_status.started(listeners[0].socket.getsockname()[1])
            await trio.serve_listeners(self._connection, listeners)

        self.port = await nursery.start(serve)
        return f"http://127.0.0.1:{self.port}/v1"

    async def _connection(self, stream: trio.SocketStream) -> None:
        async with stream:
            conn = h11.Connection(h11.SERVER)
            request = await read_request(stream, conn)
            if request is None:
                return
            payload = json.loads(request.body) if request.body else None
            self.requests.append(Seen(request.path, request.headers, payload))
            await self._answer(stream, conn, request.path, payload)

    async def _answer(
        self, stream: trio.SocketStream, conn: h11.Connection, path: str, body: Any
    ) -> None:
        async def send(event: Any) -> None:
            await stream.send_all(conn.send(event))

        async def respond(status: int, data: Any) -> None:
            raw = json.dumps(data).encode()
            headers = [("Content-Type", "application/json"), ("Content-Length", str(len(raw)))]
            await send(h11.Response(status_code=status, headers=headers))
            await send(h11.Data(data=raw))
            await send(h11.EndOfMessage())

        if path.endswith("/models"):
            await respond(200, {"object": "list", "data": []})
            return
        model = body.get("model") if isinstance(body, dict) else None
        if model == "hang-model":
            await trio.sleep_forever()
        if model == "stall-model":  # the head and two bytes of its body, then nothing
            head = [("Content-Type", "application/json"), ("Content-Length", "100")]
            await send(h11.Response(status_code=200, headers=head))
            await send(h11.Data(data=b'{"'))
            await trio.sleep_forever()
        if model == "bad-request-model":
            error = {"message": "temperature is too hot", "type": "invalid_request_error"}
            await respond(400, {"error": {**error, "code": "bad_temperature"}})
            return
        if model == "busy-model":
            raw = json.dumps({"error": {"message": "slow down", "type": "rate_limit"}}).encode()
            headers = [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(raw))),
                ("Retry-After", "7"),
            ]
            await send(h11.Response(status_code=429, headers=headers))
            await send(h11.Data(data=raw))
            await send(h11.EndOfMessage())
            return
        if model == "broken-model":
            await respond(500, {"error": {"message": "the GPU caught fire", "type": "server"}})
            return
        text = "echo: " + str(body["messages"][-1].get("content", ""))
        if model == "coder-model":
            text = "```html\n<!doctype html><title>Hi</title><h1>Hello</h1>\n```\nA greeting page."
        if model == "app-model":
            text = _app_answer(str(body["messages"][-1].get("content", "")))
        if not body.get("stream"):
            answer = _completion(model, text)
            if model == "quiet-model":
                del answer["usage"]
            await respond(200, answer)
            return
        await send(
            h11.Response(
                status_code=200,
                headers=[("Content-Type", "text/event-stream"), ("Transfer-Encoding", "chunked")],
            )
        )
        words = text.split(" ")
        for n, word in enumerate(words):
            piece = word if n == 0 else " " + word
            try:
                await send(h11.Data(data=_sse(_chunk(model, piece))))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.hung_up.set()
                return
            self.chunks_sent += 1
            if model == "gated-model" and n == 0:
                # wait for the test, noticing if the client hangs up meanwhile
                async with trio.open_nursery() as nursery:

                    async def watch_hangup() -> None:
                        if await stream.receive_some(1) == b"":
                            self.hung_up.set()
                            nursery.cancel_scope.cancel()

                    nursery.start_soon(watch_hangup)
                    await self.gate.wait()
                    nursery.cancel_scope.cancel()
                if self.hung_up.is_set():
                    return
        usage = {
            "prompt_tokens": 5,
            "completion_tokens": len(words),
            "total_tokens": 5 + len(words),
        }
        final = _sse(_chunk(model, "", finish="stop"))
        options = body.get("stream_options") or {}
        if options.get("include_usage") and model != "quiet-model":
            final += _sse(_chunk(model, "") | {"choices": [], "usage": usage})
        await send(h11.Data(data=final + b"data: [DONE]\n\n"))
        await send(h11.EndOfMessage())


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def _chunk(model: Any, piece: str, finish: str | None = None) -> dict[str, Any]:
    delta = {"content": piece} if piece else {}
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _completion(model: Any, text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }


def _app_answer(prompt: str) -> str:
    """``app-model``'s answer to *prompt* (see the module docstring)."""
    if "nothing" in prompt:
        return "I would rather not build that today."
    if "json" in prompt:
        app = {
            "name": "Json Counter",
            "html": '<button id="b">0</button>',
            "css": "button { font-size: 2em; }",
            "js": "b.onclick = () => { b.textContent = +b.textContent + 1; };",
        }
        return json.dumps(app)
    if "document" in prompt:
        return (
            "Here you go:\n```html\n<!DOCTYPE html><html><head><title>Doc</title></head>"
            "<body><h1 id=t>Doc app</h1><script>document.title = 'ran';</script></body>"
            "</html>\n```\nEnjoy."
        )
    return (
        'Sure! Here is a counter.\n\n```html\n<h1>Counter</h1><button id="c">0</button>\n```\n'
        "```css\nbutton { color: teal; }\n```\n"
        "```javascript\nc.onclick = () => { c.textContent = +c.textContent + 1; };\n```\n"
        "Click the button to count."
    )
