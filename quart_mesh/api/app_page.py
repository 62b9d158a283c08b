"""The page ``GET /api/apps/:appId/run`` serves: one HTML document and its headers.

:func:`render_document` combines one version's html, css and js in one
document; :data:`RUN_HEADERS` go with it. Their sandbox
Content-Security-Policy has no ``allow-same-origin``, so the browser gives
the document an opaque origin: its script cannot read the node's cookies or
storage, and ``connect-src 'none'`` keeps it from calling any API (decision
0026, ``docs/apps.md``). Pure functions, no I/O; ``api/apps.py`` serves them.
"""

from __future__ import annotations

import re
from typing import Final

from ..app_source import is_document
from ..services.apps import App

__all__ = ["RUN_CSP", "RUN_HEADERS", "render_document"]

#: the policy of every ``/run`` answer (docs/apps.md, decision 0026)
RUN_CSP: Final = "; ".join(
    (
        "sandbox allow-scripts allow-forms allow-popups allow-modals",
        "default-src 'none'",
        "script-src 'unsafe-inline'",
        "style-src 'unsafe-inline'",
        "img-src data: blob:",
        "font-src data:",
        "media-src data: blob:",
        "connect-src 'none'",
        "form-action 'none'",
        "base-uri 'none'",
        "frame-ancestors 'self'",
    )
)
#: the headers of every ``/run`` answer, besides its content type
RUN_HEADERS: Final = {
    "Content-Security-Policy": RUN_CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

_HEAD_END = re.compile(r"</head\s*>", re.IGNORECASE)
_BODY_END = re.compile(r"</body\s*>", re.IGNORECASE)
_HTML_START = re.compile(r"<html[^>]*>", re.IGNORECASE)
_STYLE_END = re.compile(r"</style", re.IGNORECASE)
_SCRIPT_END = re.compile(r"</script", re.IGNORECASE)


def _escape_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render_document(app: App) -> str:
    """The one HTML document ``/run`` serves for *app*'s loaded source: the
    html, with the css in a ``<style>`` and the js in a ``<script>``.

    A whole document (:func:`~quart_mesh.app_source.is_document`) gets them
    inserted: the style before ``</head>`` (else after ``<html>``, else first),
    the script before the last ``</body>`` (else last). A fragment is wrapped
    in a document titled with the app's name. A ``</style`` or ``</script``
    inside the css or js is written ``<\\/…`` so it cannot end the element
    early. An app without loaded source renders as an empty fragment.
    """
    source = app.source
    html, css, js = (source.html, source.css, source.js) if source else ("", "", "")
    css = _STYLE_END.sub(r"<\\/style", css)
    js = _SCRIPT_END.sub(r"<\\/script", js)
    style = f"<style>\n{css}\n</style>\n" if css else ""
    script = f"<script>\n{js}\n</script>\n" if js else ""
    if is_document(html):
        if style:
            if head := _HEAD_END.search(html):
                html = html[: head.start()] + style + html[head.start() :]
            elif start := _HTML_START.search(html):
                html = html[: start.end()] + style + html[start.end() :]
            else:
                html = style + html
        if script:
            ends = list(_BODY_END.finditer(html))
            if ends:
                html = html[: ends[-1].start()] + script + html[ends[-1].start() :]
            else:
                html += script
        return html
    return (
        '<!doctype html>\n<html>\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_escape_text(app.name)}</title>\n{style}</head>\n<body>\n{html}\n"
        f"{script}</body>\n</html>\n"
    )
