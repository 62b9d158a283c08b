"""The outbound SSRF check (webhooks, a registry's manifest fetches, the
client to peer nodes) resolves a URL's host once and connects to that
address: a name that resolves to a public address for the check and to a
private one later (DNS rebinding) cannot reach the node's network."""

from __future__ import annotations

from typing import Any

import httpcore
import httpx
import pytest
import trio

from quart_mesh.errors import Transient
from quart_mesh.federation.http import peer_client
from quart_mesh.services.outbound import RefusedAddress, pin_public

pytestmark = pytest.mark.store_free


def _pin_public(url: str) -> Any:
    return pin_public(url, allowed_by="set MESH_OUTBOUND_ALLOW_PRIVATE")


class Rebinding:
    """A resolver that answers a public address first, then loopback."""

    def __init__(self) -> None:
        self.calls = 0

    async def getaddrinfo(self, host: Any, port: Any, *args: Any) -> list[Any]:
        self.calls += 1
        address = "8.8.8.8" if self.calls == 1 else "127.0.0.1"
        return [(trio.socket.AF_INET, trio.socket.SOCK_STREAM, 6, "", (address, port))]

    async def getnameinfo(self, sockaddr: Any, flags: int) -> Any:
        raise NotImplementedError


async def test_the_checked_address_is_the_one_connected_to() -> None:
    resolver = Rebinding()
    previous = trio.socket.set_custom_hostname_resolver(resolver)
    try:
        url, host, extensions = await _pin_public("https://hooks.example:8443/in?x=1")
        assert url == "https://8.8.8.8:8443/in?x=1"  # nothing left to resolve again
        assert host == "hooks.example:8443"
        assert extensions == {"sni_hostname": "hooks.example"}  # TLS still checks the name
        # the next resolution says loopback: refused, not connected to
        with pytest.raises(Transient, match="private address"):
            await _pin_public("http://hooks.example/in")
    finally:
        trio.socket.set_custom_hostname_resolver(previous)
    assert resolver.calls == 2


async def test_the_client_to_peers_connects_to_the_address_it_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``PublicOnlyTransport`` (``peer_client(..., allow_private=False)``)."""
    connects: list[tuple[str, int]] = []

    async def connect_tcp(self: Any, host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        connects.append((host, port))  # where the socket would connect; nothing is opened
        raise httpcore.ConnectError("no network in this test")

    monkeypatch.setattr(httpcore.TrioBackend, "connect_tcp", connect_tcp)
    resolver = Rebinding()
    previous = trio.socket.set_custom_hostname_resolver(resolver)
    url = "https://peer.example:8443/.well-known/mesh-manifest.json"
    try:
        async with peer_client(5, "test", allow_private=False) as client:
            with pytest.raises(httpx.ConnectError) as failed:
                await client.get(url)
            assert not isinstance(failed.value, RefusedAddress)
            # the address checked, not the name (which would resolve to loopback now)
            assert connects == [("8.8.8.8", 8443)]
            # a new connection resolves again and gets loopback: refused, never connected
            with pytest.raises(RefusedAddress, match="private address"):
                await client.get(url)
    finally:
        trio.socket.set_custom_hostname_resolver(previous)
    assert connects == [("8.8.8.8", 8443)]
    assert resolver.calls == 2


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/x", "http://localhost/x", "http://[::1]/x"])
async def test_private_addresses_are_refused(url: str) -> None:
    with pytest.raises(Transient, match="private address"):
        await _pin_public(url)


async def test_literal_public_addresses_are_kept() -> None:
    assert await _pin_public("http://8.8.8.8/h") == ("http://8.8.8.8/h", "8.8.8.8", {})
    url, host, _ = await _pin_public("http://[2001:4860:4860::8888]:8080/h")
    assert (url, host) == ("http://[2001:4860:4860::8888]:8080/h", "[2001:4860:4860::8888]:8080")


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:9/x", "http://localhost:9/x", "https://[::1]:9/x", "http://10.1.2.3/x"],
)
async def test_the_client_to_peers_refuses_private_addresses_unless_allowed(url: str) -> None:
    async with peer_client(5, "test", allow_private=False) as client:
        with pytest.raises(RefusedAddress, match="MESH_OUTBOUND_ALLOW_PRIVATE"):
            await client.get(url)
