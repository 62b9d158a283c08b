"""Every JSON answer the tests receive, checked against the OpenAPI document.

``check_answer`` is an httpx response hook (the ``http`` fixture installs
it): when the request names an operation of ``/api/openapi.json`` and the
answer's status is declared there (errors: ``4XX`` and ``5XX``, an ``ErrorBody``),
the body must fit the declared schema, or the test fails. So the whole
end-to-end suite checks the document's answers against what the node
really sends.
"""

from __future__ import annotations

import functools
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs

from quart_mesh import Settings, create_app
from quart_mesh.api.openapi import openapi_document

__all__ = ["AnswerMismatch", "check_answer", "document"]


class AnswerMismatch(AssertionError):
    """An answer that does not fit the OpenAPI document."""


@functools.cache
def document() -> dict[str, Any]:
    """The OpenAPI document of a node (routes do not depend on settings)."""
    with tempfile.TemporaryDirectory() as folder:
        return openapi_document(create_app(Settings(data_dir=Path(folder))))


@functools.cache
def _routes() -> list[tuple[re.Pattern[str], str]]:
    routes = []
    for path in document()["paths"]:
        pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path))
        routes.append((re.compile(pattern + "$"), path))
    # literal segments before parameters: /api/apps/deployed before /api/apps/{app_id}
    routes.sort(key=lambda route: route[1].count("{"))
    return routes


@functools.cache
def _validator(path: str, method: str, status: str) -> Any:
    responses = document()["paths"][path][method]["responses"]
    response = responses.get(status) or responses.get(status[0] + "XX")
    if response is None:
        return None
    schema = response.get("content", {}).get("application/json", {}).get("schema")
    if schema is None:
        return None
    return jsonschema_rs.Draft202012Validator({**schema, "components": document()["components"]})


def operation_of(method: str, url_path: str) -> str | None:
    """The document's path template for *method* on *url_path*, if any."""
    for pattern, path in _routes():
        if pattern.match(url_path) and method.lower() in document()["paths"][path]:
            return path
    return None


def check(method: str, url_path: str, status: int, body: bytes, content_type: str) -> None:
    """Raise :class:`AnswerMismatch` if a JSON answer does not fit its schema."""
    if not url_path.startswith("/api/") or "json" not in content_type:
        return
    path = operation_of(method, url_path)
    if path is None:
        return
    declared = document()["paths"][path][method.lower()]["responses"]
    if 200 <= status < 300 and str(status) not in declared:
        raise AnswerMismatch(
            f"{method} {url_path} answered {status}, a success it does not declare "
            f"({path}: {sorted(declared)})"
        )
    validator = _validator(path, method.lower(), str(status))
    if validator is None:
        return
    value = json.loads(body)
    errors = [f"{e.instance_path}: {e.message}" for e in validator.iter_errors(value)]
    if errors:
        raise AnswerMismatch(
            f"{method} {url_path} answered {status} outside its declared schema "
            f"({path}): {errors[:5]} in {body[:500]!r}"
        )


async def check_answer(response: httpx.Response) -> None:
    """httpx response hook: :func:`check` the answer."""
    request = response.request
    if "json" not in response.headers.get("content-type", ""):
        return
    await response.aread()
    check(
        request.method,
        request.url.path,
        response.status_code,
        response.content,
        response.headers.get("content-type", ""),
    )
