"""Text as search sees it (decision 0059): the one folding of message text
and of queries, the query language, and the matched ranges of a snippet.

Both stores index the *folded* text of a message (:func:`fold`), so that
case and accents fold the same way on SQLite and PostgreSQL and every
script tokenises alike:

- a token is a run of letters, digits and combining marks (not ``_``);
- it is decomposed (NFKD), stripped of its diacritics (the generic
  combining blocks: ``é`` -> ``e``; the vowel signs of Indic scripts stay),
  composed again (NFC) and case-folded (``Straße`` -> ``strasse``);
- in scripts written without spaces between words (Han, kana, Hangul,
  Thai, Lao, Khmer, Myanmar) each character is a token of its own: a word
  of several is searched as a phrase of its characters (``東京`` finds
  ``東京タワー``).

The query language (``docs/rest.md``, "Search"): words (all must match),
``"a phrase"``, ``prefix*``, ``-excluded`` (a word or a phrase), and the
filters ``room:`` ``from:`` ``before:`` ``after:`` ``in:thread``
``has:file`` ``mentions:me``. Anything else is text.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = [
    "FILTERS",
    "MAX_QUERY_LENGTH",
    "MAX_TERMS",
    "Query",
    "QueryError",
    "Term",
    "fold",
    "highlight",
    "parse_query",
    "snippet",
    "tokens",
]

#: the longest query accepted, in characters
MAX_QUERY_LENGTH = 500
#: the most words and phrases a query may have (each is a join in the index)
MAX_TERMS = 16
#: the filters the query language knows (``key:value``)
FILTERS = frozenset({"room", "from", "before", "after", "in", "has", "mentions"})

# scripts written without spaces: each character a token (ranges of code points)
_UNSPACED = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x2E80, 0x2FDF),  # CJK radicals
    (0x3040, 0x31FF),  # Hiragana, Katakana, Bopomofo, Hangul compatibility jamo, ...
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xA960, 0xA97F),  # Hangul jamo extended A
    (0xAC00, 0xD7FF),  # Hangul syllables, jamo extended B
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # halfwidth katakana
    (0x20000, 0x3FFFF),  # CJK extensions B-H
)
# the generic combining diacritics, stripped when folding
_DIACRITICS = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")


_ASCII_TOKEN = re.compile(r"[A-Za-z0-9]+")


@functools.cache
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(a token, a run of unspaced-script characters); built once, when first
    needed (the marks are gathered from the Unicode database)."""
    ranges: list[tuple[int, int]] = []
    for c in range(0x300, 0x110000):
        if unicodedata.category(chr(c)).startswith("M"):
            if ranges and ranges[-1][1] == c - 1:
                ranges[-1] = (ranges[-1][0], c)
            else:
                ranges.append((c, c))
    marks = "".join(f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in ranges)
    token = re.compile(rf"(?:[^\W_]|[{marks}])+")
    unspaced = re.compile(
        "[" + "".join(f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in _UNSPACED) + "]"
    )
    return token, unspaced


def _fold_word(word: str) -> str:
    if word.isascii():
        return word.lower()
    decomposed = unicodedata.normalize("NFKD", word)
    return unicodedata.normalize("NFC", _DIACRITICS.sub("", decomposed)).casefold()


def tokens(text: str) -> Iterator[tuple[str, int, int]]:
    """The folded tokens of *text*, each with its span in *text* (code points)."""
    if text.isascii():  # most text: the same tokens, found faster
        for match in _ASCII_TOKEN.finditer(text):
            yield match.group().lower(), match.start(), match.end()
        return
    token, unspaced = _patterns()
    for match in token.finditer(text):
        word, start = match.group(), match.start()
        if word.isascii() or not unspaced.search(word):
            folded = _fold_word(word)
            if folded:
                yield folded, start, match.end()
            continue
        # split: each unspaced character alone, the runs between as words
        at = 0
        for char in unspaced.finditer(word):
            if char.start() > at:
                folded = _fold_word(word[at : char.start()])
                if folded:
                    yield folded, start + at, start + char.start()
            yield _fold_word(char.group()), start + char.start(), start + char.end()
            at = char.end()
        if at < len(word):
            folded = _fold_word(word[at:])
            if folded:
                yield folded, start + at, start + len(word)


def fold(text: str) -> str:
    """The text the index holds for *text*: its folded tokens, space-separated."""
    if text.isascii():
        return " ".join(_ASCII_TOKEN.findall(text.lower()))
    return " ".join(t for t, _, _ in tokens(text))


class QueryError(ValueError):
    """A query that cannot be run (said why, for the person who typed it)."""


@dataclass(frozen=True, slots=True)
class Term:
    """A word or phrase of a query: folded tokens that must be adjacent, in
    order; with *prefix*, the last one only begins a token."""

    tokens: tuple[str, ...]
    prefix: bool = False
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Query:
    terms: tuple[Term, ...] = ()
    #: filter name -> value, as typed (the last one of a name wins)
    filters: dict[str, str] = field(default_factory=dict)

    @property
    def positive(self) -> tuple[Term, ...]:
        return tuple(t for t in self.terms if not t.negated)

    @property
    def negative(self) -> tuple[Term, ...]:
        return tuple(t for t in self.terms if t.negated)


# a piece of a query: -? then a quoted phrase, a key:"quoted value", or a bare word
_PIECE = re.compile(r'(-?)(?:"([^"]*)"?|([A-Za-z]+):"([^"]*)"?|(\S+))')


def parse_query(text: str) -> Query:
    """Parse a query as people type it.

    Raises:
        QueryError: too long, or too many words and phrases.
    """
    if len(text) > MAX_QUERY_LENGTH:
        raise QueryError(f"a search is at most {MAX_QUERY_LENGTH} characters")
    terms: list[Term] = []
    filters: dict[str, str] = {}
    for match in _PIECE.finditer(text):
        minus, phrase, key, quoted_value, bare = match.groups()
        negated = minus == "-"
        if key is not None:
            if key.lower() in FILTERS and not negated:
                filters[key.lower()] = quoted_value
                continue
            bare = f"{key}:{quoted_value}"
        if bare is not None and not negated and ":" in bare:
            name, _, value = bare.partition(":")
            if name.lower() in FILTERS and value:
                filters[name.lower()] = value
                continue
        prefix = phrase is None and bare is not None and bare.endswith("*")
        source = phrase if phrase is not None else bare.rstrip("*")
        folded = tuple(t for t, _, _ in tokens(source))
        if folded:
            terms.append(Term(folded, prefix=prefix, negated=negated))
    if len(terms) > MAX_TERMS:
        raise QueryError(f"a search has at most {MAX_TERMS} words and phrases")
    return Query(tuple(terms), filters)


def highlight(text: str, terms: tuple[Term, ...]) -> list[tuple[int, int]]:
    """The spans of *text* (code points, end exclusive) that the positive
    *terms* match, in order, not overlapping."""
    found = list(tokens(text))
    spans: list[tuple[int, int]] = []
    for term in terms:
        if term.negated:
            continue
        size = len(term.tokens)
        for i in range(len(found) - size + 1):
            window = found[i : i + size]
            if all(a[0] == b for a, b in zip(window[:-1], term.tokens[:-1], strict=True)) and (
                window[-1][0].startswith(term.tokens[-1])
                if term.prefix
                else window[-1][0] == term.tokens[-1]
            ):
                spans.append((window[0][1], window[-1][2]))
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


#: a snippet's length at most, in characters, and how much of it comes before the first match
SNIPPET_LENGTH = 200
_LEAD = 60
_ELLIPSIS = "…"


def snippet(text: str, terms: tuple[Term, ...]) -> tuple[str, list[tuple[int, int]]]:
    """An excerpt of *text* around its first match (all of it if short) and
    the matched spans in the excerpt (code points, end exclusive)."""
    spans = highlight(text, terms)
    if len(text) <= SNIPPET_LENGTH:
        return text, spans
    first = spans[0][0] if spans else 0
    start = max(0, first - _LEAD)
    if start > 0:  # begin at a word
        space = text.rfind(" ", start - 20 if start > 20 else 0, first)
        start = space + 1 if space >= 0 and space + 1 <= first else start
    end = min(len(text), start + SNIPPET_LENGTH)
    if end < len(text):
        space = text.rfind(" ", max(start, end - 20), end)
        end = space if space > first else end
    lead = _ELLIPSIS if start > 0 else ""
    excerpt = lead + text[start:end] + (_ELLIPSIS if end < len(text) else "")
    shift = len(lead) - start
    inside = [
        (max(s, start) + shift, min(e, end) + shift) for s, e in spans if e > start and s < end
    ]
    return excerpt, inside
