"""The outbound SSRF guard: calls to URLs that others name.

A URL someone else chose (a webhook bot's receiver, a heartbeat's mesh)
must not make this node reach its own network: loopback, private,
link-local and other non-public addresses. :func:`pin_public` resolves the
name once, refuses it if any address it resolves to is not public, and pins
the connection to the address it checked, so a name that resolves
differently for the check and for the connection (DNS rebinding) cannot get
past it. Every outbound call to such a URL goes through it.

:class:`PublicOnlyTransport` applies the same check to every connection an
``httpx`` client opens (the federation client to peer nodes, a registry's
manifest fetches): the URL, the ``Host`` header, TLS's name (SNI and the
certificate check) and the client's pool of connections all keep the name,
and only the socket is connected to the address that was checked.
"""

from __future__ import annotations

import functools
import ipaddress
import ssl
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpcore
import httpx
import trio

from ..errors import Transient

#: an IPv4 or IPv6 network (the operator's allow-list)
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

__all__ = [
    "Network",
    "PrivateAddress",
    "PublicOnlyTransport",
    "RefusedAddress",
    "is_private_address",
    "pin_public",
    "public_addresses",
    "tls_context",
]


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS settings of every call the node makes (httpx's defaults:
    certifi's roots, certificates and names checked; none taken from the
    environment). Made once per process and shared by every client, as an
    SSL context may be: loading the roots costs ~50 ms of CPU, which each
    client made with ``verify=True`` would spend again. httpcore sets the
    context's ALPN protocols at each connection: the clients sharing it must
    all speak HTTP/1.1 (none asks for ``http2``) and run on one thread."""
    return httpx.create_ssl_context(trust_env=False)


class PrivateAddress(Transient):
    """A host that is, or resolves to, an address that is not public."""


class RefusedAddress(httpx.ConnectError):
    """What :class:`PublicOnlyTransport` raises for a private address: the
    peer is unreachable, and the message says what would let it through."""


#: IPv6 prefixes that carry an IPv4 address in their last 32 bits: NAT64
#: (RFC 6052, 8215) and the deprecated IPv4-compatible addresses
_EMBEDDING = (
    ipaddress.IPv6Network("64:ff9b::/96"),
    ipaddress.IPv6Network("64:ff9b:1::/48"),
    ipaddress.IPv6Network("::/96"),
)


def is_private_address(host: str) -> bool:
    """Whether *host* (an IP address) is loopback, private, link-local or otherwise
    not a public unicast address — also an IPv6 address that reaches an IPv4
    address which is (IPv4-mapped, 6to4, Teredo, NAT64, IPv4-compatible), and
    a site-local one."""
    try:
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    if not address.is_global or address.is_multicast:
        return True
    if isinstance(address, ipaddress.IPv6Address):
        if address.is_site_local:
            return True
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address.teredo is not None:
            embedded = address.teredo[1]
        if embedded is None and any(address in net for net in _EMBEDDING):
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return not embedded.is_global or embedded.is_multicast
    return False


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
    address = (await public_addresses(host, port, allowed_by=allowed_by))[0]
    literal = f"[{address}]" if ":" in address else address
    netloc = literal if parts.port is None else f"{literal}:{parts.port}"
    pinned = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    host_header = parts.netloc.rpartition("@")[2]  # as written: [v6]:port stays bracketed
    extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
    return pinned, host_header, extensions


async def public_addresses(host: str, port: int, *, allowed_by: str) -> list[str]:
    """The addresses *host* resolves to (at least one), if every one is public.

    Args:
        allowed_by: what lets a private address through (named in the error).

    Cancellation: safe; nothing is left behind.

    Raises:
        Transient: the name does not resolve.
        PrivateAddress: it resolves to an address that is not public.
    """
    try:
        infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
    except (OSError, UnicodeError) as error:  # UnicodeError: a label IDNA cannot encode
        raise Transient(f"cannot resolve {host[:300]}: {error}") from None
    addresses = [str(info[4][0]) for info in infos]
    if not addresses or any(is_private_address(a) for a in addresses):
        raise PrivateAddress(f"{host[:300]} is a private address; {allowed_by}")
    return addresses


def _in(address: str, networks: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return False
    return any(ip.version == net.version and ip in net for net in networks)


class _PublicOnly(httpcore.AsyncNetworkBackend):
    """Connects only to public addresses (or those in *allowed*), each
    connection to an address it checked (a name is resolved once per
    connection, never again by the socket); with *ports*, a public address
    only on those ports."""

    def __init__(
        self,
        allowed_by: str,
        allowed: tuple[Network, ...] = (),
        ports: frozenset[int] | None = None,
    ) -> None:
        self._allowed_by = allowed_by
        self._allowed = allowed
        self._ports = ports
        self._backend = httpcore.TrioBackend()

    async def _addresses(self, host: str, port: int) -> list[str]:
        if not self._allowed:
            addresses = await public_addresses(host, port, allowed_by=self._allowed_by)
        else:
            try:
                infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
            except (OSError, UnicodeError) as error:
                raise Transient(f"cannot resolve {host[:300]}: {error}") from None
            addresses = [str(info[4][0]) for info in infos]
            if not addresses or any(
                is_private_address(a) and not _in(a, self._allowed) for a in addresses
            ):
                raise PrivateAddress(f"{host[:300]} is a private address; {self._allowed_by}")
        ports = self._ports
        if (
            ports is not None
            and port not in ports
            and not all(_in(a, self._allowed) for a in addresses)
        ):
            raise PrivateAddress(
                f"port {port} of {host[:300]} is refused: only ports "
                + ", ".join(str(p) for p in sorted(ports))
            )
        return addresses

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            addresses = await self._addresses(host, port)
        except PrivateAddress as error:
            raise RefusedAddress(error.reason) from None
        except Transient as error:
            raise httpcore.ConnectError(error.reason) from None
        failure: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        # the time to connect shared among the addresses (one that does not
        # answer must not use it all: the next may), at least a second each
        each = None if timeout is None else max(timeout / len(addresses), 1.0)
        for address in addresses:
            try:
                return await self._backend.connect_tcp(
                    address,
                    port,
                    timeout=each,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                failure = error  # the next address the name has, if any
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise RefusedAddress("unix sockets are not reached by URLs that others name")

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


class PublicOnlyTransport(httpx.AsyncHTTPTransport):
    """An ``httpx`` transport that reaches only public addresses: every new
    connection resolves its host once, is refused (:class:`RefusedAddress`,
    an ``httpx.ConnectError``) if any address the name has is not public,
    and connects to an address it checked. The request keeps its name: the
    ``Host`` header, TLS (SNI, the certificate check) and the pool of
    connections (a connection made for one name never serves another) go
    by the name, not the address. No proxy; no settings from the environment.

    Args:
        allowed_by: what lets a private address through (named in the error).
        allowed: networks reached even though they are not public (the
            operator's allow-list), on any port.
        ports: the only ports a public address is reached on (``None``: any).
    """

    def __init__(
        self,
        *,
        allowed_by: str,
        allowed: tuple[Network, ...] = (),
        ports: frozenset[int] | None = None,
    ) -> None:
        context = tls_context()
        super().__init__(verify=context, trust_env=False)
        # the pool httpx builds for a client by default (its limits: 100
        # connections, 20 kept alive for 5 s), with the backend that checks addresses
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=context,
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            network_backend=_PublicOnly(allowed_by, allowed, ports),
        )
