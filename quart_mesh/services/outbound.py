"""The outbound SSRF guard: calls to URLs that others name.

A URL someone else chose (a webhook bot's receiver, a heartbeat's mesh)
must not make this node reach its own network: loopback, private,
link-local and other non-public addresses. :func:`pin_public` resolves the
name once, refuses it if any address it resolves to is not public, and pins
the connection to the address it checked, so a name that resolves
differently for the check and for the connection (DNS rebinding) cannot get
past it. Every outbound call to such a URL goes through it.
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import trio

from ..errors import Transient

__all__ = ["is_private_address", "pin_public"]


def is_private_address(host: str) -> bool:
    """Whether *host* (an IP address) is loopback, private, link-local or otherwise
    not a public unicast address."""
    try:
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    return not address.is_global or address.is_multicast


async def pin_public(url: str, *, allowed_by: str) -> tuple[str, str, dict[str, Any]]:
    """Resolve *url*'s host once and pin the connection to that address, if
    every address it resolves to is public. Returns the URL with the address
    in place of the name, the ``Host`` header, and for HTTPS the request
    extensions that keep the name for SNI and certificate checks.

    Args:
        allowed_by: what lets a private address through (named in the error).

    Cancellation: safe; nothing is left behind.

    Raises:
        Transient: the name does not resolve, or resolves to a private address.
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
    except (OSError, UnicodeError) as error:  # UnicodeError: a label IDNA cannot encode
        raise Transient(f"cannot resolve {host[:300]}: {error}") from None
    addresses = [str(info[4][0]) for info in infos]
    if not addresses or any(is_private_address(a) for a in addresses):
        raise Transient(f"{host[:300]} is a private address; {allowed_by}")
    address = addresses[0]
    literal = f"[{address}]" if ":" in address else address
    netloc = literal if parts.port is None else f"{literal}:{parts.port}"
    pinned = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    host_header = parts.netloc.rpartition("@")[2]  # as written: [v6]:port stays bracketed
    extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
    return pinned, host_header, extensions
