"""Reading an app out of a model's answer (``quart_mesh/app_source.py``).

Pure functions: no servers, no clock. The same parser serves
``POST /api/apps/generate`` (tests/e2e/test_apps.py) and the coder bot
(tests/e2e/test_model_bots.py).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quart_mesh.app_source import AppSource, is_document, parse_answer, parse_app_source

pytestmark = pytest.mark.store_free


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            '{"html": " <p>a</p> ", "css": "p{}", "js": "f()", "name": " Counter "}',
            AppSource("<p>a</p>", "p{}", "f()", "Counter"),
        ),
        ('{"html": "<p>a</p>", "javascript": "g()"}', AppSource("<p>a</p>", "", "g()")),
        ('{"html": "<p>a</p>", "css": 1, "name": " "}', AppSource("<p>a</p>", "", "")),
        (
            'Here:\n```json\n{"html": "<b>j</b>", "name": "J"}\n```',
            AppSource("<b>j</b>", "", "", "J"),
        ),
        (
            "intro\n```html\n<div>a</div>\n```\n```css\nb{}\n```\n"
            "```javascript\nf()\n```\n```js\ng()\n```\n```html\n<p>2</p>\n```\nbye",
            AppSource("<div>a</div>\n<p>2</p>", "b{}", "f()\ng()"),
        ),
        ("```\n<p>unlabelled</p>\n```", AppSource("<p>unlabelled</p>", "", "")),
        ("```HTML title\n<p>x</p>", AppSource("<p>x</p>", "", "")),  # unclosed, tag case
        ("```json\n[1]\n```\n```htm\n<i>x</i>\n```", AppSource("<i>x</i>", "", "")),
        ("  <!DOCTYPE html><p>x</p>  ", AppSource("<!DOCTYPE html><p>x</p>", "", "")),
        (
            "<html lang=en><body>x</body></html>",
            AppSource("<html lang=en><body>x</body></html>", "", ""),
        ),
    ],
)
def test_parse_answer(answer: str, expected: AppSource) -> None:
    assert parse_answer(answer) == expected


@pytest.mark.parametrize(
    "answer",
    [
        "",
        "just words",
        '{"html": "  "}',
        '{"html": 1}',
        "[1, 2]",
        "{not json",
        "```\nnot html\n```",
        "```css\np{}\n```\n```js\nf()\n```",  # no html
        "```py\nprint()\n```",
        "<htmlx>",
        '{"html": ' + "[" * 100_000,  # too deep for json: not an app, not a crash
    ],
)
def test_no_app_in_answer(answer: str) -> None:
    assert parse_answer(answer) is None
    assert parse_app_source(answer) is None


def test_parse_app_source_is_the_put_body() -> None:
    answer = json.dumps({"html": "<p>a</p>", "css": "p{}", "name": "dropped"})
    assert parse_app_source(answer) == {"html": "<p>a</p>", "css": "p{}", "js": ""}


@pytest.mark.parametrize(
    ("html", "whole"),
    [
        ("<!doctype html><p>", True),
        ("\n  <!DocType HTML>", True),
        ("<html>", True),
        ("<HTML lang=x>", True),
        ("<html\n>", True),
        ("<htmlx>", False),
        ("<p>fragment</p>", False),
        ("text <html>", False),
        ("", False),
    ],
)
def test_is_document(html: str, whole: bool) -> None:
    assert is_document(html) is whole


@given(st.text())
def test_any_text_parses_without_error(text: str) -> None:
    found = parse_answer(text)
    assert found is None or found.html.strip()
