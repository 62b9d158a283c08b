"""The OpenAPI document the node serves, its reference page, and the
hand-written reference (``docs/rest.md``) checked against it."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest
from openapi_spec_validator import validate

from quart_mesh import Settings, create_app
from quart_mesh.api.openapi import openapi_document
from quart_mesh.services.model_proxy import RESERVED_NAMES
from tests.helpers import Mesh, assert_error
from tests.openapi_check import document

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


#: the agents' protocols, served in front of Quart and described by hand
AGENT_OPERATIONS = {
    ("post", "/mcp"),
    ("get", "/mcp"),
    ("delete", "/mcp"),
    ("get", "/.well-known/oauth-protected-resource/mcp"),
    ("get", "/.well-known/agent-card.json"),
    ("post", "/a2a"),
    ("post", "/a2a/agents/{agentId}"),
    ("get", "/a2a/agents/{agentId}/.well-known/agent-card.json"),
}


def _operations(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method, path) for path, methods in doc["paths"].items() for method in methods}


def _api_operations(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method, path) for method, path in _operations(doc) if path.startswith("/api/")}


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
    assert _api_operations(doc) == routes
    # everything else is one of the agents' protocols, each of them there
    assert _operations(doc) - routes == AGENT_OPERATIONS
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


async def test_the_mcp_operations_name_every_tool(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path))
    tools = {tool.name for tool in await app.extensions["quart_mesh.mcp"].mcp.list_tools()}
    described = openapi_document(app)["paths"]["/mcp"]["post"]["description"]
    listed = re.search(r"Tools: ([^;]*);", described)
    assert listed, described
    assert set(listed[1].split(", ")) == tools


def _assert_fits(r: httpx.Response, path: str, method: str) -> None:
    """*r*'s status and body as the document describes *path*'s *method*."""
    doc = document()
    responses = doc["paths"][path][method]["responses"]
    status = str(r.status_code)
    assert status in responses, (path, method, status, sorted(responses))
    for header in responses[status].get("headers", ()):
        assert header in r.headers, (path, method, status, header)
    if "content" not in responses[status]:
        assert not r.content, (path, method, status, r.text[:500])
        return
    media = r.headers["content-type"].split(";")[0]
    schema = responses[status]["content"][media]["schema"]
    validator = jsonschema_rs.Draft202012Validator({**schema, "components": doc["components"]})
    value = r.json() if media == "application/json" else r.text
    errors = [f"{e.instance_path}: {e.message}" for e in validator.iter_errors(value)]
    assert not errors, (path, method, status, errors, r.text[:500])


async def test_the_agents_protocols_answer_as_the_document_describes(mesh: Mesh) -> None:
    owner = await mesh.setup()
    http = mesh.http
    r = await http.get("/.well-known/oauth-protected-resource/mcp")
    assert r.status_code == 200
    _assert_fits(r, "/.well-known/oauth-protected-resource/mcp", "get")
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    accept = {"Accept": "application/json, text/event-stream"}
    r = await http.post("/mcp", json=ping, headers=accept)
    assert r.status_code == 401
    assert "resource_metadata=" in r.headers["www-authenticate"]
    _assert_fits(r, "/mcp", "post")
    r = await http.post("/mcp", json=ping, headers={**accept, "Origin": "https://evil.example"})
    assert_error(r, 403, "forbidden")
    _assert_fits(r, "/mcp", "post")
    unknown = {**owner.headers, **accept, "Mcp-Session-Id": "no-such-session"}
    for method in ("post", "get", "delete"):
        r = await http.request(method.upper(), "/mcp", json=ping, headers=unknown)
        assert r.status_code == 404, (method, r.text)
        _assert_fits(r, "/mcp", method)
    # a session opened, then ended
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "contract-test", "version": "1"},
        },
    }
    r = await http.post("/mcp", json=initialize, headers={**owner.headers, **accept})
    assert r.status_code == 200, r.text
    _assert_fits(r, "/mcp", "post")
    session = {**owner.headers, "Mcp-Session-Id": r.headers["mcp-session-id"]}
    r = await http.delete("/mcp", headers=session)
    assert r.status_code == 200, r.text
    _assert_fits(r, "/mcp", "delete")
    # no bot of the mesh is an A2A agent yet
    r = await http.get("/.well-known/agent-card.json")
    assert_error(r, 404, "no_a2a_agents")
    _assert_fits(r, "/.well-known/agent-card.json", "get")
    r = await http.get("/a2a/agents/nope/.well-known/agent-card.json")
    assert_error(r, 404, "agent_not_found")
    _assert_fits(r, "/a2a/agents/{agentId}/.well-known/agent-card.json", "get")
    call = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t"}}
    r = await http.post("/a2a", json=call, headers={"A2A-Version": "1.0"})
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")
    _assert_fits(r, "/a2a", "post")
    r = await http.post("/a2a/agents/nope", json=call, headers=owner.headers)
    assert r.status_code == 404
    _assert_fits(r, "/a2a/agents/{agentId}", "post")


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
        (method, re.sub(r"\{[^}]+\}", "{}", path)): path for method, path in _api_operations(doc)
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


#: the methods a client may send, beside the implicit HEAD and OPTIONS
METHODS = ("get", "post", "put", "patch", "delete")


def _allow(r: httpx.Response) -> set[str]:
    return {method.strip().lower() for method in r.headers.get("allow", "").split(",") if method}


def _example(path: str) -> str:
    """*path* with each parameter filled in (an id that names nothing)."""
    return re.sub(r"\{[^}]+\}", "01ARZ3NDEKTSV4RRFFQ69G5FAV", path)


async def test_options_and_405_list_exactly_the_documented_methods(
    http: httpx.AsyncClient,
) -> None:
    """On every path of the document, the automatic ``OPTIONS`` lists its
    documented methods (with ``OPTIONS``, and ``HEAD`` beside ``GET``), an
    undocumented method is 405 with the same ``Allow``, and a documented
    one is served (schemathesis' ST205 and its unsupported-method check).
    A path belongs to its most concrete template: ``/api/agents/bootstrap``
    (POST) is never ``/api/agents/{agentId}`` (PATCH, DELETE)."""
    mismatches = []
    for path, operations in document()["paths"].items():
        documented = set(operations)
        url = _example(path)
        r = await http.options(url)
        if not path.startswith("/api/"):
            # the agents' protocols, served in front of Quart: an Allow, if
            # any, lists the documented methods
            if r.headers.get("allow") and _allow(r) - {"head", "options"} != documented:
                mismatches.append(("OPTIONS", path, r.status_code, r.headers.get("allow")))
            continue
        expected = documented | {"options"} | ({"head"} if "get" in documented else set())
        if r.status_code != 200 or _allow(r) != expected:
            mismatches.append(("OPTIONS", path, r.status_code, r.headers.get("allow")))
        for method in METHODS:
            r = await http.request(method.upper(), url)
            if method in documented:
                if r.status_code == 405:
                    mismatches.append((method, path, 405, r.headers.get("allow")))
            elif r.status_code != 405 or _allow(r) != expected:
                mismatches.append((method, path, r.status_code, r.headers.get("allow")))
            else:
                assert_error(r, 405, "method_not_allowed")
    assert not mismatches


def test_no_model_name_is_a_path_beside_the_models(tmp_path: Path) -> None:
    """A model named like a path beside ``/api/models/{name}`` could not be
    changed or removed there (the path's own template serves it): those
    names are refused (``services.model_proxy.RESERVED_NAMES``)."""
    app = create_app(Settings(data_dir=tmp_path))
    beside = {
        rule.rule.removeprefix("/api/models/")
        for rule in app.url_map.iter_rules()
        if re.fullmatch(r"/api/models/[^/<]+", rule.rule)
    }
    assert beside == RESERVED_NAMES
