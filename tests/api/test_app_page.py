"""The document and headers ``/run`` serves (``quart_mesh/api/app_page.py``).

Pure functions; tests/e2e/test_apps.py checks the same over HTTP and
tests/e2e/test_app_sandbox.py in a real browser.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from quart_mesh.api.app_page import RUN_CSP, RUN_HEADERS, render_document
from quart_mesh.services.apps import App
from quart_mesh.store.apps import Source

pytestmark = pytest.mark.store_free

_FRAME = (
    '<!doctype html>\n<html>\n<head>\n<meta charset="utf-8">\n'
    '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
)


def _app(html: str, css: str = "", js: str = "", name: str = "Counter") -> App:
    source = Source(1, html, css, js, 0, 0, "owner")
    return App("01M80A1C4Q0H2T9W7Y5V3X8ZRN", "owner", "bob", name, "", 1, True, 0, 0, source)


def test_fragment_is_wrapped_and_titled() -> None:
    page = render_document(_app("<p>hi</p>", "p{}", "f()", name='<b>&"</b>'))
    assert page == (
        f'{_FRAME}<title>&lt;b&gt;&amp;"&lt;/b&gt;</title>\n<style>\np{{}}\n</style>\n'
        "</head>\n<body>\n<p>hi</p>\n<script>\nf()\n</script>\n</body>\n</html>\n"
    )


def test_fragment_without_css_or_js() -> None:
    page = render_document(_app("<p>hi</p>"))
    assert page == f"{_FRAME}<title>Counter</title>\n</head>\n<body>\n<p>hi</p>\n</body>\n</html>\n"


@pytest.mark.parametrize(
    ("html", "expected"),
    [
        (
            "<!doctype html><html><head><title>t</title></head><body>b</body></html>",
            "<!doctype html><html><head><title>t</title><style>\nc\n</style>\n</head>"
            "<body>b<script>\nj\n</script>\n</body></html>",
        ),
        (  # no </head>: after <html ...>; the last </body>
            "<HTML lang=x><body>1</body><body>2</BODY >",
            "<HTML lang=x><style>\nc\n</style>\n<body>1</body><body>2"
            "<script>\nj\n</script>\n</BODY >",
        ),
        (  # neither <html> nor </body>: style first, script last
            "<!doctype html>bare",
            "<style>\nc\n</style>\n<!doctype html>bare<script>\nj\n</script>\n",
        ),
    ],
)
def test_whole_document_gets_style_and_script_inserted(html: str, expected: str) -> None:
    assert render_document(_app(html, "c", "j")) == expected


def test_closing_tags_inside_css_and_js_cannot_end_the_element() -> None:
    page = render_document(_app("<p>x</p>", "a{}</STYLE><b>", 'x="</script ><i>"'))
    assert "<style>\na{}<\\/style><b>\n</style>" in page
    assert '<script>\nx="<\\/script ><i>"\n</script>' in page


def test_app_without_source_renders_an_empty_page() -> None:
    page = render_document(replace(_app("<p>x</p>"), source=None))
    assert page == f"{_FRAME}<title>Counter</title>\n</head>\n<body>\n\n</body>\n</html>\n"


def test_run_headers() -> None:
    assert RUN_HEADERS == {
        "Content-Security-Policy": RUN_CSP,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
    }
    assert RUN_CSP == (
        "sandbox allow-scripts allow-forms allow-popups allow-modals; default-src 'none'; "
        "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:; "
        "font-src data:; media-src data: blob:; connect-src 'none'; form-action 'none'; "
        "base-uri 'none'; frame-ancestors 'self'"
    )
    assert "allow-same-origin" not in RUN_CSP
