"""``--http URL``: POST each message to an endpoint; its answer is the reply."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import trio

from mesh_bridge import __version__
from mesh_bridge.handler import Outbox, Reply, clean_content, reply_from_object

log = logging.getLogger("mesh_bridge")

#: Largest response body read; a longer one is cut (and a cut JSON body fails
#: to parse, which is logged).
MAX_RESPONSE_BYTES = 1 << 20


class HttpHandler:
    """POSTs each ``message`` event, exactly as received, as a JSON body to
    *url*. A 2xx answer gives the reply:

    - a JSON object (``Content-Type: application/json``) with ``content``
      (string), optionally ``roomId`` and ``threadId``; without ``content``,
      no reply;
    - a JSON string, or any other non-empty text body: that text, in the
      message's room;
    - an empty body (e.g. 204): no reply.

    Connection errors, non-2xx answers and answers slower than *timeout*
    seconds are logged and give no reply.
    """

    def __init__(self, url: str, outbox: Outbox, *, timeout: float, max_reply_bytes: int) -> None:
        self.url = url
        self.outbox = outbox
        self.timeout = timeout
        self.max_reply_bytes = max_reply_bytes
        self._client: httpx.AsyncClient | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own one ``httpx.AsyncClient`` (connection pool) until cancelled."""
        headers = {"User-Agent": f"mesh-bridge/{__version__}"}
        async with httpx.AsyncClient(timeout=self.timeout, headers=headers) as client:
            self._client = client
            try:
                task_status.started()
                await trio.sleep_forever()
            finally:
                self._client = None

    async def handle(self, message: dict[str, Any]) -> None:
        assert self._client is not None, "handle() before run() started"
        label = message.get("messageId")
        try:
            with trio.fail_after(self.timeout):
                async with self._client.stream("POST", self.url, json=message) as response:
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > MAX_RESPONSE_BYTES:
                            log.warning("response over %d bytes was cut", MAX_RESPONSE_BYTES)
                            del body[MAX_RESPONSE_BYTES:]
                            break
        except trio.TooSlowError:
            log.warning(
                "%s did not answer within %g s on message %s: no reply",
                self.url,
                self.timeout,
                label,
            )
            return
        except httpx.HTTPError as exc:
            log.warning("POST %s failed on message %s: %r: no reply", self.url, label, exc)
            return
        if not response.is_success:
            snippet = bytes(body[:200]).decode("utf-8", errors="replace")
            log.warning(
                "%s answered %d on message %s: no reply (%s)",
                self.url,
                response.status_code,
                label,
                snippet,
            )
            return
        reply = self._reply(response, bytes(body), message, label)
        if reply is None:
            log.info("%s gave no reply to message %s", self.url, label)
            return
        await self.outbox.put(reply)

    def _reply(
        self, response: httpx.Response, body: bytes, message: dict[str, Any], label: object
    ) -> Reply | None:
        room_id = message["roomId"]
        media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type == "application/json" or media_type.endswith("+json"):
            try:
                data = json.loads(body)
            except ValueError:
                log.warning("%s answered invalid JSON on message %s: no reply", self.url, label)
                return None
            if isinstance(data, dict):
                return reply_from_object(data, room_id, self.max_reply_bytes, self.url)
            if isinstance(data, str):
                text = data
            else:
                log.warning(
                    "%s answered JSON that is neither an object nor a string on message %s: "
                    "no reply",
                    self.url,
                    label,
                )
                return None
        else:
            text = body.decode(response.encoding or "utf-8", errors="replace")
        content = clean_content(text, self.max_reply_bytes)
        return None if content is None else Reply(room_id, content)
