"""Repository: apps of the app store and the versions of their source."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from .schema import app_versions, apps, participants

__all__ = [
    "AppRow",
    "Source",
    "VersionInfo",
    "count_apps",
    "delete_app",
    "get_app",
    "get_version",
    "insert_app",
    "list_apps",
    "list_versions",
    "new_version",
    "set_deployed",
]


@dataclass(frozen=True, slots=True)
class Source:
    """One version of an app's source."""

    version: int
    html: str = field(repr=False)
    css: str = field(repr=False)
    js: str = field(repr=False)
    size: int
    created_at: int
    created_by: str | None = None


@dataclass(frozen=True, slots=True)
class AppRow:
    app_id: str
    owner_id: str
    owner_name: str
    name: str
    description: str
    version: int
    deployed: bool
    created_at: int
    updated_at: int


@dataclass(frozen=True, slots=True)
class VersionInfo:
    version: int
    size: int
    created_at: int


def _select_apps() -> sa.Select[Any]:
    c = apps.c
    return sa.select(
        c.app_id,
        c.owner_id,
        participants.c.name.label("owner_name"),
        c.name,
        c.description,
        c.version,
        c.deployed,
        c.created_at,
        c.updated_at,
    ).join(participants, participants.c.participant_id == c.owner_id)


def _app(r: Row[Any]) -> AppRow:
    return AppRow(
        r.app_id,
        r.owner_id,
        r.owner_name,
        r.name,
        r.description,
        r.version,
        bool(r.deployed),
        r.created_at,
        r.updated_at,
    )


def insert_app(conn: Connection, app: AppRow, source: Source) -> None:
    conn.execute(
        apps.insert().values(
            app_id=app.app_id,
            owner_id=app.owner_id,
            name=app.name,
            description=app.description,
            version=source.version,
            deployed=app.deployed,
            created_at=app.created_at,
            updated_at=app.updated_at,
        )
    )
    _insert_source(conn, app.app_id, source)


def _insert_source(conn: Connection, app_id: str, source: Source) -> None:
    conn.execute(
        app_versions.insert().values(
            app_id=app_id,
            version=source.version,
            html=source.html,
            css=source.css,
            js=source.js,
            size=source.size,
            created_by=source.created_by,
            created_at=source.created_at,
        )
    )


def get_app(conn: Connection, app_id: str) -> AppRow | None:
    row = conn.execute(_select_apps().where(apps.c.app_id == app_id)).first()
    return None if row is None else _app(row)


def list_apps(
    conn: Connection, *, owner_id: str | None = None, deployed_only: bool = False
) -> Sequence[AppRow]:
    """Apps, newest first: *owner_id*'s (or everyone's), deployed ones only if asked."""
    query = _select_apps()
    if owner_id is not None:
        query = query.where(apps.c.owner_id == owner_id)
    if deployed_only:
        query = query.where(apps.c.deployed == sa.true())
    return [_app(r) for r in conn.execute(query.order_by(apps.c.app_id.desc()))]


def count_apps(conn: Connection, owner_id: str) -> int:
    query = sa.select(sa.func.count()).select_from(apps).where(apps.c.owner_id == owner_id)
    return int(conn.execute(query).scalar_one())


def new_version(conn: Connection, app_id: str, source: Source, *, keep: int) -> AppRow | None:
    """Store *source* as the app's current version (its ``version`` must be
    the current one + 1) and drop all but the newest *keep* versions; the app
    as it is now, or ``None`` if there is no such app."""
    result = conn.execute(
        apps.update()
        .where(apps.c.app_id == app_id, apps.c.version == source.version - 1)
        .values(version=source.version, updated_at=source.created_at)
    )
    if result.rowcount == 0:
        return None
    _insert_source(conn, app_id, source)
    conn.execute(
        app_versions.delete().where(
            app_versions.c.app_id == app_id, app_versions.c.version <= source.version - keep
        )
    )
    return get_app(conn, app_id)


def set_deployed(conn: Connection, app_id: str, deployed: bool, at: int) -> AppRow | None:
    conn.execute(
        apps.update().where(apps.c.app_id == app_id).values(deployed=deployed, updated_at=at)
    )
    return get_app(conn, app_id)


def get_version(conn: Connection, app_id: str, version: int) -> Source | None:
    c = app_versions.c
    row = conn.execute(
        sa.select(c.version, c.html, c.css, c.js, c.size, c.created_at, c.created_by).where(
            c.app_id == app_id, c.version == version
        )
    ).first()
    if row is None:
        return None
    return Source(row.version, row.html, row.css, row.js, row.size, row.created_at, row.created_by)


def list_versions(conn: Connection, app_id: str) -> Sequence[VersionInfo]:
    """The stored versions of *app_id*, newest first."""
    c = app_versions.c
    rows = conn.execute(
        sa.select(c.version, c.size, c.created_at)
        .where(c.app_id == app_id)
        .order_by(c.version.desc())
    )
    return [VersionInfo(r.version, r.size, r.created_at) for r in rows]


def delete_app(conn: Connection, app_id: str) -> bool:
    """Delete *app_id* and its versions; whether it existed."""
    conn.execute(app_versions.delete().where(app_versions.c.app_id == app_id))
    return conn.execute(apps.delete().where(apps.c.app_id == app_id)).rowcount > 0
