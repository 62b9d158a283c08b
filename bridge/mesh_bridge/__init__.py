"""mesh-bridge: connect a script, an HTTP endpoint or a long-running process to
a quart-mesh node as a bot.

It speaks only the node's public WebSocket protocol (``docs/websocket.md``) and
never imports ``quart_mesh``, so it installs and runs on its own, or as one
``.pyz`` file (``bridge/build_pyz.py``).
"""

from __future__ import annotations

import sys

# the .pyz may be started by any python3: say so instead of failing on an import
if sys.version_info < (3, 11):  # noqa: UP036
    raise SystemExit(f"mesh-bridge needs Python 3.11 or newer, not {sys.version.split()[0]}")

__version__ = "0.1.0"

__all__ = ["__version__"]
