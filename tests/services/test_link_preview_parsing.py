"""Link previews without a network (decision 0072): which link a message
previews, what a page's head gives, which images pass, the cache's bounds,
and the guard's port rule for public addresses."""

from __future__ import annotations

from typing import Any

import httpcore
import httpx
import pytest
import trio

from quart_mesh.client_address import parse_networks
from quart_mesh.services.link_previews import _MISSING, _Cache, first_link, image_type, parse_head
from quart_mesh.services.outbound import PublicOnlyTransport, RefusedAddress

pytestmark = pytest.mark.store_free


@pytest.mark.parametrize(
    ("text", "link"),
    [
        ("see https://example.com/a.", "https://example.com/a"),
        ("(see https://example.com/a)", "https://example.com/a"),
        (
            "[the plan](https://example.com/plan) and http://other.example",
            "https://example.com/plan",
        ),
        (
            "https://en.wikipedia.org/wiki/Trio_(software)!",
            "https://en.wikipedia.org/wiki/Trio_(software)",
        ),
        ("`https://code.example` then HTTP://Example.com/x", "HTTP://Example.com/x"),
        ("```\nhttps://block.example\n``` nothing else", None),
        ("mailto:a@example.com ftp://example.com javascript:alert(1)", None),
        ("user@https://example.com", None),
        ("http://", None),
        ("http://example.com:99999/", None),
        ("http://user:secret@example.com/", None),
    ],
)
def test_the_first_web_link_outside_code(text: str, link: str | None) -> None:
    assert first_link(text) == link


def test_the_head_gives_the_card() -> None:
    html = (
        b"<html><head><meta charset=latin-1><TITLE>Caf\xe9\n  menu</TITLE>"
        b'<meta name="description" content="Soups &lt;b&gt;and\x07 bread">'
        b'<meta name="twitter:image" content="//cdn.example/p.png"></head>'
        b'<body><meta property="og:title" content="too late"></body></html>'
    )
    preview = parse_head(html, "text/html", "https://caf.example/menu")
    assert preview is not None
    assert preview.title == "Caf\xe9 menu"
    assert preview.description == "Soups <b>and bread"  # text, never markup
    assert preview.site_name == "caf.example"
    assert preview.image == "https://cdn.example/p.png"


def test_long_text_is_cut_and_unsafe_images_are_dropped() -> None:
    html = (
        '<meta property="og:title" content="' + "a" * 500 + '">'
        '<meta property="og:image" content="javascript:alert(1)">'
    ).encode()
    preview = parse_head(html, "text/html; charset=utf-8", "http://x.example/")
    assert preview is not None
    assert preview.title is not None
    assert len(preview.title) == 200
    assert preview.title.endswith("\u2026")
    assert preview.image is None
    assert parse_head(b"<p>no head at all</p>", "text/html", "http://x.example/") is None
    assert parse_head(b"<title> </title>", "text/html; charset=bogus", "http://x/") is None


def test_only_real_images_of_four_types() -> None:
    png = b"\x89PNG\r\n\x1a\n...."
    assert image_type("image/png", png) == "image/png"
    assert image_type("IMAGE/PNG; x=y", png) == "image/png"
    assert image_type("image/jpeg", png) is None  # the bytes say otherwise
    assert image_type("image/svg+xml", b"<svg/>") is None
    assert image_type("image/webp", b"RIFF\0\0\0\0WEBPVP8 ") == "image/webp"
    assert image_type("image/webp", b"RIFF\0\0\0\0WAVEfmt ") is None
    assert image_type("image/gif", b"GIF89a...") == "image/gif"


async def test_the_cache_is_bounded_by_entries_bytes_and_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cache = _Cache(entries=3, size=100, ttl=600)
    for key in "abc":
        cache.put(key, key, 10)
    cache.get("a")  # used: b is now the oldest
    cache.put("d", "d", 10)
    assert [cache.get(k) for k in "abcd"] == ["a", _MISSING, "c", "d"]
    cache.put("big", "big", 90)  # bytes: the oldest go until it fits
    assert cache.bytes <= 100
    assert cache.get("big") == "big"
    cache.put("huge", "huge", 101)  # never kept
    assert cache.get("huge") is _MISSING
    cache.put("kept", "kept")
    cache.put("failed", None)  # a failure is kept five minutes at most
    await trio.sleep(299)
    assert (cache.get("kept"), cache.get("failed")) == ("kept", None)
    await trio.sleep(2)
    assert (cache.get("kept"), cache.get("failed")) == ("kept", _MISSING)
    await trio.sleep(300)
    assert cache.get("kept") is _MISSING


class Resolver:
    def __init__(self, address: str) -> None:
        self.address = address

    async def getaddrinfo(self, host: Any, port: Any, *args: Any) -> list[Any]:
        family = trio.socket.AF_INET6 if ":" in self.address else trio.socket.AF_INET
        return [(family, trio.socket.SOCK_STREAM, 6, "", (self.address, port))]

    async def getnameinfo(self, sockaddr: Any, flags: int) -> Any:
        raise NotImplementedError


async def test_public_addresses_only_on_web_ports_private_ones_only_if_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    connects: list[tuple[str, int]] = []

    async def connect_tcp(self: Any, host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        connects.append((host, port))
        raise httpcore.ConnectError("no network in this test")

    monkeypatch.setattr(httpcore.TrioBackend, "connect_tcp", connect_tcp)
    transport = PublicOnlyTransport(
        allowed_by="listed", allowed=parse_networks(["10.1.0.0/16"]), ports=frozenset({80, 443})
    )
    resolver = Resolver("93.184.216.34")
    previous = trio.socket.set_custom_hostname_resolver(resolver)
    try:
        async with httpx.AsyncClient(transport=transport) as client:
            for url in ("http://site.example/", "https://site.example/"):
                with pytest.raises(httpx.ConnectError) as failed:
                    await client.get(url)
                assert not isinstance(failed.value, RefusedAddress)
            with pytest.raises(RefusedAddress, match="port 22"):
                await client.get("http://site.example:22/")
            resolver.address = "10.1.2.3"  # listed: any port
            with pytest.raises(httpx.ConnectError) as failed:
                await client.get("http://wiki.example:8080/")
            assert not isinstance(failed.value, RefusedAddress)
            for address in ("10.2.0.1", "127.0.0.1", "::1", "169.254.169.254"):
                resolver.address = address
                with pytest.raises(RefusedAddress, match="private address"):
                    await client.get("http://other.example/")
    finally:
        trio.socket.set_custom_hostname_resolver(previous)
    assert connects == [("93.184.216.34", 80), ("93.184.216.34", 443), ("10.1.2.3", 8080)]
