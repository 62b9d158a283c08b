"""The OpenAPI 3.1 document of the REST API, built from the code, and a
readable reference page made from it.

``GET /api/openapi.json`` is the document: one operation per route under
``/api/``, its body, query and answers from the types the handler declares
(``api/contract.py``), its summary and description from the handler's
docstring, its tag from the blueprint. Every operation also answers errors
as ``ErrorBody`` (``4XX`` and ``5XX``). The JSON Schemas come from
msgspec (``schema_components``: draft 2020-12, the dialect of OpenAPI 3.1),
all types at once so each component has one name.

The agents' protocols (``/mcp``, its OAuth resource metadata, the A2A cards
and interfaces) are served in front of Quart, so they are no routes of the
app: their paths are described here by hand (:data:`AGENT_PATHS`), their
bodies as generic JSON-RPC 2.0 messages, since the MCP and A2A
specifications type the messages themselves.

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

__all__ = ["AGENT_PATHS", "bp", "openapi_document"]

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
    paths.update(_agent_operations())
    clash = set(AGENT_SCHEMAS) & set(components)
    assert not clash, f"hand-described components named like contract types: {clash}"
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "quart-mesh REST API",
            "version": __version__,
            "description": (
                "The REST API of a quart-mesh node. Errors are JSON objects "
                "`{error, code}` with the status that fits. The realtime protocol "
                "is on `/ws` (docs/websocket.md)."
                " AI agents join in their own protocols, with the same bearer token "
                "(docs/agents-mcp-a2a.md): the Model Context Protocol at `/mcp` "
                "(Streamable HTTP), whose tools act through these operations, and "
                "A2A 1.0 at `/a2a` (the mesh's bots as agents). Their paths are "
                "here too (tag agent-protocols); their messages are the protocols' "
                f"own, typed by their specifications ({MCP_SPEC}, {A2A_SPEC})."
            ),
        },
        "servers": [{"url": "/"}],
        "tags": [
            {"name": name, "description": description}
            for name, description in dict.fromkeys((*TAGS.values(), AGENTS_TAG))
        ],
        "paths": paths,
        "components": {
            "schemas": components | AGENT_SCHEMAS,
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


# --- the agents' protocols ---------------------------------------------------
# Served in front of Quart (mcp_server/endpoint.py, a2a_server/routes.py), so
# not among the app's routes: described here by hand. Their bodies are the
# protocols' own messages, which the MCP and A2A specifications type; the
# document gives them as generic JSON-RPC 2.0 objects.

#: the tag of the agents' protocols: (name, description)
AGENTS_TAG: Final = ("agent-protocols", "Agents (MCP, A2A)")
MCP_SPEC: Final = "https://modelcontextprotocol.io/specification"
A2A_SPEC: Final = "https://a2a-protocol.org/latest/specification/"
_GUIDE: Final = "docs/agents-mcp-a2a.md"
#: the hand-described schemas' components
JSON_RPC: Final = "JsonRpcMessage"
_JSON_RPC_SCHEMA: Final[dict[str, Any]] = {
    "title": JSON_RPC,
    "description": (
        "A JSON-RPC 2.0 request, notification or response: a request has "
        "`id` and `method`, a notification `method` only, a response `id` and "
        "`result` or `error`. The protocol's own schemas govern `params`, "
        f"`result` and `error.data` (MCP: {MCP_SPEC}; A2A: {A2A_SPEC})."
    ),
    "type": "object",
    "properties": {
        "jsonrpc": {"const": "2.0"},
        "id": {"type": ["string", "integer", "null"]},
        "method": {"type": "string"},
        "params": {"type": ["object", "array"]},
        "result": {},
        "error": {
            "type": "object",
            "properties": {
                "code": {"type": "integer"},
                "message": {"type": "string"},
                "data": {},
            },
            "required": ["code", "message"],
        },
    },
    "required": ["jsonrpc"],
}
_RESOURCE_METADATA: Final[dict[str, Any]] = {
    "title": "ProtectedResourceMetadata",
    "description": "OAuth 2.0 protected-resource metadata (RFC 9728) of `/mcp`.",
    "type": "object",
    "properties": {
        "resource": {"type": "string", "description": "the URL of `/mcp` on this node"},
        "authorization_servers": {
            "type": "array",
            "items": {"type": "string"},
            "description": "where its tokens come from: this node",
        },
        "bearer_methods_supported": {"type": "array", "items": {"type": "string"}},
        "resource_name": {"type": "string"},
        "resource_documentation": {"type": "string"},
    },
    "required": ["resource"],
}
_AGENT_CARD: Final[dict[str, Any]] = {
    "title": "AgentCard",
    "description": f"An A2A 1.0 agent card; the A2A specification types it ({A2A_SPEC}).",
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "description": {"type": "string"},
        "supportedInterfaces": {"type": "array", "items": {"type": "object"}},
        "skills": {"type": "array", "items": {"type": "object"}},
        "securitySchemes": {"type": "object"},
    },
}
_AGENT_ID: Final = {
    "name": "agentId",
    "in": "path",
    "required": True,
    "description": "the bot's `agentId` (a bot that is an A2A agent)",
    "schema": {"type": "string"},
}
_SESSION_ID: Final = "Mcp-Session-Id"
_MCP_TOOLS: Final = (
    "list_rooms, join_room, read_messages, send_message, wait_for_messages, "
    "search_messages, list_participants, react, edit_message, delete_message, "
    "send_command, list_agents, update_task"
)
_A2A_METHODS: Final = (
    "SendMessage, SendStreamingMessage, GetTask, CancelTask, SubscribeToTask, ListTasks"
)


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF.format(name=name)}


def _json(description: str, schema: dict[str, Any], **headers: str) -> dict[str, Any]:
    """An answer with a JSON body, and the headers it carries (name: about)."""
    answer: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": schema}},
    }
    if headers:
        answer["headers"] = {
            name.replace("_", "-"): {"description": about, "schema": {"type": "string"}}
            for name, about in headers.items()
        }
    return answer


def _agent_operations() -> dict[str, dict[str, Any]]:
    """The path entries of ``/mcp``, its resource metadata and the A2A
    routes (see the block's comment)."""
    error = _ref("ErrorBody")
    rpc = _ref(JSON_RPC)
    either = {"anyOf": [error, rpc]}
    tag = [AGENTS_TAG[0]]
    unauthorized = _json(
        "no token, or one that is not valid (a mesh error)",
        error,
        WWW_Authenticate=(
            'Bearer, with error_description and resource_metadata="<node>'
            '/.well-known/oauth-protected-resource/mcp" (RFC 9728)'
        ),
    )
    session = {
        "name": _SESSION_ID,
        "in": "header",
        "description": "the session, as the answer to `initialize` named it",
        "schema": {"type": "string"},
    }
    version = {
        "name": "MCP-Protocol-Version",
        "in": "header",
        "required": False,
        "description": "the protocol revision the session negotiated (after `initialize`)",
        "schema": {"type": "string"},
    }
    mcp_errors = {
        "400": _json("not JSON-RPC, or no session header where one is needed", rpc),
        "401": unauthorized,
        "403": _json("a browser's request from another origin (a mesh error)", error),
        "404": _json("no such session: unknown, expired, ended, or another participant's", rpc),
        "4XX": _json("refused (the node's or the MCP SDK's answer)", either),
        "5XX": _json("the node failed, or is starting or stopping", either),
    }
    mcp_about = (
        "The node's MCP server (Model Context Protocol, Streamable HTTP, the "
        "current revision and the previous one), for AI agents: they act as "
        "the token's participant, with no more than its token can do over "
        f"REST. Tools: {_MCP_TOOLS}; resources `mesh://rooms/{{id}}`; a prompt. "
        f"The messages are the protocol's ({MCP_SPEC}); see {_GUIDE} (§ MCP)."
    )
    mcp: dict[str, Any] = {
        "post": {
            "operationId": "post_mcp",
            "tags": tag,
            "summary": "Send an MCP message (JSON-RPC request, notification or response)",
            "description": (
                f"{mcp_about} A request without `{_SESSION_ID}` opens a session "
                "(`initialize`), at most `max_mcp_sessions_per_participant` each."
            ),
            "parameters": [{**session, "required": False}, version],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": rpc}},
            },
            "responses": {
                "200": {
                    "description": (
                        "the answer, as JSON or as an event stream of messages "
                        "(as the request's Accept allows)"
                    ),
                    "headers": {
                        _SESSION_ID: {
                            "description": "the session `initialize` opened",
                            "schema": {"type": "string"},
                        }
                    },
                    "content": {
                        "application/json": {"schema": rpc},
                        "text/event-stream": {"schema": {"type": "string"}},
                    },
                },
                "202": {"description": "a notification or a response, accepted"},
                **mcp_errors,
                "413": {
                    "description": "the body is over `max_body_bytes`",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
                "429": _json(
                    "too_many_sessions: the participant's MCP sessions are all open (a mesh error)",
                    error,
                    Retry_After="seconds",
                ),
            },
        },
        "get": {
            "operationId": "get_mcp",
            "tags": tag,
            "summary": "Open the session's event stream (server-sent events)",
            "description": (
                f"{mcp_about} The stream carries the server's notifications "
                "(a room's new messages, for `resources/subscribe`) and requests. "
                "Not served with several workers (no sessions then)."
            ),
            "parameters": [{**session, "required": True}, version],
            "responses": {
                "200": {
                    "description": "the event stream, until the session ends",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}},
                },
                **mcp_errors,
            },
        },
        "delete": {
            "operationId": "delete_mcp",
            "tags": tag,
            "summary": "End the MCP session",
            "description": f"{mcp_about} Gives the participant's session seat back.",
            "parameters": [{**session, "required": True}, version],
            "responses": {
                "200": {"description": "the session is ended"},
                **mcp_errors,
            },
        },
    }
    metadata = {
        "get": {
            "operationId": "get_mcp_resource_metadata",
            "tags": tag,
            "summary": "The OAuth protected-resource metadata of /mcp (RFC 9728)",
            "description": (
                "Where `/mcp`'s tokens come from (this node) and how they are "
                "sent (the Authorization header); a 401 from `/mcp` points here. "
                "Also served at `/.well-known/oauth-protected-resource`."
            ),
            "security": [],
            "responses": {
                "200": _json("the metadata", _ref(_RESOURCE_METADATA["title"])),
                "4XX": _json("refused", error),
                "5XX": _json("the node failed", error),
            },
        }
    }
    a2a_about = (
        "The mesh's bots as A2A 1.0 agents (JSON-RPC binding): a message to a "
        "bot becomes a conversation with it in the mesh and a task the caller "
        f"can follow. Methods: {_A2A_METHODS}. The messages are the protocol's "
        f"({A2A_SPEC}); see {_GUIDE} (§ A2A)."
    )
    a2a_version = {
        "name": "A2A-Version",
        "in": "header",
        "required": False,
        "description": "`1.0` (the A2A SDK takes a missing header as 0.3)",
        "schema": {"type": "string", "examples": ["1.0"]},
    }
    rpc_errors = {
        "401": _json(
            "no token, or one that is not valid (a JSON-RPC error; the mesh's code "
            "in `error.data.code`)",
            rpc,
            WWW_Authenticate='Bearer realm="mesh"',
        ),
        "413": _json("the body is over `max_body_bytes` (a JSON-RPC error)", rpc),
        "4XX": _json("refused", either),
        "5XX": _json("the node failed", either),
    }

    def rpc_operation(
        operation_id: str, summary: str, description: str, *, agent: bool = False
    ) -> dict[str, Any]:
        errors = dict(rpc_errors)
        if agent:
            errors["404"] = _json(
                "agent_not_found: no such bot, or not an A2A agent (a JSON-RPC error)", rpc
            )
        return {
            "operationId": operation_id,
            "tags": tag,
            "summary": summary,
            "description": f"{description} {a2a_about}",
            "parameters": [_AGENT_ID, a2a_version] if agent else [a2a_version],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": rpc}},
            },
            "responses": {
                "200": {
                    "description": (
                        "the JSON-RPC response (an error too), or for the streaming "
                        "methods an event stream of them"
                    ),
                    "content": {
                        "application/json": {"schema": rpc},
                        "text/event-stream": {"schema": {"type": "string"}},
                    },
                },
                **errors,
            },
        }

    card = _ref(_AGENT_CARD["title"])
    paths: dict[str, dict[str, Any]] = {
        "/mcp": mcp,
        "/.well-known/oauth-protected-resource/mcp": metadata,
        "/.well-known/agent-card.json": {
            "get": {
                "operationId": "get_a2a_node_card",
                "tags": tag,
                "summary": "The node's A2A agent card (its skills are its A2A bots)",
                "description": (
                    "The node as an A2A agent: one skill per bot that is an A2A "
                    "agent (the skill's id is its `agentId`), its interface `/a2a`, "
                    f"and the mesh token as its security scheme. {a2a_about}"
                ),
                "security": [],
                "responses": {
                    "200": _json("the card", card),
                    "404": _json("no_a2a_agents: no bot of this mesh is an A2A agent", error),
                    "4XX": _json("refused", error),
                    "5XX": _json("the node failed", either),
                },
            }
        },
        "/a2a": {
            "post": rpc_operation(
                "post_a2a",
                "Call the node's A2A interface (JSON-RPC; the message names its bot)",
                "The bot is named in `message.metadata.agentId`.",
            )
        },
        "/a2a/agents/{agentId}": {
            "post": rpc_operation(
                "post_a2a_agent",
                "Call one bot's A2A interface (JSON-RPC)",
                "The bot is the path's.",
                agent=True,
            )
        },
        "/a2a/agents/{agentId}/.well-known/agent-card.json": {
            "get": {
                "operationId": "get_a2a_agent_card",
                "tags": tag,
                "summary": "One bot's A2A agent card",
                "description": (
                    f"The bot as an A2A agent, its interface `/a2a/agents/{{agentId}}`. {a2a_about}"
                ),
                "security": [],
                "parameters": [_AGENT_ID],
                "responses": {
                    "200": _json("the card", card),
                    "404": _json("agent_not_found: no such bot, or not an A2A agent", error),
                    "4XX": _json("refused", error),
                    "5XX": _json("the node failed", either),
                },
            }
        },
    }
    for methods in paths.values():
        for operation in methods.values():
            operation["responses"] = dict(sorted(operation["responses"].items()))
    return paths


#: the hand-described components: (name, schema)
AGENT_SCHEMAS: Final = {s["title"]: s for s in (_JSON_RPC_SCHEMA, _RESOURCE_METADATA, _AGENT_CARD)}
#: the agents' protocol paths the document describes by hand
AGENT_PATHS: Final = tuple(_agent_operations())


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
