"""The OpenAPI document the node serves, its reference page, and the
hand-written reference (``docs/rest.md``) checked against it."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate

from quart_mesh import Settings, create_app
from quart_mesh.api.openapi import openapi_document
from tests.helpers import Mesh, assert_error
from tests.openapi_check import document

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def _operations(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method, path) for path, methods in doc["paths"].items() for method in methods}


async def test_the_served_document_is_valid_openapi_3_1(http: httpx.AsyncClient) -> None:
    r = await http.get("/api/openapi.json")
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    served = r.json()
    assert served == document()
    assert served["openapi"] == "3.1.0"
    validate(served)  # raises on any violation of the OpenAPI 3.1 schema


def test_every_api_route_is_an_operation_with_its_answers_declared(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path))
    doc = openapi_document(app)
    routes = set()
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/api/") and not rule.websocket:
            path = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule.rule)
            methods = set(rule.methods or ()) - {"HEAD", "OPTIONS"}
            routes |= {(m.lower(), path) for m in methods}
    assert _operations(doc) == routes
    ids = [op["operationId"] for methods in doc["paths"].values() for op in methods.values()]
    assert len(ids) == len(set(ids))
    undeclared = {
        (method, path)
        for path, methods in doc["paths"].items()
        for method, op in methods.items()
        if not any(status[0] == "2" for status in op["responses"])
    }
    assert not undeclared
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            assert op.get("summary"), (method, path)
            assert set(op["responses"]) >= {"4XX", "5XX"}


async def test_a_body_that_does_not_fit_its_type_is_refused_with_the_usual_codes(
    mesh: Mesh,
) -> None:
    owner = await mesh.setup()
    room = await mesh.create_room(owner, "general")
    url = f"/api/rooms/{room['roomId']}/messages"
    cases = [
        (b'{"content": 5}', "invalid_field", "content must be a string"),
        (b'{"content": null}', "missing_field", "content is required"),
        (b"{}", "missing_field", "content is required"),
        (b"[1]", "invalid_json", "the body must be a JSON object"),
        (b'{"content": "\\ud800"}', "invalid_json", "the body is not valid JSON"),
        (b'{"content": NaN}', "invalid_json", "the body is not valid JSON"),
        (b'{"content": "hi", "attachments": "x"}', "invalid_attachments", "attachments"),
        # not UTF-8 inside a string; nested deeper than any decoder goes
        (b'{"content": "\xff"}', "invalid_json", "the body is not valid JSON"),
        (b'{"x": ' + b"[" * 1500 + b"]" * 1500 + b"}", "invalid_json", "not valid JSON"),
    ]
    for raw, code, words in cases:
        r = await mesh.http.post(
            url, content=raw, headers={**owner.headers, "Content-Type": "application/json"}
        )
        assert_error(r, 400, code)
        assert words in r.json()["error"], (raw, r.json())
    # the token first (docs/rest.md, Check order): without one, the body is not looked at
    r = await mesh.http.post(url, content=b"[1]")
    assert_error(r, 401, "unauthorized")
    r = await mesh.http.get(url, params={"limit": "ten"})
    assert_error(r, 401, "unauthorized")
    # the same without a token, on an endpoint that needs none
    for raw in (
        b'{"name": "owner", "password": "\xff"}',
        b'{"x": ' + b"[" * 1500 + b"]" * 1500 + b"}",
    ):
        r = await mesh.http.post("/api/auth/login", content=raw)
        assert_error(r, 400, "invalid_json")
    r = await mesh.http.get(url, params={"limit": "ten"}, headers=owner.headers)
    assert_error(r, 400, "invalid_query")
    assert r.json()["error"] == "limit must be a whole number"
    # unknown fields are ignored; an empty query value counts as absent
    r = await mesh.http.post(url, json={"content": "hi", "colour": "red"}, headers=owner.headers)
    assert r.status_code == 201
    r = await mesh.http.get(url, params={"limit": "", "before": ""}, headers=owner.headers)
    assert r.status_code == 200
    assert [m["content"] for m in r.json()] == ["hi"]


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.regions: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        label = dict(attrs).get("aria-label")
        if tag == "section" and label:
            self.regions.add(label)


async def test_the_reference_page_lists_every_operation_and_runs_no_script(
    http: httpx.AsyncClient,
) -> None:
    r = await http.get("/api/reference")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    policy = r.headers["content-security-policy"]
    assert "default-src 'none'" in policy
    assert "script-src" not in policy  # so default-src 'none' forbids every script
    assert "unsafe-inline" not in policy
    page = _Page()
    page.feed(r.text)
    assert "script" not in page.tags
    expected = {f"{method.upper()} {path}" for method, path in _operations(document())}
    assert expected <= page.regions


def test_docs_rest_md_lists_exactly_the_documented_operations() -> None:
    table = (ROOT / "docs" / "rest.md").read_text()
    rows = re.findall(r"^\| (\w+) \| `(/api/[^`]*)`[^|]*\| ([^|]*) \|", table, re.MULTILINE)
    listed = {(method.lower(), re.sub(r":(\w+)", r"{\1}", path)) for method, path, _ in rows}
    doc = document()
    # docs/rest.md writes :roomId; the document names the handler's parameter
    by_shape = {
        (method, re.sub(r"\{[^}]+\}", "{}", path)): path for method, path in _operations(doc)
    }
    listed_shapes = {(m, re.sub(r"\{[^}]+\}", "{}", p)) for m, p in listed}
    assert listed_shapes == set(by_shape), (
        "in the document only:",
        set(by_shape) - listed_shapes,
        "in docs/rest.md only:",
        listed_shapes - set(by_shape),
    )
    for method, path, auth in rows:
        shape = (method.lower(), re.sub(r":\w+", "{}", path))
        op = doc["paths"][by_shape[shape]][method.lower()]
        security = op.get("security", [{"bearer": []}])
        if auth.strip().startswith(("none", "a node's signature")):
            assert {} in security or security == [], (method, path, auth)
        else:
            assert {"bearer": []} in security, (method, path, auth)


async def test_an_empty_authorization_header_is_no_token(mesh: Mesh) -> None:
    await mesh.setup()
    r = await mesh.http.post(
        "/api/agents/bootstrap",
        json={"name": "helper-bot", "type": "simple"},
        headers={"Authorization": ""},
    )
    assert r.status_code == 201, r.text
    # a token sent is checked before the body, even where none is needed
    r = await mesh.http.post(
        "/api/agents/bootstrap", content=b"[1]", headers={"Authorization": "Bearer nope"}
    )
    assert r.status_code == 401, r.text
