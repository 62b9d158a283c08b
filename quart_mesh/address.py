"""The node's public address: what clients, bots and peers use to reach it."""

from __future__ import annotations

import trio

__all__ = ["PublicAddress"]


class PublicAddress:
    """The base URL clients use (``http://host:port``): the configured
    ``public_url``, or else the address the server bound, known only once
    it listens. Whoever needs it before then (managed bots, the registry
    heartbeat) waits for it with :meth:`wait`."""

    def __init__(self, configured: str | None = None) -> None:
        self._url = configured.rstrip("/") if configured else None
        self._known = trio.Event()
        if self._url is not None:
            self._known.set()

    @property
    def url(self) -> str | None:
        """The address, or ``None`` while it is not known yet."""
        return self._url

    def bind(self, url: str) -> None:
        """The server listens at *url*: that is the address unless one was configured."""
        if self._url is None:
            self._url = url.rstrip("/")
            self._known.set()

    async def wait(self) -> str:
        """The address, once it is known."""
        await self._known.wait()
        assert self._url is not None
        return self._url
