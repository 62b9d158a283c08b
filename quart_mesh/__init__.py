"""quart-mesh: a self-hostable chat and agent-coordination server.

The public API::

    from quart_mesh import Settings, create_app, serve, open_node, Node

See ``docs/embedding.md`` for running a node inside your own Trio program.
"""

from ._version import __version__
from .app import MeshApp, create_app
from .config import Limits, Settings
from .node import Node, open_node
from .server import serve

__all__ = [
    "Limits",
    "MeshApp",
    "Node",
    "Settings",
    "__version__",
    "create_app",
    "open_node",
    "serve",
]
