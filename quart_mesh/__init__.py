"""quart-mesh: a self-hostable chat and agent-coordination server, and a
Trio library to embed it (``docs/embedding.md``).

The public API is what this module exports (``__all__``), plus:

- the module :mod:`quart_mesh.events` (:class:`Event` and its subclasses:
  what :meth:`Node.events` yields);
- the services reached as attributes of an open :class:`Node`, each the
  same functions the REST handlers call, with the same permission checks:
  ``node.accounts``, ``node.rooms``, ``node.messages``, ``node.dms``,
  ``node.agents``, ``node.roles``, ``node.search``, ``node.tasks`` and
  ``node.model_proxy`` (the models).

Running a node::

    from quart_mesh import Settings, create_app, serve, open_node, Node

    async with open_node(Settings(data_dir=path)) as node:  # or serve(create_app(...))
        ...
        async with node.events(actor, since=cursor) as stream:
            async for event in stream:
                ...

Errors: the services raise :class:`MeshError` subclasses (each with an HTTP
``status``, a machine ``code`` and a ``message``); an event stream raises
:class:`StreamLagged` (resume from its ``cursor``) or :class:`AccessEnded`.

Everything else (every other module and attribute: ``node.broker``,
``node.db``, ``quart_mesh.store``, ``quart_mesh.services.*``'s other
names, ...) is internal: it may change in any release without notice.
Versions follow semantic versioning over this public API.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .app import MeshApp, create_app
    from .config import Limits, Settings
    from .errors import (
        AccessEnded,
        BadRequest,
        ConfigError,
        Conflict,
        Forbidden,
        MeshError,
        NotFound,
        PayloadTooLarge,
        RateLimited,
        StoreFromNewerRelease,
        StreamLagged,
        Unauthorized,
        Unavailable,
    )
    from .events import Event, MessagePosted
    from .node import Node, open_node
    from .records import Message, Participant, Reaction, Room, Task, TaskState, Upload
    from .server import serve
    from .services.authz import Actor
    from .services.stream import EventStream
    from .signals import wait_for_signal

#: where each public name lives: imported on first use, so that a process
#: that needs only a part (a managed bot's runner, ``quart_mesh.events``)
#: does not import the whole server (the app, its MCP and A2A SDKs)
_WHERE = {
    "MeshApp": ".app",
    "create_app": ".app",
    "Limits": ".config",
    "Settings": ".config",
    **dict.fromkeys(
        (
            "AccessEnded",
            "BadRequest",
            "ConfigError",
            "Conflict",
            "Forbidden",
            "MeshError",
            "NotFound",
            "PayloadTooLarge",
            "RateLimited",
            "StoreFromNewerRelease",
            "StreamLagged",
            "Unauthorized",
            "Unavailable",
        ),
        ".errors",
    ),
    "Event": ".events",
    "MessagePosted": ".events",
    "Node": ".node",
    "open_node": ".node",
    **dict.fromkeys(
        ("Message", "Participant", "Reaction", "Room", "Task", "TaskState", "Upload"),
        ".records",
    ),
    "serve": ".server",
    "Actor": ".services.authz",
    "EventStream": ".services.stream",
    "wait_for_signal": ".signals",
}


# (hidden from type checkers: a module __getattr__ they can see makes every
# name, a misspelt one too, an Any; they see the imports above instead)
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        where = _WHERE.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(import_module(where, __name__), name)
        globals()[name] = value  # once: later reads do not come here
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_WHERE})


__all__ = [
    "AccessEnded",
    "Actor",
    "BadRequest",
    "ConfigError",
    "Conflict",
    "Event",
    "EventStream",
    "Forbidden",
    "Limits",
    "MeshApp",
    "MeshError",
    "Message",
    "MessagePosted",
    "Node",
    "NotFound",
    "Participant",
    "PayloadTooLarge",
    "RateLimited",
    "Reaction",
    "Room",
    "Settings",
    "StoreFromNewerRelease",
    "StreamLagged",
    "Task",
    "TaskState",
    "Unauthorized",
    "Unavailable",
    "Upload",
    "__version__",
    "create_app",
    "open_node",
    "serve",
    "wait_for_signal",
]
