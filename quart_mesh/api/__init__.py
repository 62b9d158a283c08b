"""HTTP transport: one Quart blueprint per resource group of spec §4.

Handlers parse and type-check input, call one service function, and render
its result. They never touch SQL and never decide access.
"""

from __future__ import annotations

from quart import Blueprint

from . import (
    admin,
    agents,
    apps,
    auth,
    discovery,
    dms,
    federation,
    health,
    identity,
    metrics,
    models,
    openapi,
    participants,
    previews,
    roles,
    rooms,
    search,
    state,
    tasks,
    uploads,
    vault,
)

__all__ = ["BLUEPRINTS"]

BLUEPRINTS: tuple[Blueprint, ...] = (
    health.bp,
    auth.bp,
    rooms.bp,
    previews.bp,
    search.bp,
    tasks.bp,
    dms.bp,
    participants.bp,
    agents.bp,
    models.bp,
    state.bp,
    discovery.bp,
    roles.bp,
    identity.bp,
    vault.bp,
    admin.bp,
    apps.bp,
    uploads.bp,
    federation.bp,
    metrics.bp,
    openapi.bp,
)
