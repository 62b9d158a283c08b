"""A node's base URL, as an admin gives it or another node claims it
(``federation.service._base_url``): a plain http(s) base with at most a
plain path prefix; anything that would be sent along (credentials) or read
differently by the servers on the way (queries, escapes, dot segments) is
``invalid_url``."""

from __future__ import annotations

import pytest

from quart_mesh.errors import BadRequest
from quart_mesh.federation.service import _base_url

# the same whatever the store: run once, on SQLite
pytestmark = pytest.mark.store_free


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("https://mesh.example", "https://mesh.example"),
        ("https://mesh.example/", "https://mesh.example"),
        (" http://10.0.0.7:8000 ", "http://10.0.0.7:8000"),
        ("http://[::1]:8000/", "http://[::1]:8000"),
        ("https://example.org/mesh/", "https://example.org/mesh"),  # behind a proxy
        ("https://example.org/a.b/c_d-e~f", "https://example.org/a.b/c_d-e~f"),
    ],
)
def test_plain_base_urls_are_taken(url: str, base: str) -> None:
    assert _base_url(url) == base


@pytest.mark.parametrize(
    "url",
    [
        "http://user:secret@127.0.0.1:8199/internal/admin/reset",
        "http://user@mesh.example",
        "http://mesh.example?x=1",
        "http://mesh.example/?",
        "http://mesh.example/#top",
        "http://mesh.example/a/../internal",
        "http://mesh.example/./a",
        "http://mesh.example/a/..",
        "http://mesh.example/%2e%2e/admin",
        "http://mesh.example/a%2Fb",
        "http://mesh.example//internal",
        "http://mesh.example/a//b",
        "http://mesh.example\\@internal",
        "http://mesh.example/a\\b",
        "http://mesh.example/a b",
        "http://mesh.example/a\x00",
        "http://mesh.example/caf\u00e9",
        "http://mesh.example:0",
        "http://mesh.example:99999",
        "http://mesh.example:port",
        "ftp://mesh.example",
        "mesh.example",
        "http://",
        "http://" + "a" * 64 + ".example",
        "https://mesh.example/" + "a" * 2048,
    ],
)
def test_anything_else_is_an_invalid_url(url: str) -> None:
    with pytest.raises(BadRequest) as refused:
        _base_url(url)
    assert refused.value.code == "invalid_url"
