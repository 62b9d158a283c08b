"""Link previews (decision 0072): a card for the first web link of a message.

The node fetches the page itself, never the reader's browser: through the
outbound SSRF guard (``services/outbound.py``: only public addresses, or
the operator's ``link_preview_allow_networks``; only ports 80 and 443 of a
public address; every redirect a new, checked connection), within a time
bound (``link_preview_timeout``, redirects and reading included) and a size
bound (``link_preview_max_bytes`` of the page; the head is near its top).
Title, description, site name and image are read from the page's
``<title>`` and its Open Graph / Twitter / ``description`` meta tags with
the standard library's ``html.parser`` (a tolerant tokenizer kept with
Python; nothing is rendered, scripts are never run).

Nobody can use this as an open proxy or a port scanner: a preview is asked
for a *message* (``GET /api/rooms/:roomId/messages/:messageId/preview``),
through the one visibility decision, and only its first link is fetched;
fetches that miss the cache count against the ``link_previews`` rate rule;
every failure looks the same (no preview), whatever its cause. The image is
proxied by the node (``GET /api/link-preview/image?url=&sig=``) and only
for a URL the node itself signed (HMAC with a key derived from the node
secret) when it handed out a preview: it must be ``image/png``, ``jpeg``,
``gif`` or ``webp`` by its header and by its first bytes, at most
``link_preview_image_max_bytes``, and it is served inert.

Previews are kept in memory for ``link_preview_ttl`` (failures five minutes),
at most ``link_preview_cache_entries`` of them and
``link_preview_cache_bytes`` of images; one fetch per URL at a time (a
second asker waits for the first); at most :data:`CONCURRENCY` fetches at
once (another finds no preview then, and nothing is remembered of its URL:
links that stall cannot make others' previews fail for everyone).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import unicodedata
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any, Final
from urllib.parse import quote, urljoin, urlsplit

import httpx
import trio

from ..client_address import parse_networks
from ..config import Settings
from ..errors import MeshError, NotFound, Transient
from .authz import Actor
from .messages import Messages
from .outbound import PublicOnlyTransport, tls_context
from .ratelimit import RateLimiter

__all__ = [
    "IMAGE_PATH",
    "LinkPreviews",
    "Preview",
    "first_link",
    "image_type",
    "parse_head",
]

log = logging.getLogger(__name__)

#: where the node serves preview images
IMAGE_PATH: Final = "/api/link-preview/image"
#: redirects followed for one page or image
MAX_REDIRECTS: Final = 5
#: longest URL fetched or signed
MAX_URL: Final = 2048
#: ports a public address is reached on (the operator's networks: any)
PORTS: Final = frozenset({80, 443})
#: fetches running at once, over all participants (one more finds no
#: preview now, and nothing is remembered of its page: it is not asked)
CONCURRENCY: Final = 8
#: seconds a failure to get a preview is kept (a page may come back sooner)
FAILURE_TTL: Final = 300.0
#: what lets a private address through (named in logs only)
ALLOW: Final = "MESH_LINK_PREVIEW_ALLOW_NETWORKS lists the networks previews may reach"
#: image types served, each with its first bytes
IMAGE_TYPES: Final = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}
_HTML_TYPES: Final = ("text/html", "application/xhtml+xml")
_TITLE_CHARS, _DESCRIPTION_CHARS, _SITE_CHARS = 200, 400, 100

_CODE = re.compile(r"```.*?(?:```|\Z)|`[^`\n]*`", re.S)
_LINK = re.compile(r"(?<![\w@])https?://[^\s<>\"`]+", re.I)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]{1,40})""", re.I)
_SPACE = re.compile(r"\s+")
#: bidirectional overrides and isolates, and other format characters a
#: page could use to make the card read otherwise than it is
_HIDDEN = re.compile("[\u202a-\u202e\u2066-\u2069\u200b-\u200f\ufeff]")


def first_link(text: str) -> str | None:
    """The first ``http(s)`` address written in *text* (outside code), as
    the web client links it (trailing punctuation belongs to the sentence),
    or ``None``."""
    match = _LINK.search(_CODE.sub(" ", text))
    if match is None:
        return None
    url = match.group(0)[:MAX_URL]
    while url and (url[-1] in ".,;:!?'*_" or (url.endswith(")") and "(" not in url)):
        url = url[:-1]
    if url.endswith(")") and url.count("(") < url.count(")"):
        url = url[:-1]  # [text](https://...) and (see https://...)
    return url if _web_url(url) else None


def _web_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError:
        return False
    if not (
        parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and parts.username is None  # never send credentials someone wrote
        and parts.password is None
        and len(url) <= MAX_URL
    ):
        return False
    try:
        httpx.URL(url)  # what httpx cannot parse (an invalid IDNA host) is no link
    except (httpx.InvalidURL, ValueError):
        return False
    return True


def _host(url: str) -> str:
    """What a log line says of a URL: its host only (a message's link may
    carry a secret in its path or query)."""
    try:
        return (urlsplit(url).hostname or "?")[:200]
    except ValueError:
        return "?"


def image_type(content_type: str, data: bytes) -> str | None:
    """The image type of a body, if its header says an allowed one and its
    first bytes agree; else ``None``."""
    kind = content_type.split(";")[0].strip().lower()
    magics = IMAGE_TYPES.get(kind)
    if magics is None or not any(data.startswith(m) for m in magics):
        return None
    if kind == "image/webp" and data[8:12] != b"WEBP":
        return None
    return kind


def _clean(text: str | None, limit: int) -> str | None:
    if not text:
        return None
    text = _HIDDEN.sub("", text)
    text = "".join(c for c in text if unicodedata.category(c) != "Cc" or c in "\t\n")
    text = _SPACE.sub(" ", text).strip()
    if not text:
        return None
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "\u2026"


class _Head(HTMLParser):
    """Reads ``<title>`` and ``<meta>`` until the body starts."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.meta: dict[str, str] = {}
        self.title = ""
        self._in_title = False
        self.done = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.done:
            return
        if tag == "title":
            self._in_title = True
        elif tag == "meta":
            values = dict(attrs)
            key = (values.get("property") or values.get("name") or "").strip().lower()
            content = values.get("content")
            if key and content is not None and key not in self.meta and len(self.meta) < 200:
                self.meta[key] = content[:4096]
        elif tag == "body":
            self.done = True

    def handle_endtag(self, tag: str) -> None:
        if self.done:
            return
        if tag == "title":
            self._in_title = False
        elif tag == "head":
            self.done = True

    def handle_data(self, data: str) -> None:
        if self._in_title and len(self.title) < 4096:
            self.title += data


@dataclass(frozen=True, slots=True)
class Preview:
    """What a card shows of a page; ``image`` is the page's image address
    (the node signs and proxies it)."""

    url: str
    title: str | None
    description: str | None
    site_name: str | None
    image: str | None


def parse_head(html: bytes, content_type: str, page_url: str) -> Preview | None:
    """A preview of the page *html* (at most its start) found at *page_url*,
    or ``None`` when it has neither a title nor a description."""
    charset = _charset(content_type, html)
    try:
        text = html.decode(charset, errors="replace")
    except LookupError:
        text = html.decode("utf-8", errors="replace")
    parser = _Head()
    for start in range(0, len(text), 8192):
        parser.feed(text[start : start + 8192])
        if parser.done:
            break
    meta = parser.meta
    title = _clean(meta.get("og:title") or meta.get("twitter:title") or parser.title, _TITLE_CHARS)
    description = _clean(
        meta.get("og:description") or meta.get("twitter:description") or meta.get("description"),
        _DESCRIPTION_CHARS,
    )
    if title is None and description is None:
        return None
    site = _clean(meta.get("og:site_name"), _SITE_CHARS) or urlsplit(page_url).hostname
    image = None
    for key in ("og:image:secure_url", "og:image", "og:image:url", "twitter:image"):
        if meta.get(key):
            candidate = urljoin(page_url, meta[key].strip())
            if _web_url(candidate):
                image = candidate
                break
    return Preview(page_url, title, description, site, image)


def _charset(content_type: str, html: bytes) -> str:
    for part in content_type.split(";")[1:]:
        name, _, value = part.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            return value.strip().strip("\"'")
    found = _META_CHARSET.search(html[:4096])
    return found.group(1).decode("ascii") if found else "utf-8"


class _Missing:
    pass


class _Busy(Exception):
    """Every fetch slot is taken: nothing was asked, so nothing is known
    (a failure would be remembered for every reader)."""


_MISSING: Final = _Missing()


class _Cache:
    """Least recently used entries, each kept *ttl* seconds, at most
    *entries* of them and *size* bytes (by the sizes they are put with)."""

    def __init__(self, entries: int, size: int, ttl: float) -> None:
        self._items: OrderedDict[str, tuple[float, int, Any]] = OrderedDict()
        self._entries, self._size, self._ttl = entries, size, ttl
        self.bytes = 0

    def get(self, key: str) -> Any:
        item = self._items.get(key)
        if item is None:
            return _MISSING
        if item[0] <= trio.current_time():
            self._drop(key)
            return _MISSING
        self._items.move_to_end(key)
        return item[2]

    def put(self, key: str, value: Any, size: int = 0) -> None:
        """Keep *value* (a failure, ``None``, for at most :data:`FAILURE_TTL`)."""
        if key in self._items:
            self._drop(key)
        if size > self._size:
            return
        ttl = self._ttl if value is not None else min(self._ttl, FAILURE_TTL)
        self._items[key] = (trio.current_time() + ttl, size, value)
        self.bytes += size
        while len(self._items) > self._entries or self.bytes > self._size:
            self._drop(next(iter(self._items)))

    def _drop(self, key: str) -> None:
        self.bytes -= self._items.pop(key)[1]

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True, slots=True)
class Image:
    content_type: str
    data: bytes


class LinkPreviews:
    """Previews of messages' links and their images (module docstring).
    Reached as ``node.link_previews``.

    Args:
        enabled: whether the mesh has link previews on now (the owner's switch).
    """

    def __init__(
        self,
        settings: Settings,
        messages: Messages,
        rate: RateLimiter,
        secret: bytes,
        enabled: Callable[[], bool],
    ) -> None:
        self._settings = settings
        self._messages = messages
        self._rate = rate
        self._enabled = enabled
        self._key = hashlib.sha256(b"quart-mesh link previews\0" + secret).digest()
        self._networks = parse_networks(settings.link_preview_allow_networks)
        self._pages = _Cache(
            settings.link_preview_cache_entries, 1 << 62, settings.link_preview_ttl
        )
        self._images = _Cache(
            settings.link_preview_cache_entries,
            settings.link_preview_cache_bytes,
            settings.link_preview_ttl,
        )
        self._pending: dict[str, trio.Event] = {}
        self._limiter = trio.CapacityLimiter(CONCURRENCY)

    # the API ---------------------------------------------------------------

    async def for_message(self, actor: Actor, room_id: str, message_id: str) -> dict[str, Any]:
        """``GET /api/rooms/:roomId/messages/:messageId/preview``: the preview
        of the message's first link (``preview`` null: no link, or nothing
        to show), for one who may read the message.

        Cancellation: safe; a fetch cut short is not cached.

        Raises:
            NotFound, Forbidden: as reading the message by id.
            NotFound: link previews are off on this mesh (``link_previews_off``).
            RateLimited: the ``link_previews`` rule (fetches only).
        """
        message = await self._messages.get(actor, message_id, room_id=room_id)
        self._check_on()
        url = first_link(message.content)
        preview = None if url is None else await self._page(url, actor)
        return {
            "roomId": message.room_id,
            "messageId": message.message_id,
            "preview": None if preview is None else self._render(url or "", preview),
        }

    async def image(self, url: str, signature: str) -> Image:
        """``GET /api/link-preview/image``: the image at *url*, if the node
        signed it (*signature*) in a preview.

        Raises:
            NotFound: previews are off (``link_previews_off``), a bad
                signature, or no image to show there (``image_not_found``).
        """
        self._check_on()
        expected = self._sign(url).encode()
        if not hmac.compare_digest(expected, signature.encode()) or not _web_url(url):
            raise NotFound("no such image", "image_not_found")
        image = await self._once("image " + url, self._images, lambda: self._fetch_image(url))
        if not isinstance(image, Image):
            raise NotFound("no image to show at that address", "image_not_found")
        return image

    # helpers ---------------------------------------------------------------

    def _check_on(self) -> None:
        if not self._enabled():
            raise NotFound("link previews are off on this mesh", "link_previews_off")

    def _sign(self, url: str) -> str:
        return hmac.new(self._key, url.encode(), hashlib.sha256).hexdigest()[:32]

    def _render(self, url: str, preview: Preview) -> dict[str, Any]:
        image = None
        if preview.image is not None:
            image = (
                f"{IMAGE_PATH}?url={quote(preview.image, safe='')}&sig={self._sign(preview.image)}"
            )
        return {
            "url": url,
            "title": preview.title,
            "description": preview.description,
            "siteName": preview.site_name,
            "image": image,
        }

    async def _page(self, url: str, actor: Actor) -> Preview | None:
        cached = self._pages.get("page " + url)
        if cached is not _MISSING:
            return cached if isinstance(cached, Preview) else None
        if "page " + url not in self._pending:
            self._rate.participant("link_previews", actor)  # a fetch: counted
        found = await self._once("page " + url, self._pages, lambda: self._fetch_page(url))
        return found if isinstance(found, Preview) else None

    async def _once(
        self, key: str, cache: _Cache, fetch: Callable[[], Awaitable[tuple[Any, int]]]
    ) -> Any:
        """The cached value of *key*, else *fetch*'s (cached); one fetch per
        key at a time, the others wait for it."""
        while True:
            cached = cache.get(key)
            if cached is not _MISSING:
                return cached
            pending = self._pending.get(key)
            if pending is None:
                break
            await pending.wait()
            if cache.get(key) is _MISSING:
                return None  # the first fetch was cut short (or evicted at once)
        done = self._pending[key] = trio.Event()
        try:
            try:
                value, size = await fetch()
            except _Busy:
                log.info(
                    "link preview: every fetch slot is taken: this %s is not asked now",
                    key.partition(" ")[0],
                )
                return None  # not cached: the address was never asked
            cache.put(key, value, size)
            return value
        finally:
            del self._pending[key]
            done.set()

    def _client(self) -> httpx.AsyncClient:
        settings = self._settings
        transport = (
            None
            if settings.outbound_allow_private
            else PublicOnlyTransport(allowed_by=ALLOW, allowed=self._networks, ports=PORTS)
        )
        return httpx.AsyncClient(
            timeout=settings.link_preview_timeout,
            follow_redirects=False,
            trust_env=False,
            verify=tls_context(),
            transport=transport,
            headers={
                "User-Agent": "quart-mesh link preview",
                "Accept-Encoding": "identity",
            },
        )

    async def _get(
        self, url: str, accept: str, want: Callable[[str], bool], limit: int, cut: bool
    ) -> tuple[str, str, bytes] | None:
        """The final URL, content type and body of *url* (redirects
        followed, each checked), if its type is one *want* takes and (unless
        *cut*: read only the first *limit* bytes) it is at most *limit*
        bytes; ``None`` on any failure, the time bound included.

        Raises:
            _Busy: every fetch slot is taken (the address is not asked).
        """
        try:
            self._limiter.acquire_nowait()
        except trio.WouldBlock:
            raise _Busy from None
        try:
            return await self._get_one(url, accept, want, limit, cut)
        finally:
            self._limiter.release()

    async def _get_one(
        self, url: str, accept: str, want: Callable[[str], bool], limit: int, cut: bool
    ) -> tuple[str, str, bytes] | None:
        with trio.move_on_after(self._settings.link_preview_timeout):
            async with self._client() as client:
                for _ in range(MAX_REDIRECTS + 1):
                    if not _web_url(url):
                        return None
                    request = client.build_request("GET", url, headers={"Accept": accept})
                    response = await client.send(request, stream=True)
                    try:
                        if response.is_redirect:
                            location = response.headers.get("location", "")
                            url = urljoin(url, location.strip()) if location else ""
                            continue
                        return await self._body(response, url, want, limit, cut)
                    finally:
                        await response.aclose()
        return None

    @staticmethod
    async def _body(
        response: httpx.Response,
        url: str,
        want: Callable[[str], bool],
        limit: int,
        cut: bool,
    ) -> tuple[str, str, bytes] | None:
        content_type = response.headers.get("content-type", "")
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if response.status_code != 200 or encoding not in ("", "identity"):
            return None
        if not want(content_type.split(";")[0].strip().lower()):
            return None
        declared = response.headers.get("content-length", "")
        if not cut and declared.isdigit() and int(declared) > limit:
            return None
        body = bytearray()
        async for chunk in response.aiter_raw():
            body += chunk
            if len(body) > limit:
                if not cut:
                    return None
                del body[limit:]
                break
        return url, content_type, bytes(body)

    async def _fetch_page(self, url: str) -> tuple[Preview | None, int]:
        try:
            got = await self._get(
                url,
                "text/html,application/xhtml+xml;q=0.9",
                lambda kind: kind in _HTML_TYPES,
                self._settings.link_preview_max_bytes,
                cut=True,
            )
            if got is None:
                log.info("link preview: nothing to show at %s", _host(url))
                return None, 0
            final, content_type, body = got
            preview = await trio.to_thread.run_sync(parse_head, body, content_type, final)
        except (httpx.HTTPError, httpx.InvalidURL, MeshError, OSError, ValueError) as error:
            log.info("link preview: %s failed: %s", _host(url), type(error).__name__)
            return None, 0
        return preview, 0

    async def _fetch_image(self, url: str) -> tuple[Image | None, int]:
        try:
            got = await self._get(
                url,
                ", ".join(IMAGE_TYPES),
                lambda kind: kind in IMAGE_TYPES,
                self._settings.link_preview_image_max_bytes,
                cut=False,
            )
        except (
            httpx.HTTPError,
            httpx.InvalidURL,
            Transient,
            MeshError,
            OSError,
            ValueError,
        ) as error:
            log.info("link preview image: %s failed: %s", _host(url), type(error).__name__)
            return None, 0
        kind = None if got is None else image_type(got[1], got[2])
        if got is None or kind is None:
            log.info("link preview image: nothing to show at %s", _host(url))
            return None, 0
        return Image(kind, got[2]), len(got[2])
