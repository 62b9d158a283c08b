"""Search (``docs/rest.md`` "Search"; an extension of the spec)."""

from __future__ import annotations

from typing import Any

import msgspec
from quart import Blueprint

from ._common import caller, node, reply
from .contract import Query, Shape, answers, query
from .objects import Message

bp = Blueprint("search", __name__)


class SearchQuery(Query):
    #: words (all must match), "a phrase", prefix*, -excluded, and the
    #: filters below typed as ``name:value`` (``from:@bob in:thread``)
    q: str | None = None
    #: a room id or name
    room: str | None = None
    #: a participant id or ``@name``
    sender: str | None = msgspec.field(default=None, name="from")
    #: a date (``YYYY-MM-DD``, UTC; that day excluded), an ISO 8601 time or a cursor
    before: str | None = None
    after: str | None = None
    #: ``thread``: replies in threads, and messages that have replies
    within: str | None = msgspec.field(default=None, name="in")
    #: ``file``: messages with attachments
    has: str | None = None
    #: ``me``: messages addressed to the caller or mentioning ``@`` its name
    mentions: str | None = None
    #: ``newest`` (default) or ``relevance``
    sort: str | None = None
    #: the ``nextCursor`` of the page before
    cursor: str | None = None
    #: results per page (default 20; the node caps it)
    limit: int | None = None


class Highlight(Shape):
    """A matched range of the snippet, in code points (end exclusive)."""

    start: int
    end: int


class Snippet(Shape):
    """An excerpt of the message's content (plain text, never HTML)."""

    text: str
    highlights: list[Highlight]


class Result(Shape):
    message: Message
    #: the room's name; a DM's: the other party's name
    room_name: str
    snippet: Snippet


class SearchResults(Shape):
    """A page of results and the cursor of the next (null: the last page)."""

    results: list[Result]
    next_cursor: str | None


@bp.get("/api/search")
@query(SearchQuery)
@answers(SearchResults)
async def search(args: SearchQuery) -> tuple[Any, int]:
    """Search the messages of the rooms and DMs the caller may read."""
    actor = await caller()
    page = await node().search.search(
        actor,
        args.q,
        room=args.room,
        sender=args.sender,
        before=args.before,
        after=args.after,
        within=args.within,
        has=args.has,
        mentions=args.mentions,
        sort=args.sort,
        cursor=args.cursor,
        limit=args.limit,
    )
    return reply(page.to_json())
