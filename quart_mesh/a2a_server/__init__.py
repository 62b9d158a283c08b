"""The mesh's bots as A2A agents (A2A 1.0, JSON-RPC binding; decision 0062).

A thin transport over the services, beside ``api/`` and ``realtime/``: the
official ``a2a-sdk``'s JSON-RPC dispatcher (Starlette, which runs on Trio
through anyio) with a Trio-native request handler that calls the tasks
service. Cards and layout: ``cards.py``; mounting and authentication:
``routes.py``; the handler: ``handler.py``; the mapping of tasks and
messages to the SDK's types: ``mapping.py``.
"""

from __future__ import annotations

from .cards import AGENTS_PREFIX, CARD_PATH, NODE_RPC_PATH, agent_card_path, agent_rpc_path
from .routes import a2a_app, is_a2a_path, with_a2a

__all__ = [
    "AGENTS_PREFIX",
    "CARD_PATH",
    "NODE_RPC_PATH",
    "a2a_app",
    "agent_card_path",
    "agent_rpc_path",
    "is_a2a_path",
    "with_a2a",
]
