"""An app's source in a model's answer: pure functions, no I/O.

``POST /api/apps/generate`` (``services/apps.py``) and the ``coder`` bot
(``bots/model_bots.py``) both ask a model for an app and read its answer with
:func:`parse_answer`; it lives below both so that neither reaches into the
other. Answers are read leniently (``docs/apps.md``, "Generating an app"):

- a JSON object ``{"html", "css"?, "js"? (or "javascript"), "name"?}``, bare
  or in a ```json fenced block;
- fenced ```html, ```css and ```js (or ```javascript) blocks, several of a
  kind joined with a newline; an unlabelled block that starts with ``<`` is
  HTML, and an unclosed last block counts;
- the whole answer, if it is an HTML document (:func:`is_document`).

Anything else in the answer is dropped.
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

__all__ = ["AppSource", "is_document", "parse_answer", "parse_app_source"]


class AppSource(NamedTuple):
    """The source found in an answer, and the name the model suggested, if any."""

    html: str
    css: str
    js: str
    name: str | None = None


#: a fenced block: its language tag and body; an unclosed last block counts
_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_KINDS = {
    "html": "html",
    "htm": "html",
    "xhtml": "html",
    "css": "css",
    "js": "js",
    "javascript": "js",
    "mjs": "js",
}
_DOCUMENT = re.compile(r"^\s*(<!doctype html|<html[\s>])", re.IGNORECASE)


def is_document(html: str) -> bool:
    """Whether *html* is a whole document (starts with ``<!doctype html`` or
    ``<html>``, case-insensitive, after white space) rather than a fragment."""
    return _DOCUMENT.match(html) is not None


def parse_answer(text: str) -> AppSource | None:
    """The app in a model's answer, or ``None`` if it holds no HTML.

    Tried in this order: a JSON object with ``html`` (and ``css``, ``js``,
    ``name``), bare or in a fenced block; fenced ```html / ```css / ```js
    blocks (several of a kind are joined); an unlabelled fenced block that
    looks like HTML; the whole answer if it is an HTML document. Only a JSON
    answer carries a suggested name. Any other text is dropped.
    """
    found = _from_json(text.strip())
    if found is not None:
        return found
    parts: dict[str, list[str]] = {"html": [], "css": [], "js": []}
    for match in _FENCE.finditer(text):
        tag, code = match.group(1).lower(), match.group(2).strip()
        if not code:
            continue
        if tag == "json" and (found := _from_json(code)) is not None:
            return found
        kind = _KINDS.get(tag)
        if kind is None and not tag and code.startswith("<"):
            kind = "html"
        if kind is not None:
            parts[kind].append(code)
    if parts["html"]:
        return AppSource("\n".join(parts["html"]), "\n".join(parts["css"]), "\n".join(parts["js"]))
    if is_document(text):
        return AppSource(text.strip(), "", "")
    return None


def parse_app_source(text: str) -> dict[str, str] | None:
    """The ``html``, ``css`` and ``js`` in a model's answer (as
    ``PUT /api/apps/:id/source`` takes them), or ``None``; see :func:`parse_answer`."""
    found = parse_answer(text)
    if found is None:
        return None
    return {"html": found.html, "css": found.css, "js": found.js}


def _from_json(text: str) -> AppSource | None:
    if not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # deep nesting is not an app either
        return None
    if not isinstance(data, dict):
        return None
    html = data.get("html")
    if not isinstance(html, str) or not html.strip():
        return None
    css, js, name = data.get("css"), data.get("js", data.get("javascript")), data.get("name")
    return AppSource(
        html.strip(),
        css if isinstance(css, str) else "",
        js if isinstance(js, str) else "",
        name.strip() if isinstance(name, str) and name.strip() else None,
    )
