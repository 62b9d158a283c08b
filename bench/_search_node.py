"""The node for ``bench_search.py``: as shipped, or with its search index
writes turned off (a bench-only build, never a product setting).

    python bench/_search_node.py index   [serve options]   python -m quart_mesh serve, as shipped
    python bench/_search_node.py noindex [serve options]   the same, without writing the index

``noindex`` patches the store inside this process before the node starts:
``quart_mesh.store.search.index``, ``reindex``, ``unindex`` and
``unindex_room`` do nothing (SQLite: no row in ``message_search``), and
``quart_mesh.store.messages._run`` runs each message insert in its SQLite
form (no ``search_vector`` column, no ``to_tsvector``, no folding of the
text), which PostgreSQL runs as well. The conductor also drops the GIN index
of a ``noindex`` node's PostgreSQL database before starting it. Everything
else (configuration, environment, options) is the same in both modes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def disable_index() -> None:
    from quart_mesh.records import Message
    from quart_mesh.store import messages, search

    def nothing(*_args: Any, **_kwargs: Any) -> None:
        return None

    for name in ("index", "reindex", "unindex", "unindex_room"):
        setattr(search, name, nothing)

    def run_without_vector(conn: Any, statements: Any, message: Message) -> Any:
        return statements[0].run(conn, messages._params(message))

    messages._run = run_without_vector


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "noindex":
        disable_index()
    elif mode != "index":
        print(__doc__, file=sys.stderr)
        return 2
    from quart_mesh.cli import main as cli_main

    return cli_main(["serve", *sys.argv[2:]])


if __name__ == "__main__":
    raise SystemExit(main())
