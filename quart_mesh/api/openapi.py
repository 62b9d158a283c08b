"""The OpenAPI 3.1 document of the REST API, built from the code, and a
readable reference page made from it.

``GET /api/openapi.json`` is the document: one operation per route under
``/api/``, its body, query and answers from the types the handler declares
(``api/contract.py``), its summary and description from the handler's
docstring, its tag from the blueprint. Every operation also answers errors
as ``ErrorBody`` (``4XX`` and ``5XX``). The JSON Schemas come from
msgspec (``schema_components``: draft 2020-12, the dialect of OpenAPI 3.1),
all types at once so each component has one name.

``GET /api/reference`` renders the same document as a plain HTML page: no
script at all, every string escaped, a CSP that allows only its own inline
style (by hash).

Both are built once per app, on first use (the routes do not change while
it serves).
"""

from __future__ import annotations

import base64
import hashlib
import html
import inspect
import json
import re
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any, Final

import msgspec
from quart import Blueprint, Quart, Response, current_app
from werkzeug.routing import Rule

from .._version import __version__
from .contract import Contract, OneOf, answers_media, contract_of, public
from .objects import ErrorBody

__all__ = ["bp", "openapi_document"]

bp = Blueprint("openapi", __name__)

#: the routes the document covers
API_PREFIX: Final = "/api/"
_ABOUT: Final = {"4XX": "the request was refused", "5XX": "the node failed"}
_PARAMETER = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")
_REF = "#/components/schemas/{name}"

#: each blueprint's tag: (name, description)
TAGS: Final = {
    "health": ("setup", "Health and first-run setup"),
    "auth": ("auth", "Registration, sign-in and tokens"),
    "rooms": ("rooms", "Rooms, messages and reactions"),
    "dms": ("dms", "Direct messages"),
    "participants": ("participants", "Participants"),
    "state": ("state", "State and polling"),
    "agents": ("agents", "Agents (bots) and their commands"),
    "models": ("models", "The model proxy (OpenAI-compatible)"),
    "discovery": ("discovery", "Discovery: the manifest and public meshes"),
    "roles": ("roles", "Roles, permissions and room rules"),
    "identity": ("identity", "Decentralised identities (DID)"),
    "vault": ("vault", "The participant's vault"),
    "admin": ("admin", "Administration"),
    "apps": ("apps", "Apps"),
    "uploads": ("uploads", "Uploaded files"),
    "federation": ("federation", "Federation between nodes"),
    "openapi": ("reference", "This document"),
}


def _operations(app: Quart) -> Iterator[tuple[Rule, str, Any, Contract]]:
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        if rule.websocket or not rule.rule.startswith(API_PREFIX):
            continue
        view = app.view_functions[rule.endpoint]
        contract = contract_of(view) or Contract()
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            yield rule, method, view, contract


def openapi_document(app: Quart) -> dict[str, Any]:
    """The OpenAPI 3.1 document of *app*'s REST API (see the module)."""
    operations = list(_operations(app))
    # every declared type, so that schema_components names each component once
    types: list[Any] = [ErrorBody]
    for _, _, _, contract in operations:
        types += [t for t in (contract.body, contract.query) if t is not None]
        for shape in contract.answers.values():
            types += list(shape.shapes) if isinstance(shape, OneOf) else [shape]
    unique = list(dict.fromkeys(types))
    schemas, components = msgspec.json.schema_components(unique, ref_template=_REF)
    schema_of: dict[Any, dict[str, Any]] = dict(zip(unique, schemas, strict=True))
    for _, _, _, contract in operations:
        for shape in contract.answers.values():
            if isinstance(shape, OneOf):
                schema_of[shape] = {"anyOf": [schema_of[s] for s in shape.shapes]}

    paths: dict[str, dict[str, Any]] = {}
    ids: set[str] = set()
    for rule, method, view, contract in operations:
        path = _PARAMETER.sub(r"{\1}", rule.rule)
        operation = _operation(rule, method, view, contract, schema_of, components)
        if operation["operationId"] in ids:  # one handler on two paths (/api/state, /snapshot)
            operation["operationId"] += "_" + re.sub(r"\W+", "_", path.removeprefix(API_PREFIX))
        ids.add(operation["operationId"])
        paths.setdefault(path, {})[method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "quart-mesh REST API",
            "version": __version__,
            "description": (
                "The REST API of a quart-mesh node. Errors are JSON objects "
                "`{error, code}` with the status that fits. The realtime protocol "
                "is on `/ws` (docs/websocket.md)."
                " AI agents that speak the Model Context Protocol connect to `/mcp` "
                "(Streamable HTTP, with the same bearer token; its protected-resource "
                "metadata at `/.well-known/oauth-protected-resource/mcp`): its tools "
                "are these operations (docs/agents-mcp-a2a.md)."
            ),
        },
        "servers": [{"url": "/"}],
        "tags": [
            {"name": name, "description": description}
            for name, description in dict.fromkeys(TAGS.values())
        ],
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "a token from /api/auth/login, /register, /guest or /setup/init",
                },
            },
        },
        "security": [{"bearer": []}],
    }


def _operation(
    rule: Rule,
    method: str,
    view: Any,
    contract: Contract,
    schema_of: dict[Any, dict[str, Any]],
    components: dict[str, Any],
) -> dict[str, Any]:
    blueprint = rule.endpoint.rpartition(".")[0]
    doc = inspect.getdoc(view) or ""
    summary, _, description = doc.partition("\n\n")
    operation: dict[str, Any] = {
        "operationId": f"{method.lower()}_{rule.endpoint.replace('.', '_')}",
        "tags": [TAGS.get(blueprint, (blueprint, ""))[0]],
    }
    if summary:
        operation["summary"] = " ".join(summary.split())
    if description:
        operation["description"] = description
    if contract.auth is not None:
        # no token needed; with token_if_sent, one may be sent instead
        operation["security"] = [{"bearer": []}, {}] if contract.token_if_sent else []
        if contract.auth:
            operation["x-authentication"] = contract.auth
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _PARAMETER.findall(rule.rule)
    ]
    if contract.query is not None:
        query = components[schema_of[contract.query]["$ref"].rsplit("/", 1)[1]]
        required = set(query.get("required", ()))
        for name, schema in query.get("properties", {}).items():
            schema = _not_null(schema)
            parameters.append(
                {"name": name, "in": "query", "required": name in required, "schema": schema}
            )
    if parameters:
        operation["parameters"] = parameters
    if contract.body is not None:
        operation["requestBody"] = {
            "required": False,
            "content": {"application/json": {"schema": schema_of[contract.body]}},
        }
    elif contract.raw_body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {contract.raw_body: {"schema": {}}},
        }
    answers = {str(status): shape for status, shape in contract.answers.items()}
    for statuses in ("4XX", "5XX"):
        answers.setdefault(statuses, ErrorBody)
    responses: dict[str, Any] = {
        str(status): {
            "description": HTTPStatus(status).phrase,
            "content": {media: {"schema": {}}},
        }
        for status, media in contract.media.items()
    }
    for status, shape in sorted(answers.items()):
        responses[status] = {
            "description": _ABOUT.get(status) or HTTPStatus(int(status)).phrase,
            "content": {"application/json": {"schema": schema_of[shape]}},
        }
    operation["responses"] = responses
    return operation


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A query parameter's schema without ``null`` (absent is how it is left out)."""
    schema = {k: v for k, v in schema.items() if not (k == "default" and v is None)}
    choices = [s for s in schema.get("anyOf", ()) if s != {"type": "null"}]
    if len(choices) == 1:
        del schema["anyOf"]
        schema.update(choices[0])
    return schema


def _document() -> dict[str, Any]:
    document: dict[str, Any] | None = current_app.extensions.get("quart_mesh.openapi")
    if document is None:
        document = current_app.extensions["quart_mesh.openapi"] = openapi_document(current_app)
    return document


@bp.get("/api/openapi.json")
@public()
@answers_media("application/json")
async def openapi() -> Response:
    """The OpenAPI 3.1 document of this API."""
    body: bytes | None = current_app.extensions.get("quart_mesh.openapi_json")
    if body is None:
        body = current_app.extensions["quart_mesh.openapi_json"] = json.dumps(
            _document(), ensure_ascii=False, separators=(",", ":")
        ).encode()
    return Response(body, content_type="application/json", headers=_HEADERS_JSON)


@bp.get("/api/reference")
@public()
@answers_media("text/html")
async def reference() -> Response:
    """This API's reference as a readable page (made from the OpenAPI document)."""
    page: str | None = current_app.extensions.get("quart_mesh.reference")
    if page is None:
        page = current_app.extensions["quart_mesh.reference"] = render_reference(_document())
    return Response(page, content_type="text/html; charset=utf-8", headers=_HEADERS_PAGE)


_STYLE: Final = """
body{font:15px/1.5 system-ui,sans-serif;margin:0 auto;max-width:60rem;padding:1rem 2rem}
h2{border-bottom:1px solid #ccc;margin-top:2.5rem}
section{border:1px solid #ddd;border-radius:6px;margin:1rem 0;padding:.5rem 1rem}
h3{font-size:1rem;margin:.3rem 0}
code,.method{font-family:ui-monospace,monospace}
.method{display:inline-block;min-width:4.5rem;font-weight:700}
table{border-collapse:collapse;margin:.3rem 0}
td,th{border:1px solid #ddd;padding:.15rem .5rem;text-align:left;vertical-align:top}
nav li{display:inline;margin-right:1rem}
"""
_STYLE_HASH: Final = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
_HEADERS_PAGE: Final = {
    "Content-Security-Policy": (
        f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; base-uri 'none'; "
        "form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
_HEADERS_JSON: Final = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}


def _type_text(schema: dict[str, Any]) -> str:
    """A JSON Schema as a short type name (``list of Message``)."""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[1]
    if "anyOf" in schema:
        return " or ".join(_type_text(s) for s in schema["anyOf"])
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"])
    kind = schema.get("type")
    if kind == "array":
        return "list of " + _type_text(schema.get("items", {}))
    if kind == "object" and "additionalProperties" in schema:
        extra = schema["additionalProperties"]
        return "map of " + (_type_text(extra) if isinstance(extra, dict) else "any")
    if isinstance(kind, list):
        return " or ".join(kind)
    return str(kind or "any")


def _fields_table(schema: dict[str, Any]) -> str:
    properties: dict[str, Any] = schema.get("properties", {})
    if not properties:
        return "<p>(no fields)</p>"
    required = set(schema.get("required", ()))
    rows = "".join(
        f"<tr><td><code>{html.escape(name)}</code></td><td>{html.escape(_type_text(s))}</td>"
        f"<td>{'yes' if name in required else ''}</td>"
        f"<td>{html.escape(s.get('description', ''))}</td></tr>"
        for name, s in properties.items()
    )
    return (
        f"<table><tr><th>field</th><th>type</th><th>required</th><th>about</th></tr>{rows}</table>"
    )


def _json_schema(response: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = (
        response.get("content", {}).get("application/json", {}).get("schema", {})
    )
    return schema


def render_reference(document: dict[str, Any]) -> str:
    """The reference page: every operation by tag, then every object."""
    esc = html.escape
    by_tag: dict[str, list[str]] = {}
    for path, methods in document["paths"].items():
        for method, op in methods.items():
            verb = esc(method.upper())
            parts = [
                f"<h3><span class=method>{verb}</span> <code>{esc(path)}</code></h3>",
                f"<p>{esc(op.get('summary', ''))}</p>",
            ]
            if op.get("description"):
                parts.append(f"<p>{esc(op['description'])}</p>")
            auth = "bearer token"
            if op.get("security") == []:
                auth = "none"
            elif {} in op.get("security", ()):
                auth = "a bearer token, or none"
            if op.get("x-authentication"):
                ways = ", ".join(op["x-authentication"])
                auth = f"a bearer token, or {ways}" if {} in op.get("security", ()) else ways
            parts.append(f"<p>Authentication: {esc(auth)}</p>")
            query = [p for p in op.get("parameters", ()) if p["in"] == "query"]
            if query:
                rows = "".join(
                    f"<tr><td><code>{esc(p['name'])}</code></td>"
                    f"<td>{esc(_type_text(p['schema']))}</td></tr>"
                    for p in query
                )
                parts.append(f"<p>Query:</p><table>{rows}</table>")
            body = op.get("requestBody", {}).get("content", {})
            for media, content in body.items():
                parts.append(
                    f"<p>Body ({esc(media)}): {esc(_type_text(content.get('schema', {})))}</p>"
                )
            answers = ", ".join(
                f"{esc(status)}: {esc(_type_text(_json_schema(r)))}"
                for status, r in op["responses"].items()
            )
            parts.append(f"<p>Answers: {answers}</p>")
            by_tag.setdefault(op["tags"][0], []).append(
                f'<section aria-label="{verb} {esc(path)}">{"".join(parts)}</section>'
            )
    descriptions = {tag["name"]: tag["description"] for tag in document["tags"]}
    nav = "".join(
        f'<li><a href="#{esc(tag)}">{esc(descriptions.get(tag, tag))}</a></li>' for tag in by_tag
    )
    groups = "".join(
        f'<h2 id="{esc(tag)}">{esc(descriptions.get(tag, tag))}</h2>' + "".join(sections)
        for tag, sections in by_tag.items()
    )
    objects = "".join(
        f'<section aria-label="{esc(name)}"><h3 id="{esc(name)}">{esc(name)}</h3>'
        f"<p>{esc(schema.get('description', schema.get('title', '')))}</p>"
        f"{_fields_table(schema)}</section>"
        for name, schema in sorted(document["components"]["schemas"].items())
    )
    info = document["info"]
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{esc(info['title'])} {esc(info['version'])}</title>"
        f"<style>{_STYLE}</style></head><body>"
        f"<header><h1>{esc(info['title'])} {esc(info['version'])}</h1>"
        f"<p>{esc(info['description'])}</p>"
        '<p>Machine-readable: <a href="/api/openapi.json">/api/openapi.json</a> (OpenAPI 3.1).</p>'
        f"<nav aria-label=Groups><ul>{nav}<li><a href=#objects>Objects</a></li></ul></nav></header>"
        f"<main>{groups}<h2 id=objects>Objects</h2>{objects}</main></body></html>"
    )
