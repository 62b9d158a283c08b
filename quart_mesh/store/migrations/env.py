"""Alembic environment: migrations run on the connection the node hands in."""

from __future__ import annotations

from alembic import context

from quart_mesh.store.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only the node runs migrations
    raise RuntimeError("quart-mesh migrations run through Database.open()")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
