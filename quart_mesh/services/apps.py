"""Apps (spec §4.15): HTML/CSS/JS stored in versions, AI-generated from a
prompt and deployed to the app store.

Who may do what (``docs/apps.md``): anyone with a token lists their own apps
(``apps.read``); agents and above create and generate apps and change their
source (``apps.create``) and deploy them (``apps.deploy``); acting on an app
needs ``apps.manage``, which an app's owner holds for its own apps and admins
hold for all. Someone else's undeployed app answers like a missing one (404),
so its existence does not leak.

Serving is not done here: :meth:`Apps.runnable` hands the transport the app
and its current source, and ``api/app_page.py`` renders the sandboxed
document and its headers (decision 0026).

Generation goes through the node's one model proxy
(:meth:`ModelProxy.complete`) as the caller, so the caller's rate limit and
usage accounting apply; the model's answer is read leniently by
:func:`quart_mesh.app_source.parse_answer`, the parser the ``coder`` bot uses too.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy.engine import Connection

from ..app_source import parse_answer
from ..config import Limits, Settings
from ..disk import DiskSpace
from ..errors import (
    BadGateway,
    BadRequest,
    Conflict,
    Forbidden,
    GatewayTimeout,
    MeshError,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    Unavailable,
)
from ..ids import is_ulid, new_id
from ..records import iso, now_ms
from ..store import Database
from ..store import apps as repo
from .authz import Actor, authorize
from .model_proxy import ModelProxy, OpenAIError, Stream

__all__ = ["APP_PROMPT", "App", "Apps", "source_json"]

_MAX_NAME = 100

#: the system prompt of ``POST /api/apps/generate``
APP_PROMPT = (
    "You build small web apps. Answer with ONE complete, self-contained app: "
    "either a single ```html fenced code block holding a whole HTML document "
    "(inline <style> and <script>), or three fenced blocks ```html (the body "
    "markup), ```css and ```js. Use no external resources at all: no CDN "
    "scripts, fonts, images or network requests (the app runs sandboxed with "
    "every network request blocked and no cookies or localStorage); draw "
    "images with CSS, SVG, canvas or data: URLs and keep state in memory. "
    "Write nothing outside the code blocks except at most one short sentence."
)


def source_json(source: repo.Source) -> dict[str, Any]:
    """One version of an app's source, as ``GET /api/apps/:id/versions/:n`` shows it."""
    return {
        "version": source.version,
        "html": source.html,
        "css": source.css,
        "js": source.js,
        "size": source.size,
        "createdAt": iso(source.created_at),
    }


@dataclass(frozen=True, slots=True)
class App(repo.AppRow):
    """An app as the store keeps it, with its current source where asked for."""

    source: repo.Source | None = None

    def run_url(self, base: str) -> str:
        return f"{base.rstrip('/')}/api/apps/{self.app_id}/run"

    def to_json(self, base: str) -> dict[str, Any]:
        """The app as its owner sees it (with the source, if loaded)."""
        data: dict[str, Any] = {
            "appId": self.app_id,
            "name": self.name,
            "description": self.description,
            "ownerId": self.owner_id,
            "ownerName": self.owner_name,
            "version": self.version,
            "deployed": self.deployed,
            "createdAt": iso(self.created_at),
            "updatedAt": iso(self.updated_at),
            "runUrl": self.run_url(base),
        }
        if self.source is not None:
            data |= {"html": self.source.html, "css": self.source.css, "js": self.source.js}
        return data

    def to_store_json(self, base: str) -> dict[str, Any]:
        """The app as the (public) app store lists it."""
        return {
            "appId": self.app_id,
            "name": self.name,
            "description": self.description,
            "author": self.owner_name,
            "runUrl": self.run_url(base),
            "updatedAt": iso(self.updated_at),
        }


def _app(row: repo.AppRow, source: repo.Source | None = None) -> App:
    return App(**{f.name: getattr(row, f.name) for f in fields(repo.AppRow)}, source=source)


class Apps:
    def __init__(
        self,
        settings: Settings,
        db: Database,
        model_proxy: ModelProxy,
        *,
        disk: DiskSpace | None = None,
    ) -> None:
        self._settings = settings
        #: below its floor, new app sources are refused (507)
        self._disk = disk
        self._limits: Limits = settings.limits
        self._db = db
        self._models = model_proxy

    # reading ------------------------------------------------------------------

    async def list_apps(self, actor: Actor) -> list[App]:
        """The caller's apps, newest first; admins (``apps.manage``) see every app."""
        authorize(actor, "apps.read")
        everyone = _holds(actor, "apps.manage")
        owner = None if everyone else actor.participant_id
        rows = await self._db.read(lambda conn: repo.list_apps(conn, owner_id=owner))
        return [_app(row) for row in rows]

    async def list_deployed(self) -> list[App]:
        """The app store: every deployed app, newest first (public)."""
        rows = await self._db.read(lambda conn: repo.list_apps(conn, deployed_only=True))
        return [_app(row) for row in rows]

    async def get(self, actor: Actor, app_id: str) -> App:
        """An app with its current source: the owner's or an admin's, or any
        deployed one (whose source is public anyway).

        Raises:
            NotFound: no such app the caller may see (``app_not_found``).
        """
        authorize(actor, "apps.read")

        def read(conn: Connection) -> App:
            row = self._visible(conn, actor, app_id, deployed_ok=True)
            return _app(row, repo.get_version(conn, app_id, row.version))

        return await self._db.read(read)

    async def versions(self, actor: Actor, app_id: str) -> list[dict[str, Any]]:
        """``{version, createdAt, size}`` of each stored version, newest first."""
        authorize(actor, "apps.read")

        def read(conn: Connection) -> list[dict[str, Any]]:
            self._visible(conn, actor, app_id)
            return [
                {"version": v.version, "createdAt": iso(v.created_at), "size": v.size}
                for v in repo.list_versions(conn, app_id)
            ]

        return await self._db.read(read)

    async def version(self, actor: Actor, app_id: str, version: int) -> repo.Source:
        """One stored version's source.

        Raises:
            NotFound: no such app (``app_not_found``) or version (``version_not_found``).
        """
        authorize(actor, "apps.read")

        def read(conn: Connection) -> repo.Source | None:
            self._visible(conn, actor, app_id)
            return repo.get_version(conn, app_id, version)

        source = await self._db.read(read)
        if source is None:
            raise NotFound(f"app {app_id} has no version {version}", "version_not_found")
        return source

    async def runnable(self, actor: Actor | None, app_id: str) -> App:
        """The app to serve at ``/run``, with its current source: any deployed
        app; an undeployed one only for its owner or an admin (*actor*).

        Raises:
            NotFound: no such app, or not deployed and *actor* may not preview it.
        """

        def read(conn: Connection) -> App:
            row = repo.get_app(conn, app_id) if is_ulid(app_id) else None
            if row is None or not (row.deployed or (actor is not None and _may_manage(actor, row))):
                raise NotFound("no such app", "app_not_found")
            return _app(row, repo.get_version(conn, app_id, row.version))

        return await self._db.read(read)

    # writing ------------------------------------------------------------------

    async def create(
        self,
        actor: Actor,
        *,
        name: str,
        html: str,
        css: str | None = None,
        js: str | None = None,
        description: str | None = None,
    ) -> App:
        """Create an app (version 1, not deployed).

        Raises:
            Forbidden: may not create apps (``apps.create``).
            BadRequest: bad name (``invalid_name``), description
                (``invalid_description``) or source (``empty_source``, ``invalid_source``).
            PayloadTooLarge: the source is over ``max_app_source_bytes`` (``source_too_large``).
            Conflict: the caller owns ``max_apps_per_participant`` apps (``too_many_apps``).
            InsufficientStorage: free disk space is below the node's floor.
        """
        authorize(actor, "apps.create")
        self._require_room()
        name = self._check_name(name)
        description = self._check_description(description or "")
        if not html.strip():
            raise BadRequest("html must not be empty", "empty_source")
        source = self._source(1, html, css or "", js or "", actor)
        with self._room(source.size):
            return await self._insert(actor, name, description, source)

    async def _insert(self, actor: Actor, name: str, description: str, source: repo.Source) -> App:
        at = source.created_at
        row = repo.AppRow(
            new_id(at),
            actor.participant_id,
            actor.name,
            name,
            description,
            1,
            False,
            at,
            at,
        )
        limit = self._limits.max_apps_per_participant

        def write(conn: Connection) -> repo.AppRow:
            if repo.count_apps(conn, actor.participant_id) >= limit:
                raise Conflict(
                    f"you own {limit} apps, the most allowed: delete one first",
                    "too_many_apps",
                )
            repo.insert_app(conn, row, source)
            return repo.get_app(conn, row.app_id) or row

        return _app(await self._db.write(write), source)

    async def update_source(
        self,
        actor: Actor,
        app_id: str,
        *,
        html: str | None = None,
        css: str | None = None,
        js: str | None = None,
    ) -> App:
        """Store a new version; the parts not given are kept from the current one.

        Raises:
            BadRequest: nothing given (``missing_field``), an empty html, bad source.
            NotFound: no such app the caller may change (``app_not_found``).
            PayloadTooLarge: ``source_too_large``.
            InsufficientStorage: free disk space is below the node's floor.
        """
        authorize(actor, "apps.create")
        self._require_room()
        if html is None and css is None and js is None:
            raise BadRequest("give html, css or js", "missing_field")
        if html is not None and not html.strip():
            raise BadRequest("html must not be empty", "empty_source")
        keep = self._limits.max_app_versions
        # the parts given; those kept from the current version are copied
        # too, within max_app_source_bytes
        given = sum(len(part.encode("utf-8", "surrogatepass")) for part in (html, css, js) if part)

        def write(conn: Connection) -> App:
            row = self._visible(conn, actor, app_id)
            current = repo.get_version(conn, app_id, row.version)
            if current is None:  # pruning keeps at least the newest
                raise NotFound("no such app", "app_not_found")
            source = self._source(
                row.version + 1,
                current.html if html is None else html,
                current.css if css is None else css,
                current.js if js is None else js,
                actor,
            )
            updated = repo.new_version(conn, app_id, source, keep=keep)
            if updated is None:
                raise NotFound("no such app", "app_not_found")
            return _app(updated, source)

        with self._room(given):
            return await self._db.write(write)

    async def set_deployed(self, actor: Actor, app_id: str, deployed: bool) -> App:
        """Deploy an app to the app store, or take it down.

        Raises:
            Forbidden: may not deploy apps (``apps.deploy``).
            NotFound: no such app the caller may change (``app_not_found``).
        """
        authorize(actor, "apps.deploy")

        def write(conn: Connection) -> App:
            row = self._visible(conn, actor, app_id)
            if row.deployed == deployed:
                return _app(row)
            updated = repo.set_deployed(conn, app_id, deployed, now_ms())
            return _app(updated or row)

        return await self._db.write(write)

    async def delete(self, actor: Actor, app_id: str) -> None:
        """Delete an app and every version of it (owner or admin)."""
        authorize(actor, "apps.read")

        def write(conn: Connection) -> None:
            self._visible(conn, actor, app_id)
            repo.delete_app(conn, app_id)

        await self._db.write(write)

    # generating ---------------------------------------------------------------

    async def generate(
        self,
        actor: Actor,
        *,
        prompt: str,
        model: str | None = None,
        name: str | None = None,
    ) -> App:
        """Ask a model for an app and store it (version 1, not deployed).

        Raises:
            Forbidden: may not create apps.
            BadRequest: bad prompt (``invalid_prompt``), no model configured
                (``no_model``), unknown model (``model_not_found``).
            RateLimited: the caller's model rate limit.
            BadGateway: the model is unreachable or failed (``upstream_*``), or
                its answer holds no HTML (``no_app_in_answer``).
            GatewayTimeout: the model did not answer in time (``upstream_timeout``).
        """
        authorize(actor, "apps.create")
        self._require_room()  # before the model is asked
        prompt = prompt.strip()
        longest = self._limits.max_app_prompt_chars
        if not 1 <= len(prompt) <= longest or "\x00" in prompt:
            raise BadRequest(f"prompt must be 1 to {longest} characters", "invalid_prompt")
        if name is not None:
            name = self._check_name(name)
        model = model or self._default_model(actor)
        body = {
            "model": model,
            "stream": False,
            "messages": [
                {"role": "system", "content": APP_PROMPT},
                {"role": "user", "content": prompt},
            ],
        }
        try:
            answer = await self._models.complete(actor, body, None)
        except OpenAIError as error:
            raise _translate(error, model) from None
        text = _answer_text(answer)
        parsed = parse_answer(text)
        if parsed is None:
            raise BadGateway(
                "the model's answer holds no HTML app; try again or rephrase", "no_app_in_answer"
            )
        if name is None:
            name = self._check_name(parsed.name or _name_from(prompt))
        description = prompt[: self._limits.max_description_chars].replace("\x00", "")
        try:
            return await self.create(
                actor,
                name=name,
                html=parsed.html,
                css=parsed.css,
                js=parsed.js,
                description=description,
            )
        except PayloadTooLarge as error:
            raise BadGateway(error.message, "no_app_in_answer") from None

    def _require_room(self) -> None:
        """Refuse a new app source while the data folder is below its disk floor."""
        if self._disk is not None:
            self._disk.require_room("new app sources")

    def _room(self, size: int) -> contextlib.AbstractContextManager[object]:
        """Room for a source of *size* bytes above the data folder's floor,
        promised while it is written (uploads in progress counted).

        Raises:
            InsufficientStorage: not that much room (507).
        """
        if self._disk is None:
            return contextlib.nullcontext()
        return self._disk.reserve("new app sources", size)

    def _default_model(self, actor: Actor) -> str:
        """The first model configured at start-up, else the oldest added over the API."""
        if self._settings.models:
            return self._settings.models[0].name
        added = [m for m in self._models.list_models(actor) if m.get("source") == "api"]
        if not added:
            raise BadRequest("no model is configured on this node", "no_model")
        added.sort(key=lambda m: (m.get("createdAt") or "", m["name"]))
        return str(added[0]["name"])

    # checks -------------------------------------------------------------------

    def _visible(
        self, conn: Connection, actor: Actor, app_id: str, *, deployed_ok: bool = False
    ) -> repo.AppRow:
        """The app, if *actor* may manage it (or, with *deployed_ok*, it is deployed)."""
        row = repo.get_app(conn, app_id) if is_ulid(app_id) else None
        if row is None or not (_may_manage(actor, row) or (deployed_ok and row.deployed)):
            raise NotFound("no such app", "app_not_found")
        return row

    def _check_name(self, name: str) -> str:
        name = name.strip()
        if not 1 <= len(name) <= _MAX_NAME or any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
            raise BadRequest(
                f"name must be 1 to {_MAX_NAME} characters without control characters",
                "invalid_name",
            )
        return name

    def _check_description(self, description: str) -> str:
        longest = self._limits.max_description_chars
        if len(description) > longest or "\x00" in description:
            raise BadRequest(
                f"description must be at most {longest} characters, without NUL",
                "invalid_description",
            )
        return description

    def _source(self, version: int, html: str, css: str, js: str, actor: Actor) -> repo.Source:
        if "\x00" in html + css + js:
            raise BadRequest("the source must not contain NUL", "invalid_source")
        size = sum(len(part.encode("utf-8", "surrogatepass")) for part in (html, css, js))
        limit = self._limits.max_app_source_bytes
        if size > limit:
            raise PayloadTooLarge(
                f"the source is {size} bytes; the limit is {limit}", "source_too_large"
            )
        return repo.Source(version, html, css, js, size, now_ms(), actor.participant_id)


def _holds(actor: Actor, permission: str) -> bool:
    try:
        authorize(actor, permission)
    except Forbidden:
        return False
    return True


def _may_manage(actor: Actor, row: repo.AppRow) -> bool:
    try:
        authorize(actor, "apps.manage", owner_id=row.owner_id)
    except Forbidden:
        return False
    return True


def _translate(error: OpenAIError, model: str) -> MeshError:
    """An error of the model proxy as this endpoint's ``{error, code}``."""
    if error.code == "model_not_found":
        return BadRequest(f"no model named {model[:100]} is configured", "model_not_found")
    if error.status == 429:
        wait = error.retry_after or ""
        retry = float(wait) if wait.isascii() and wait.isdigit() else 1.0
        # this endpoint's own codes: a spent day is told apart from a busy minute
        code = "insufficient_quota" if error.code == "insufficient_quota" else "rate_limited"
        return RateLimited(error.message, retry, code)
    if error.status == 403:
        return Forbidden(error.message, error.code or "forbidden")
    if error.status == 504:
        return GatewayTimeout(error.message, "upstream_timeout")
    if error.status == 503:
        return Unavailable(error.message, "model_proxy_unavailable")
    if error.code == "upstream_unreachable":
        return BadGateway(error.message, "upstream_unreachable")
    return BadGateway(f"the model failed: {error.message}"[:500], "upstream_error")


def _answer_text(answer: dict[str, Any] | Stream) -> str:
    try:
        content = answer["choices"][0]["message"]["content"]  # type: ignore[index]
    except (KeyError, IndexError, TypeError):
        content = None
    if not isinstance(content, str):
        raise BadGateway("the model's answer holds no text", "no_app_in_answer")
    return content


def _name_from(prompt: str) -> str:
    line = " ".join(prompt.split())
    return line if len(line) <= 60 else line[:59].rstrip() + "…"
