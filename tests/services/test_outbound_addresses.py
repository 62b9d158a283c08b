"""The outbound guard's idea of a private address (``services/outbound.py``):
IPv6 forms that reach an IPv4 address are judged by that address, so a peer,
webhook or heartbeat URL cannot reach this node's network through NAT64,
6to4, Teredo or an IPv4-compatible address."""

from __future__ import annotations

import pytest

from quart_mesh.services.outbound import is_private_address

# the same whatever the store: run once, on SQLite
pytestmark = pytest.mark.store_free


@pytest.mark.parametrize(
    ("host", "private"),
    [
        ("127.0.0.1", True),
        ("10.1.2.3", True),
        ("169.254.169.254", True),
        ("::1", True),
        ("fe80::1%eth0", True),
        ("::ffff:127.0.0.1", True),  # IPv4-mapped
        ("64:ff9b::a00:1", True),  # NAT64 of 10.0.0.1
        ("64:ff9b:1::a00:1", True),  # local-use NAT64 prefix
        ("2002:7f00:1::1", True),  # 6to4 of 127.0.0.1
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", True),  # Teredo of 127.0.0.1
        ("::127.0.0.1", True),  # IPv4-compatible
        ("fec0::1", True),  # site-local
        ("ff02::1", True),  # multicast
        ("8.8.8.8", False),
        ("2001:4860:4860::8888", False),
        ("64:ff9b::808:808", False),  # NAT64 of 8.8.8.8
        ("2002:808:808::1", False),  # 6to4 of 8.8.8.8
        ("not-an-address", False),  # names are resolved first, then judged
    ],
)
def test_private_addresses(host: str, private: bool) -> None:
    assert is_private_address(host) is private
