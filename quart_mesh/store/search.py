"""Repository: the full-text index of messages (decision 0059)."""

from __future__ import annotations

from typing import Any

__all__ = ["in_metadata"]

#: the index's objects, outside ``schema.metadata`` (one per backend, not portable)
_OUTSIDE = frozenset({"message_search", "search_vector", "ix_messages_search_vector"})


def in_metadata(name: str | None, kind: str, parent: Any) -> bool:
    """Whether *name* is described by ``schema.metadata`` (Alembic's
    ``include_name`` hook): the index's table (and FTS5's shadow tables),
    column and GIN index are not."""
    if name is None:
        return True
    return name not in _OUTSIDE and not name.startswith("message_search_")
