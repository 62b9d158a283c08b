"""Calls to other nodes whose answers are read with a size cap: a peer (or a
registry) cannot make this node buffer an answer of any size."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

__all__ = ["Answer", "exchange", "peer_client"]

#: most bytes of a peer's answer read by default
DEFAULT_LIMIT = 64 * 1024


def peer_client(timeout: float, user_agent: str) -> httpx.AsyncClient:
    """The HTTP client for calls to other nodes and registries: a time limit,
    no redirects followed, no proxy settings taken from the environment."""
    return httpx.AsyncClient(
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
        headers={"User-Agent": user_agent},
    )


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: httpx.Headers
    #: at most the limit's worth of the body
    body: bytes
    #: the body was longer than the limit (and was cut)
    truncated: bool


async def exchange(
    client: httpx.AsyncClient, method: str, url: str, *, limit: int = DEFAULT_LIMIT, **kwargs: Any
) -> Answer:
    """Send a request; read at most *limit* bytes of the answer.

    Raises:
        httpx.HTTPError: the peer could not be reached or the exchange failed.
    """
    async with client.stream(method, url, **kwargs) as response:
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > limit:
                return Answer(response.status_code, response.headers, b"".join(chunks), True)
            chunks.append(chunk)
        return Answer(response.status_code, response.headers, b"".join(chunks), False)
