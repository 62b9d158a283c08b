"""Apps and the app store (spec §4.15), and the sandboxed ``/run`` page.

``/run`` serves an app as one HTML document under a sandbox
Content-Security-Policy without ``allow-same-origin`` (the document and its
headers are built by ``app_page.py``; decision 0026). Undeployed apps are
previewed only with an ``Authorization`` header, never a token in the URL
(URLs end up in logs, history and ``Referer``).
"""

from __future__ import annotations

from typing import Any

import msgspec
from quart import Blueprint, Response, request

from ..errors import NotFound, Unauthorized
from ..services.apps import source_json
from ..services.authz import Actor
from ._common import caller, node, reply, token_sent
from .app_page import RUN_HEADERS, render_document
from .contract import Body, Shape, accepts, answers, answers_media, public
from .objects import Id, Ok, Timestamp

bp = Blueprint("apps", __name__)

#: paths whose bodies may be as large as ``max_app_body_bytes`` (app source)
APPS_PREFIX = "/api/apps"


class CreateApp(Body):
    name: str
    html: str
    css: str | None = None
    js: str | None = None
    description: str | None = None


class GenerateApp(Body):
    #: what the app should do
    prompt: str
    #: the model to ask (the node's default when absent or "")
    model: str | None = None
    #: the app's name (made from the prompt when absent)
    name: str | None = None


class UpdateSource(Body):
    """The parts to change (at least one); the others are kept."""

    html: str | None = None
    css: str | None = None
    js: str | None = None


class AppSummary(Shape):
    """An app as its owner (or an admin) sees it, without its source."""

    app_id: Id
    name: str
    description: str
    owner_id: str
    owner_name: str
    #: the current version's number
    version: int
    deployed: bool
    created_at: Timestamp
    updated_at: Timestamp
    #: where the app runs (its sandboxed page)
    run_url: str


class AppView(AppSummary):
    """An app with its current version's source (absent if it has none)."""

    html: str | msgspec.UnsetType = msgspec.UNSET
    css: str | msgspec.UnsetType = msgspec.UNSET
    js: str | msgspec.UnsetType = msgspec.UNSET


class StoreApp(Shape):
    """A deployed app as the public app store lists it."""

    app_id: Id
    name: str
    description: str
    #: its owner's name
    author: str
    run_url: str
    updated_at: Timestamp


class AppDeleted(Ok):
    app_id: Id


class VersionInfo(Shape):
    """One stored version of an app's source (``size``: bytes of source)."""

    version: int
    created_at: Timestamp
    size: int


class AppVersion(Shape):
    """One stored version of an app's source."""

    app_id: Id
    version: int
    html: str
    css: str
    js: str
    size: int
    created_at: Timestamp


def _base() -> str:
    return node().address.url or request.host_url


def _version_number(raw: str) -> int:
    if not raw.isascii() or not raw.isdigit() or len(raw) > 9:
        raise NotFound("no such version", "version_not_found")
    return int(raw)


@bp.get("/api/apps")
@answers(list[AppSummary])
async def list_apps() -> tuple[Any, int]:
    """The caller's apps, newest first (admins: every app)."""
    actor = await caller()
    base = _base()
    return reply([app.to_json(base) for app in await node().apps.list_apps(actor)])


@bp.post("/api/apps")
@accepts(CreateApp)
@answers(AppView, 201)
async def create_app(data: CreateApp) -> tuple[Any, int]:
    """Create an app from its source (version 1, not deployed)."""
    actor = await caller()
    app = await node().apps.create(
        actor,
        name=data.name,
        html=data.html,
        css=data.css,
        js=data.js,
        description=data.description,
    )
    return reply(app.to_json(_base()), 201)


@bp.post("/api/apps/generate")
@accepts(GenerateApp)
@answers(AppView, 201)
async def generate_app(data: GenerateApp) -> tuple[Any, int]:
    """Create an app that a model writes from a prompt."""
    actor = await caller()
    app = await node().apps.generate(
        actor,
        prompt=data.prompt,
        model=data.model or None,
        name=data.name,
    )
    return reply(app.to_json(_base()), 201)


@bp.get("/api/apps/deployed")
@public()
@answers(list[StoreApp])
async def deployed_apps() -> tuple[Any, int]:
    """The app store: every deployed app, newest first."""
    base = _base()
    return reply([app.to_store_json(base) for app in await node().apps.list_deployed()])


@bp.get("/api/apps/<app_id>")
@answers(AppView)
async def get_app(app_id: str) -> tuple[Any, int]:
    """An app with its current source (its owner's, an admin's, or a deployed one)."""
    actor = await caller()
    return reply((await node().apps.get(actor, app_id)).to_json(_base()))


@bp.delete("/api/apps/<app_id>")
@answers(AppDeleted)
async def delete_app(app_id: str) -> tuple[Any, int]:
    """Delete an app and all its versions (its owner, or an admin)."""
    actor = await caller()
    await node().apps.delete(actor, app_id)
    return reply({"ok": True, "appId": app_id})


@bp.put("/api/apps/<app_id>/source")
@accepts(UpdateSource)
@answers(AppView)
async def update_source(app_id: str, data: UpdateSource) -> tuple[Any, int]:
    """Store a new version of an app's source; the parts not given are kept."""
    actor = await caller()
    app = await node().apps.update_source(
        actor,
        app_id,
        html=data.html,
        css=data.css,
        js=data.js,
    )
    return reply(app.to_json(_base()))


@bp.get("/api/apps/<app_id>/versions")
@answers(list[VersionInfo])
async def list_versions(app_id: str) -> tuple[Any, int]:
    """An app's stored versions, newest first."""
    actor = await caller()
    return reply(await node().apps.versions(actor, app_id))


@bp.get("/api/apps/<app_id>/versions/<version>")
@answers(AppVersion)
async def get_version(app_id: str, version: str) -> tuple[Any, int]:
    """One stored version of an app's source."""
    actor = await caller()
    source = await node().apps.version(actor, app_id, _version_number(version))
    return reply({"appId": app_id, **source_json(source)})


@bp.post("/api/apps/<app_id>/deploy")
@answers(AppView)
async def deploy(app_id: str) -> tuple[Any, int]:
    """Deploy an app: it runs for anyone and is listed in the app store."""
    actor = await caller()
    return reply((await node().apps.set_deployed(actor, app_id, True)).to_json(_base()))


@bp.post("/api/apps/<app_id>/undeploy")
@answers(AppView)
async def undeploy(app_id: str) -> tuple[Any, int]:
    """Take an app out of the app store: only its owner and admins may run it."""
    actor = await caller()
    return reply((await node().apps.set_deployed(actor, app_id, False)).to_json(_base()))


@bp.get("/api/apps/<app_id>/run")
@public("bearer token (the owner's or an admin's, to preview an undeployed app)")
@answers_media("text/html")
async def run_app(app_id: str) -> Response:
    """An app's sandboxed page (HTML): public for deployed apps.

    The owner and admins preview an undeployed one by sending their token in
    the ``Authorization`` header."""
    actor: Actor | None = None
    if token_sent():
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
