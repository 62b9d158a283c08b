"""Migration 0029_a2a_opt_in: managed bots that exist when it runs are A2A
agents, external bots are not until they opt in (decision 0062)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from quart_mesh.store import Database
from quart_mesh.store.health import alembic_config

_PARTICIPANT = sa.text(
    "INSERT INTO participants (participant_id, name, name_key, kind, type, role,"
    " description, created_at) VALUES (:id, :name, :name, 'bot', :type, 'agent', '', 1)"
)
_AGENT = sa.text(
    "INSERT INTO agents (agent_id, managed, created_at, needs_key, webhook_private_ok)"
    " VALUES (:id, :managed, 1, :no, :no)"
)
BOTS = {
    "01CCCCCCCCCCCCCCCCCCCCCCC1": ("managed-echo", "echo", True),
    "01CCCCCCCCCCCCCCCCCCCCCCC2": ("external", "nanoclaw", False),
}


async def test_managed_bots_become_agents(store_url: str) -> None:
    engine = sa.create_engine(store_url)
    try:
        with engine.begin() as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0028_tasks")
            for agent_id, (name, bot_type, managed) in BOTS.items():
                conn.execute(_PARTICIPANT, {"id": agent_id, "name": name, "type": bot_type})
                conn.execute(_AGENT, {"id": agent_id, "managed": managed, "no": False})
    finally:
        engine.dispose()
    db = Database(store_url)
    await db.open()
    try:
        rows = await db.read(
            lambda conn: {
                r[0]: bool(r[1]) for r in conn.execute(sa.text("SELECT agent_id, a2a FROM agents"))
            }
        )
    finally:
        await db.close()
    assert rows == {"01CCCCCCCCCCCCCCCCCCCCCCC1": True, "01CCCCCCCCCCCCCCCCCCCCCCC2": False}
