"""Link previews (decision 0072): a message's first link as a card, and
the card's image proxied by the node."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response

from ..services.link_previews import IMAGE_PATH
from ._common import caller, node, reply
from .contract import Query, Shape, answers, answers_media, public, query
from .objects import Id

bp = Blueprint("previews", __name__)

#: how a proxied image is served: never run, never sniffed, kept by the browser an hour
IMAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "X-Content-Type-Options": "nosniff",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "private, max-age=3600",
}


class LinkPreview(Shape):
    """What the card shows; null fields: the page did not say."""

    #: the link as written in the message
    url: str
    title: str | None
    description: str | None
    #: the page's og:site_name, else its host
    site_name: str | None
    #: the node's proxy of the page's image (a signed path), or null
    image: str | None


class MessagePreview(Shape):
    """The preview of a message's first link (null: no link, or nothing to show)."""

    room_id: Id
    message_id: Id
    preview: LinkPreview | None


class ImageQuery(Query):
    #: the image's address, as in a preview's ``image``
    url: str
    #: the node's signature of it, as in a preview's ``image``
    sig: str


@bp.get("/api/rooms/<room_id>/messages/<message_id>/preview")
@answers(MessagePreview)
async def message_preview(room_id: str, message_id: str) -> tuple[Any, int]:
    """The preview of a message's first web link, fetched by the node (a
    member who may read the message; 404 ``link_previews_off`` when the
    mesh has them off)."""
    actor = await caller()
    return reply(await node().link_previews.for_message(actor, room_id, message_id))


@bp.get(IMAGE_PATH)
@public("signature (the node's, in a preview it handed out)")
@query(ImageQuery)
@answers_media("image/png")
async def preview_image(args: ImageQuery) -> Response:
    """A preview's image, proxied by the node (PNG, JPEG, GIF or WebP),
    only at an address the node signed; served inert."""
    image = await node().link_previews.image(args.url, args.sig)
    return Response(image.data, headers=IMAGE_HEADERS, content_type=image.content_type)
