"""Search: what was said, over the messages the caller may read now
(``docs/rest.md`` "Search", decision 0059).

Every way in (``GET /api/search``, the WebSocket ``search`` frame) calls
:meth:`Search.search`; the rooms searched are the visibility decision's
(:func:`.authz.readable_rooms`) over the rooms the caller is in, DMs
included, as history and live delivery decide.

The index itself is the store's (``store/search.py``); messages stored
before it existed are indexed in the background by :meth:`Search.run_indexer`
(one process of the mesh at a time), newest first, in small batches.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import logging
import re
from dataclasses import dataclass
from typing import Any, Final

import trio
from sqlalchemy.engine import Connection

from .. import search_text
from ..config import Limits
from ..errors import BadRequest
from ..ids import is_ulid
from ..records import Message
from ..search_text import Query, QueryError
from ..store import Database
from ..store import accounts as accounts_repo
from ..store import messages as messages_repo
from ..store import rooms as rooms_repo
from ..store import search as repo
from .authz import Actor, readable_rooms
from .ratelimit import RateLimiter
from .validation import cursor_number

__all__ = ["SORTS", "Found", "Search", "SearchPage"]

log = logging.getLogger(__name__)

#: how results are ordered
SORTS: Final = ("newest", "relevance")
#: results per page when the caller does not say
DEFAULT_LIMIT: Final = 20
#: messages indexed per transaction by the background indexer, and the pause
#: between batches (seconds): the node's other writes go in between
INDEX_BATCH: Final = 2000
INDEX_PAUSE: Final = 0.01
#: progress in the log at most this often (seconds)
_PROGRESS_EVERY: Final = 10.0

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DAY_MS: Final = 86_400_000


@dataclass(frozen=True, slots=True)
class Found:
    """One result: the message, its room's name (a DM: the other party's),
    and an excerpt of its content with the matched ranges."""

    message: Message
    room_name: str
    snippet: str
    #: ``(start, end)`` in code points of :attr:`snippet`, end exclusive
    highlights: tuple[tuple[int, int], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "message": self.message.to_json(),
            "roomName": self.room_name,
            "snippet": {
                "text": self.snippet,
                "highlights": [{"start": s, "end": e} for s, e in self.highlights],
            },
        }


@dataclass(frozen=True, slots=True)
class SearchPage:
    results: list[Found]
    #: pass back as ``cursor`` for the next page; ``None``: the last page
    next_cursor: str | None

    def to_json(self) -> dict[str, Any]:
        return {"results": [r.to_json() for r in self.results], "nextCursor": self.next_cursor}


def _bad(message: str, code: str = "invalid_query") -> BadRequest:
    return BadRequest(message, code)


def _encode_cursor(sort: str, value: int) -> str:
    raw = f"{sort[0]}{value}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str, sort: str) -> int:
    """The position an opaque cursor holds (for *sort*).

    Raises:
        BadRequest: not a cursor this search gave (``invalid_cursor``).
    """
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raw = ""
    value = cursor_number(raw[1:]) if raw[:1] == sort[0] and len(cursor) <= 32 else None
    if value is None:
        raise _bad("cursor is not one this search gave", "invalid_cursor")
    return value


def _moment(value: str, field: str, *, after: bool) -> tuple[int | None, int | None]:
    """A ``before``/``after`` value as (a cursor, a time in ms): a cursor
    (digits), a date (``YYYY-MM-DD``, UTC: ``before`` the day began,
    ``after`` it ended) or an ISO 8601 time (UTC unless it says).

    Raises:
        BadRequest: none of these.
    """
    cursor = cursor_number(value)
    if cursor is not None:
        return cursor, None
    try:
        if _DATE.fullmatch(value):
            day = dt.datetime.fromisoformat(value).replace(tzinfo=dt.UTC)
            ms = int(day.timestamp() * 1000)
            return None, ms + _DAY_MS if after else ms
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        moment = None
    if moment is None:
        raise _bad(f"{field} must be a date (YYYY-MM-DD), an ISO 8601 time or a cursor")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    ms = int(moment.timestamp() * 1000)
    return None, ms + 1 if after else ms


class Search:
    """Owns message search (module docstring): the queries, over the rooms
    the caller may read now, and the background indexing of messages stored
    before the index (:meth:`run_indexer`). Used by ``GET /api/search``
    (and the WebSocket ``search`` frame). Reached as ``node.search``.
    """

    def __init__(
        self,
        db: Database,
        limits: Limits,
        rate_limits: RateLimiter | None = None,
        *,
        language: str = "simple",
    ) -> None:
        self._db = db
        self._limits = limits
        self._rate = rate_limits or RateLimiter()
        self._language = language
        search_text.fold("é")  # the tokenizer's tables, built now rather than on a request

    async def search(
        self,
        actor: Actor,
        q: str | None,
        *,
        room: str | None = None,
        sender: str | None = None,
        before: str | None = None,
        after: str | None = None,
        within: str | None = None,
        has: str | None = None,
        mentions: str | None = None,
        sort: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> SearchPage:
        """A page of the messages matching *q* and the filters, in the rooms
        the actor may read now. Filters given as arguments win over the same
        ones typed in *q*.

        Raises:
            BadRequest: an empty query (no words and no filters), a bad
                filter, sort, cursor or limit (``invalid_query``,
                ``invalid_cursor``, ``invalid_limit``).
            RateLimited: the ``search`` rule.
        """
        try:
            query = search_text.parse_query(q or "")
        except QueryError as exc:
            raise _bad(str(exc)) from exc
        typed = dict(query.filters)
        for name, value in (
            ("room", room),
            ("from", sender),
            ("before", before),
            ("after", after),
            ("in", within),
            ("has", has),
            ("mentions", mentions),
        ):
            if value is not None:
                typed[name] = value
        for name, value in typed.items():
            if not value.isprintable() or len(value) > 200:
                raise _bad(f"{name}: takes at most 200 printable characters")
        sort = sort or "newest"
        if sort not in SORTS:
            raise _bad("sort must be newest or relevance")
        if limit is None:
            limit = DEFAULT_LIMIT
        if not 1 <= limit <= self._limits.max_page_size:
            raise _bad(f"limit must be between 1 and {self._limits.max_page_size}", "invalid_limit")
        position = None if cursor is None else _decode_cursor(cursor, sort)
        flags = self._flags(typed)
        if not query.positive and not typed:
            raise _bad("say what to search for: a word, a phrase or a filter")
        self._rate.participant("search", actor)
        readable = readable_rooms(actor)
        relevance = sort == "relevance" and bool(query.positive)

        def read(conn: Connection) -> tuple[list[Found], bool]:
            filters = self._filters(conn, actor, typed, flags)
            seqs = repo.search(
                conn,
                actor.participant_id,
                (readable.everywhere, readable.exceptions),
                query.terms,
                filters,
                relevance=relevance,
                below=None if relevance else position,
                offset=(position or 0) if relevance else 0,
                limit=limit + 1,  # one more: is there a next page
            )
            found = messages_repo.messages_by_seq(conn, seqs[:limit])
            labels = rooms_repo.room_labels(
                conn, sorted({m.room_id for m in found}), actor.participant_id
            )
            # the snippets here too, off the event loop
            results = [self._found(m, labels.get(m.room_id, ""), query) for m in found]
            return results, len(seqs) > limit

        results, more = await self._db.read(read)
        next_cursor = None
        if more and results:
            at = (position or 0) + limit if relevance else results[-1].message.seq
            next_cursor = _encode_cursor(sort, at)
        return SearchPage(results, next_cursor)

    @staticmethod
    def _flags(typed: dict[str, str]) -> tuple[bool, bool, bool]:
        """(in a thread, has a file, mentions the caller), as the filters say.

        Raises:
            BadRequest: a value these filters do not take.
        """
        expected = {"in": ("thread",), "has": ("file", "files", "attachment"), "mentions": ("me",)}
        for name, values in expected.items():
            if name in typed and typed[name].lower() not in values:
                raise _bad(f"{name}: takes {values[0]}")
        return "in" in typed, "has" in typed, "mentions" in typed

    @staticmethod
    def _filters(
        conn: Connection, actor: Actor, typed: dict[str, str], flags: tuple[bool, bool, bool]
    ) -> repo.Filters:
        """The store's filters for the typed ones, names resolved.

        Raises:
            BadRequest: a participant that does not exist, a bad time.
        """
        room_ids = None
        if "room" in typed:
            # a name that is no room's finds nothing, as a room one may not
            # read: whether such a room exists is not the caller's to learn
            value = typed["room"].strip()
            room_id = value if is_ulid(value) else rooms_repo.room_id_named(conn, value)
            room_ids = () if room_id is None else (room_id,)
        sender_id = None
        if "from" in typed:
            value = typed["from"].strip()
            if is_ulid(value):
                sender_id = value
            else:
                found = accounts_repo.get_participant_by_name(conn, value.removeprefix("@"))
                if found is None:
                    raise _bad(f"from: no participant is named {value!r}")
                sender_id = found[0].participant_id
        before_seq = before_at = after_seq = after_at = None
        if "before" in typed:
            before_seq, before_at = _moment(typed["before"], "before", after=False)
        if "after" in typed:
            after_seq, after_at = _moment(typed["after"], "after", after=True)
        in_thread, has_file, mentions = flags
        return repo.Filters(
            room_ids=room_ids,
            sender_id=sender_id,
            before_seq=before_seq,
            after_seq=after_seq,
            before_at=before_at,
            after_at=after_at,
            in_thread=in_thread,
            has_file=has_file,
            mentions=(actor.participant_id, actor.name) if mentions else None,
        )

    @staticmethod
    def _found(message: Message, room_name: str, query: Query) -> Found:
        text, spans = search_text.snippet(message.content, query.positive)
        return Found(message, room_name, text, tuple(spans))

    # -- the index's upkeep --------------------------------------------------

    async def run_indexer(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Apply the index's configuration, then index the messages not yet
        indexed, newest first, a batch per transaction; return when none are
        left. Run by one process of the mesh at a time."""
        if await self._db.write(lambda conn: repo.use_config(conn, self._language)):
            log.info("search: indexing every message again (language %s)", self._language)
        left = await self._db.read(repo.pending_count)
        task_status.started()
        if not left:
            return
        log.info("search: indexing %d earlier messages", left)
        done = 0
        started = trio.current_time()
        last_said = started
        while True:
            indexed, more = await self._db.write(lambda conn: repo.backfill(conn, INDEX_BATCH))
            done += indexed
            now = trio.current_time()
            if not more:
                break
            if now - last_said >= _PROGRESS_EVERY:
                log.info("search: indexed %d of %d earlier messages", done, left)
                last_said = now
            await trio.sleep(INDEX_PAUSE)
        log.info(
            "search: indexed %d earlier messages in %.1f s", done, trio.current_time() - started
        )
