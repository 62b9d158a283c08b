"""Apps and the app store (spec §4.15), and the sandboxed ``/run`` page.

``/run`` serves an app as one HTML document under a sandbox
Content-Security-Policy without ``allow-same-origin`` (the document and its
headers are built by ``app_page.py``; decision 0026). Undeployed apps are
previewed only with an ``Authorization`` header, never a token in the URL
(URLs end up in logs, history and ``Referer``).
"""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response, request

from ..errors import NotFound, Unauthorized
from ..services.apps import source_json
from ..services.authz import Actor
from ._common import body, caller, node, reply
from .app_page import RUN_HEADERS, render_document

bp = Blueprint("apps", __name__)

#: paths whose bodies may be as large as ``max_app_body_bytes`` (app source)
APPS_PREFIX = "/api/apps"


def _base() -> str:
    return node().address.url or request.host_url


def _version_number(raw: str) -> int:
    if not raw.isascii() or not raw.isdigit() or len(raw) > 9:
        raise NotFound("no such version", "version_not_found")
    return int(raw)


@bp.get("/api/apps")
async def list_apps() -> tuple[Any, int]:
    actor = await caller()
    base = _base()
    return reply([app.to_json(base) for app in await node().apps.list_apps(actor)])


@bp.post("/api/apps")
async def create_app() -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    app = await node().apps.create(
        actor,
        name=fields.req_str("name"),
        html=fields.req_str("html"),
        css=fields.opt_str("css"),
        js=fields.opt_str("js"),
        description=fields.opt_str("description"),
    )
    return reply(app.to_json(_base()), 201)


@bp.post("/api/apps/generate")
async def generate_app() -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    app = await node().apps.generate(
        actor,
        prompt=fields.req_str("prompt"),
        model=fields.opt_str("model") or None,
        name=fields.opt_str("name"),
    )
    return reply(app.to_json(_base()), 201)


@bp.get("/api/apps/deployed")
async def deployed_apps() -> tuple[Any, int]:
    base = _base()
    return reply([app.to_store_json(base) for app in await node().apps.list_deployed()])


@bp.get("/api/apps/<app_id>")
async def get_app(app_id: str) -> tuple[Any, int]:
    actor = await caller()
    return reply((await node().apps.get(actor, app_id)).to_json(_base()))


@bp.delete("/api/apps/<app_id>")
async def delete_app(app_id: str) -> tuple[Any, int]:
    actor = await caller()
    await node().apps.delete(actor, app_id)
    return reply({"ok": True, "appId": app_id})


@bp.put("/api/apps/<app_id>/source")
async def update_source(app_id: str) -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    app = await node().apps.update_source(
        actor,
        app_id,
        html=fields.opt_str("html"),
        css=fields.opt_str("css"),
        js=fields.opt_str("js"),
    )
    return reply(app.to_json(_base()))


@bp.get("/api/apps/<app_id>/versions")
async def list_versions(app_id: str) -> tuple[Any, int]:
    actor = await caller()
    return reply(await node().apps.versions(actor, app_id))


@bp.get("/api/apps/<app_id>/versions/<version>")
async def get_version(app_id: str, version: str) -> tuple[Any, int]:
    actor = await caller()
    source = await node().apps.version(actor, app_id, _version_number(version))
    return reply({"appId": app_id, **source_json(source)})


@bp.post("/api/apps/<app_id>/deploy")
async def deploy(app_id: str) -> tuple[Any, int]:
    actor = await caller()
    return reply((await node().apps.set_deployed(actor, app_id, True)).to_json(_base()))


@bp.post("/api/apps/<app_id>/undeploy")
async def undeploy(app_id: str) -> tuple[Any, int]:
    actor = await caller()
    return reply((await node().apps.set_deployed(actor, app_id, False)).to_json(_base()))


@bp.get("/api/apps/<app_id>/run")
async def run_app(app_id: str) -> Response:
    """Public for deployed apps; the owner and admins preview an undeployed
    one by sending their token in the ``Authorization`` header."""
    actor: Actor | None = None
    if request.headers.get("Authorization"):
        try:
            actor = await caller()
        except Unauthorized:
            actor = None  # a bad token previews nothing, like no token
    app = await node().apps.runnable(actor, app_id)
    return Response(
        render_document(app),
        status=200,
        content_type="text/html; charset=utf-8",
        headers=RUN_HEADERS,
    )
