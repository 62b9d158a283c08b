"""The browser client for humans (``docs/web.md``): static files served at ``/``.

The client is plain HTML, CSS and JavaScript modules in ``static/``, shipped
in the package and served as they are (no build step, nothing fetched from
elsewhere). It speaks only the public REST API and ``/ws``, as any client
does (``docs/decisions/0030-web-client.md``).

``GET /`` is the page; ``GET /web/<name>`` its assets. The files are read
once, when the app is built, and answered from memory with an ``ETag``
(``Cache-Control: no-cache``: the browser asks again and gets ``304`` while
nothing changed). Every answer carries a strict Content-Security-Policy:
script only from this origin's files (no inline script, no ``eval``), no
string-to-HTML sinks (Trusted Types), connections only to this origin,
frames only of this origin (the app store runs the node's sandboxed
``/api/apps/<id>/run`` pages, ``docs/decisions/0050-apps-in-the-web-client.md``),
and the page itself never framed. User content is rendered as text by the
client, so even a message that looks like markup cannot run.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from quart import Blueprint, Response, request

from ..errors import NotFound

__all__ = ["ASSETS_PREFIX", "CONTENT_SECURITY_POLICY", "STATIC_DIR", "bp", "load_assets"]

#: where the client's files live in the package
STATIC_DIR: Final = Path(__file__).parent / "static"
#: the path the assets are served under
ASSETS_PREFIX: Final = "/web/"

CONTENT_SECURITY_POLICY: Final = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        # uploads shown inline are served by this node
        "img-src 'self'",
        "media-src 'self'",
        # REST and the WebSocket (CSP 3: 'self' covers ws:/wss: to this host)
        "connect-src 'self'",
        "manifest-src 'self'",
        # only the node's own pages: apps run from /api/apps/<id>/run, which
        # the node serves under its own CSP sandbox (an opaque origin, no
        # network); the client frames them with sandbox="allow-scripts"
        "frame-src 'self'",
        "worker-src 'none'",
        "object-src 'none'",
        "base-uri 'none'",
        # forms are handled by the script; a browser never submits one anywhere
        "form-action 'none'",
        "frame-ancestors 'none'",
        # no string ever becomes HTML: innerHTML and friends throw
        "require-trusted-types-for 'script'",
        "trusted-types 'none'",
    )
)

_HEADERS: Final = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=(), payment=(), usb=()",
    "Cache-Control": "no-cache",
}

_TYPES: Final = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".webmanifest": "application/manifest+json",
}


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


def load_assets(root: Path = STATIC_DIR) -> dict[str, Asset]:
    """Every servable file under *root*, by its path relative to *root*
    (``"js/main.js"``). Files of unknown types are not served."""
    assets = {}
    for path in sorted(root.rglob("*")):
        content_type = _TYPES.get(path.suffix)
        if content_type is None or not path.is_file():
            continue
        body = path.read_bytes()
        etag = hashlib.sha256(body).hexdigest()[:32]
        assets[path.relative_to(root).as_posix()] = Asset(body, content_type, etag)
    return assets


bp = Blueprint("web", __name__)
_ASSETS: dict[str, Asset] = {}


@bp.record_once
def _load(_state: object) -> None:
    _ASSETS.update(load_assets())


@bp.get("/")
async def index() -> Response:
    return _serve("index.html")


@bp.get(ASSETS_PREFIX + "<path:name>")
async def asset(name: str) -> Response:
    if name == "index.html":  # the page lives at /
        raise NotFound("no such file", "not_found")
    return _serve(name)


def _serve(name: str) -> Response:
    found = _ASSETS.get(name)
    if found is None:
        raise NotFound("no such file", "not_found")
    headers = {**_HEADERS, "ETag": f'"{found.etag}"'}
    if found.etag in request.if_none_match:
        return Response(b"", status=304, headers=headers)
    return Response(found.body, content_type=found.content_type, headers=headers)
