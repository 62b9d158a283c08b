"""Name skeletons (quart_mesh/names.py): Unicode TR39's skeleton over Unicode's
own confusables.txt, and the case-insensitive key names are held to
(docs/decisions/0056-trusted-names-and-inert-uploads.md).

The lookalikes are written as escapes so that this file shows which
character each one is.
"""

from __future__ import annotations

import unicodedata

import pytest

from quart_mesh.names import name_skeleton, name_skeletons, normalize, skeleton

pytestmark = pytest.mark.store_free

CYRILLIC_O = "\u043e"
CYRILLIC_A = "\u0430"
GREEK_OMICRON = "\u03bf"
FULLWIDTH_O = "\uff4f"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # TR39's own examples (section 4): "paypal" with a capital I for the l,
        # and the Latin/Cyrillic/Greek/math-bold mixes of "scope"
        ("paypal", "paypal"),
        ("paypaI", "paypal"),
        ("sc" + CYRILLIC_O + "pe", "scope"),
        ("\u0455\u0441\u043e\u0440\u0435", "scope"),  # all Cyrillic
        ("\U0001d42c\U0001d41c\U0001d428\U0001d429\U0001d41e", "scope"),  # math bold
        # ASCII lookalikes TR39 maps: 0 -> O, 1 -> l, I -> l, m -> rn
        ("0", "O"),
        ("1", "l"),
        ("I", "l"),
        ("m", "rn"),
        # a prototype maps to itself
        ("rn", "rn"),
        ("l", "l"),
        # default-ignorable code points are dropped (zero width space, joiner)
        ("a\u200bb\u200dc", "abc"),
    ],
)
def test_the_tr39_skeleton(text: str, expected: str) -> None:
    assert skeleton(text) == unicodedata.normalize("NFD", expected)


def test_a_skeleton_is_stable() -> None:
    # skeleton(skeleton(x)) == skeleton(x): TR39's idempotence, over samples
    for text in ("paypaI", "sc" + CYRILLIC_O + "pe", "\u01c9", "\u00c6sop", "m\u0301"):
        once = skeleton(text)
        assert skeleton(once) == once, text


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("owner", CYRILLIC_O + "wner"),  # the Cyrillic o
        ("owner", FULLWIDTH_O + "wner"),  # the fullwidth o
        ("owner", GREEK_OMICRON + "wner"),
        ("owner", "OWNER"),
        ("owner", "0wner"),  # a zero: TR39 maps it to O, and case is folded
        ("alice", "ali" + "\u0441" + "e"),  # Cyrillic es for c
        ("alice", CYRILLIC_A + "lice"),
        ("paypal", "paypaI"),  # capital I for l
        ("burn", "bum"),  # rn and m
        ("bob", "b\u200bob"),  # a zero width space
        ("lj", "\u01c9"),  # the lj ligature (NFKC already splits it)
        ("general chat", "general  chat"),  # runs of spaces count as one
        ("Town Square", "T" + CYRILLIC_O + "wn Squ" + CYRILLIC_A + "re"),
        ("cafe\u0301", "caf\u00e9"),  # composed or not
    ],
)
def test_lookalike_names_share_a_key(a: str, b: str) -> None:
    assert name_skeleton(a) == name_skeleton(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("owner", "owners"),
        ("alice", "alicia"),
        ("iris", "lris"),  # lower-case i and l are told apart
        ("caf\u00e9", "cafe"),  # an accent is a letter of its own
        ("\u0434\u043e\u043c", "dom"),  # a Cyrillic word is not a Latin one
        ("room 1", "room 2"),
    ],
)
def test_distinct_names_keep_distinct_keys(a: str, b: str) -> None:
    assert name_skeleton(a) != name_skeleton(b)


def test_a_key_is_a_fixed_point_and_bounded() -> None:
    for name in ("Iris", "0wner", "\u2168", "\u0391\u0392\u0393", "x" * 50):
        key = name_skeleton(name)
        assert name_skeleton(key) == key, name
    # a long name's key is a digest, so the index stays small on every store
    long_key = name_skeleton("\ufdfa" * 100)  # NFKC makes each one 18 characters
    assert long_key.startswith("#")
    assert len(long_key) == 65


def test_names_are_stored_in_nfkc() -> None:
    assert normalize(FULLWIDTH_O + "wner2") == "owner2"
    assert normalize("\ufb01le") == "file"  # the fi ligature
    assert normalize("caf" + "e\u0301") == "caf\u00e9"
    assert normalize("owner") == "owner"


def test_a_name_has_a_key_as_written_and_one_in_lower_case() -> None:
    # no one key can hold both TR39's I-is-l and case-insensitive names
    assert name_skeletons("ALICE") == ("allce", "alice")
    assert name_skeletons("\u0430lice") == ("alice", "alice")  # meets ALICE's lower case
    assert name_skeletons("Iris") == ("lris", "iris")  # meets lris as written
    assert name_skeletons("iris") == ("iris", "iris")
    assert name_skeletons("\u0410\u0412\u0421")[0] == name_skeletons("ABC")[0]  # Cyrillic capitals
