"""Developer sessions: ``nox -s tests``, ``nox -s lint``, ``nox -s typing``, ``nox -s bench``,
``nox -s bench_cluster``, ``nox -s bridge_dist``, ``nox -s screenshots``, ``nox -s fuzz``,
``nox -s docs``.

Each passes ``session.posargs`` through, e.g. ``nox -s tests -- -k rooms -x``.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint", "typing"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = "3.11"


@nox.session(python=PYTHON)
@nox.parametrize("store", ["sqlite", "postgresql"])
def tests(session: nox.Session, store: str) -> None:
    """The suite on each store (``nox -s "tests(store='sqlite')"`` for one)."""
    session.install("-e", ".[test]", "-e", "./bridge")
    session.run("pytest", "--store", store, *session.posargs)


@nox.session(python=PYTHON)
def fuzz(session: nox.Session) -> None:
    """Schemathesis at length against a served node, from its OpenAPI document
    (``tests/contract/test_fuzz.py``; CI runs it briefly). Set the examples per
    operation, the seed and a time budget with ``MESH_FUZZ_EXAMPLES`` (100),
    ``MESH_FUZZ_SEED`` (1) and ``MESH_FUZZ_SECONDS`` (none)."""
    session.install("-e", ".[test]")
    session.env["MESH_FUZZ_EXAMPLES"] = os.environ.get("MESH_FUZZ_EXAMPLES", "100")
    session.run("pytest", "tests/contract/test_fuzz.py", "-v", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    session.install("ruff==0.17.6", "import-linter==2.17")
    session.run("ruff", "check", ".", *session.posargs)
    session.run("ruff", "format", "--check", ".")
    session.install("-e", ".")
    session.run("lint-imports")  # the layer contract in pyproject.toml


@nox.session(python=PYTHON)
def typing(session: nox.Session) -> None:
    session.install("-e", ".[dev]", "-e", "./bridge")
    session.run("mypy", "quart_mesh", "bridge/mesh_bridge", *session.posargs)


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Run every benchmark in bench/ (each prints its figures and how to reproduce them)."""
    session.install("-e", ".[test]")
    scripts = sorted(Path("bench").glob("bench_*.py"))
    # the scale-out benchmark needs PostgreSQL and ~5 minutes: its own session
    scripts = [script for script in scripts if script.name != "bench_cluster.py"]
    if not scripts:
        session.skip("no benchmarks yet (bench/bench_*.py)")
    for script in scripts:
        session.run("python", str(script), *session.posargs)


@nox.session(python=PYTHON)
def bench_guard(session: nox.Session) -> None:
    """The speed regression guard CI runs (bench/guard.py, about a minute):
    WebSocket sends, a trivial GET and fan-out, each as a ratio to a baseline
    measured in the same run, against floors; fails below a floor twice.
    Needs Node.js and its ``ws`` package (``apt-get install nodejs node-ws``,
    or ``npm install`` in bench/native)."""
    session.install("-e", ".[test]")
    session.run("python", "bench/guard.py", *session.posargs)


@nox.session(python=PYTHON)
def bench_cluster(session: nox.Session) -> None:
    """Scale-out on PostgreSQL: sends, fan-out and cross-process latency with
    1, 2 and 4 node processes on one database, beside one process on SQLite
    (bench/README.md). Needs Debian's ``postgresql`` package; ~5 minutes.
    ``nox -s bench_cluster -- --seconds 5 --runs 5`` for a longer run."""
    session.install("-e", ".[test]")
    session.run("python", "bench/bench_cluster.py", *session.posargs)


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the documentation site into site/ with its API reference generated
    from the docstrings (mkdocs + mkdocstrings, decision 0067); any warning (a
    broken link or anchor, a docstring that does not render) fails it.
    ``nox -s docs -- serve`` previews it instead: ``mkdocs serve``."""
    session.install("-e", ".[test]")
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", "--strict", *session.posargs[1:])
    else:
        session.run("mkdocs", "build", "--strict", *session.posargs)


@nox.session(python=PYTHON)
def bridge_dist(session: nox.Session) -> None:
    """Build dist/mesh-bridge.pyz: the bridge and its dependencies in one file
    that runs with any Python >= 3.11 and nothing installed (needs pip and a
    package index). ``nox -s bridge_dist -- --output other.pyz`` writes elsewhere."""
    session.run("python", "bridge/build_pyz.py", *session.posargs)


@nox.session(python=PYTHON)
def screenshots(session: nox.Session) -> None:
    """Take the web client's screenshots again (``docs/images/web/``, shown in
    ``docs/web.md``) by running the browser tests, which take them."""
    session.install("-e", ".[test]", "-e", "./bridge")
    session.run(
        "pytest",
        "tests/web",
        *session.posargs,
        env={"MESH_SCREENSHOTS": "docs/images/web", "MESH_REQUIRE_BROWSER": "1"},
    )
