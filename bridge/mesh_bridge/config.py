"""The bridge's settings, checked once at start-up."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

#: The node's default ``max_message_bytes``: replies are cut to this many
#: UTF-8 bytes unless ``--max-reply-bytes`` says otherwise.
DEFAULT_MAX_REPLY_BYTES = 16384
#: Seconds an ``--exec`` script or an ``--http`` request may take.
DEFAULT_TIMEOUT = 30.0

Mode = Literal["exec", "http", "pipe"]

_SCHEMES = {"ws": "ws", "wss": "wss", "http": "ws", "https": "wss"}


@dataclass(frozen=True)
class Config:
    mesh_url: str
    token: str
    mode: Mode
    #: the script path (exec), endpoint URL (http) or shell command (pipe)
    target: str
    timeout: float = DEFAULT_TIMEOUT
    state_file: Path | None = None
    include_bots: bool = False
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES


def websocket_url(address: str) -> str:
    """The node's WebSocket address from what a user gives as ``--mesh``.

    ``ws://host:port``, ``ws://host:port/`` and ``ws://host:port/ws`` all mean
    ``ws://host:port/ws``; ``http``/``https`` become ``ws``/``wss``. A path
    other than ``/ws`` (a node behind a reverse proxy under a prefix) gets
    ``/ws`` appended.

    Raises:
        ValueError: not a ws, wss, http or https URL with a host.
    """
    parts = urllib.parse.urlsplit(address.strip())
    scheme = _SCHEMES.get(parts.scheme.lower())
    if scheme is None:
        raise ValueError(f"{address!r} is not a ws://, wss://, http:// or https:// address")
    if not parts.hostname:
        raise ValueError(f"{address!r} has no host")
    try:
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError as exc:
        raise ValueError(f"{address!r} has a bad port") from exc
    path = parts.path.rstrip("/")
    if not path.endswith("/ws"):
        path += "/ws"
    return urllib.parse.urlunsplit((scheme, parts.netloc, path, parts.query, ""))


def http_url(address: str) -> str:
    """*address* if it is an http(s) URL with a host.

    Raises:
        ValueError: otherwise.
    """
    parts = urllib.parse.urlsplit(address)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{address!r} is not an http:// or https:// URL")
    return address
