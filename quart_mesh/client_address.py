"""The client's address: the peer's, or what trusted proxies say it was.

Every path that needs a client's address (per-address rate limits on REST,
WebSocket upgrades on the node's own transport and through Quart's route,
the access log) asks :meth:`ClientAddresses.resolve`, so that a request
forwarded by a reverse proxy counts against the client that sent it, never
against the proxy (``docs/rate-limits.md``, decision 0055).

The rule: a connection's peer that is not in ``trusted_proxies`` is the
client, and whatever it says in ``X-Forwarded-For`` or ``Forwarded`` is
ignored (anyone can send those headers). A trusted peer's forwarding header
is read from right to left: each hop was added by the one to its right, so
the walk goes on through hops that are themselves trusted proxies, and the
first hop that is not is the client. A malformed or obfuscated hop
(``unknown``, ``_secret``, not an address) ends the walk: the client is the
last hop that was read well, which a trusted proxy vouched for. Only the
header ``forwarded_header`` names is read (``X-Forwarded-For`` by default):
a proxy that sets one passes the other through from the client untouched.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Final

__all__ = ["FORWARDED_HEADERS", "ClientAddresses", "ip_of", "is_loopback", "parse_networks"]

#: the forwarding headers the node can read (lowercase)
FORWARDED_HEADERS: Final = ("x-forwarded-for", "forwarded")
#: most hops read from one request (a longer chain is cut: the walk stops there)
MAX_HOPS: Final = 32

_Address = ipaddress.IPv4Address | ipaddress.IPv6Address
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(values: Iterable[str]) -> tuple[_Network, ...]:
    """Addresses or CIDR networks (``10.0.0.0/8``, ``::1``).

    Raises:
        ValueError: one is neither.
    """
    return tuple(ipaddress.ip_network(v.strip(), strict=False) for v in values)


def ip_of(text: str) -> _Address | None:
    """An IP address, IPv4-mapped IPv6 unmapped; ``None`` if *text* is not one."""
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def is_loopback(host: str) -> bool:
    """Whether *host* (an address or a name, as given to bind) is loopback only."""
    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    ip = ip_of(host)
    return ip is not None and ip.is_loopback


def _hop(text: str) -> _Address | None:
    """One hop as proxies write it: ``1.2.3.4``, ``1.2.3.4:5678``, ``::1``,
    ``[::1]`` or ``[::1]:5678`` (quotes around it allowed)."""
    text = text.strip().strip('"').strip()
    if text.startswith("["):
        inside, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return ip_of(inside)
    if text.count(":") == 1:  # IPv4 with a port
        host, _, port = text.partition(":")
        return ip_of(host) if port.isdigit() else None
    return ip_of(text)


def _x_forwarded_for(values: Iterable[str]) -> list[str]:
    return [hop for value in values for hop in value.split(",")]


def _forwarded(values: Iterable[str]) -> list[str]:
    """The ``for=`` of each element of ``Forwarded`` (RFC 7239); an element
    without one is a malformed hop (``""``)."""
    hops: list[str] = []
    for value in values:
        for element in value.split(","):
            found = ""
            for pair in element.split(";"):
                name, eq, text = pair.partition("=")
                if eq and name.strip().lower() == "for":
                    found = text
                    break
            hops.append(found)
    return hops


class ClientAddresses:
    """Resolves client addresses for one node (its ``trusted_proxies`` and
    ``forwarded_header`` settings)."""

    def __init__(
        self, trusted_proxies: Iterable[str] = (), header: str = "x-forwarded-for"
    ) -> None:
        """Raises:
        ValueError: a trusted proxy is not an address or network, or
            *header* is not one of :data:`FORWARDED_HEADERS`.
        """
        if header not in FORWARDED_HEADERS:
            raise ValueError(f"forwarded header must be one of {', '.join(FORWARDED_HEADERS)}")
        self._trusted = parse_networks(trusted_proxies)
        #: the header read (lowercase)
        self.header = header

    @property
    def behind_proxy(self) -> bool:
        """Whether any proxy is trusted."""
        return bool(self._trusted)

    def _is_trusted(self, ip: _Address) -> bool:
        return any(ip.version == net.version and ip in net for net in self._trusted)

    def resolve(self, peer: str | None, header_values: Iterable[str] = ()) -> str | None:
        """The client's address for a connection from *peer* whose request
        carried *header_values* (every line of :attr:`header`, in order).

        Returns:
            The address in its canonical form, or *peer* as it is when it is
            not an IP address (a unix socket), or ``None`` when there is no peer.
        """
        if peer is None:
            return None
        client = ip_of(peer)
        if client is None:
            return peer
        if not self._trusted or not self._is_trusted(client):
            return str(client)
        values = list(header_values)
        hops = _forwarded(values) if self.header == "forwarded" else _x_forwarded_for(values)
        for text in reversed(hops[-MAX_HOPS:]):
            hop = _hop(text)
            if hop is None:
                break  # malformed: the trusted hop that passed it on is the client
            client = hop
            if not self._is_trusted(hop):
                break
        return str(client)
