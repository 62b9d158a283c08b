"""Schemathesis against a served node, from the node's own OpenAPI document.

The ``st`` command (a real subprocess) reads ``/api/openapi.json`` from a
node served by hypercorn on loopback and sends it generated requests, valid
and invalid, to every operation under ``/api/`` (not the agents' protocols,
whose bodies the document leaves to their specifications): once as a member,
then as the owner, each with its bearer token. It checks that no answer is a 5xx, that every
answer's status, media type and body fit the document, and the node's log
must hold no error and no traceback.

CI runs a bounded number of examples per operation with a fixed seed
(``MESH_FUZZ_EXAMPLES``, default 8; ``MESH_FUZZ_SEED``, default 1);
``nox -s fuzz`` runs long (``MESH_FUZZ_EXAMPLES=100``, ``MESH_FUZZ_SECONDS``).

On PostgreSQL the default is 4 random examples per operation. The coverage
phase runs in full on both stores: its cases (about two thirds of the run)
are the boundaries and the invalid values of every parameter (lengths,
integer bounds, types, NUL and other odd characters), which is where one
store's column types and errors differ from the other's. The random phase
draws its values with no regard to those limits; half of SQLite's budget
still sends ~800 of them there, for ~20% less time.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests import stores
from tests.helpers import Mesh

pytestmark = pytest.mark.e2e

CHECKS = ",".join(
    (
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
    )
)


class _Errors(logging.Handler):
    """Every record at ERROR or above, or carrying a traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            self.records.append(record)


@pytest.fixture
def node_errors() -> Iterator[_Errors]:
    handler = _Errors()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


def _st() -> list[str]:
    found = shutil.which("st", path=str(Path(sys.executable).parent))
    assert found, "schemathesis is not installed (pip install -e '.[test]')"
    return [found]


async def _fuzz(base_url: str, token: str, report: Path) -> subprocess.CompletedProcess[bytes]:
    examples = os.environ.get("MESH_FUZZ_EXAMPLES", "8" if stores.backend() == "sqlite" else "4")
    seed = os.environ.get("MESH_FUZZ_SEED", "1")
    command = [
        *_st(),
        "run",
        f"{base_url}/api/openapi.json",
        "--checks",
        CHECKS,
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        examples,
        "--seed",
        seed,
        "--workers",
        "1",
        "--request-timeout",
        "30",
        "--no-shrink",
        "--suppress-health-check",
        "all",
        "--header",
        f"Authorization: Bearer {token}",
        # the REST API only: the agents' protocols (/mcp, /a2a, their cards) are
        # in the document too, but their bodies are protocol messages it does not type
        "--include-path-regex",
        "^/api/",
        # signing the token out would leave the rest of the run unauthenticated
        "--exclude-operation-id",
        "post_auth_logout",
        "--report",
        "junit",
        "--report-junit-path",
        str(report),
    ]
    if seconds := os.environ.get("MESH_FUZZ_SECONDS"):
        command += ["--max-time", seconds]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESH_")}
    env["NO_COLOR"] = "1"
    # nothing here answers slowly: bound the whole run, generously
    with trio.fail_after(float(os.environ.get("MESH_FUZZ_SECONDS", "600")) + 300):
        return await trio.run_process(
            command,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
            cwd=report.parent,  # where st keeps its own files (.schemathesis/)
        )


@pytest.mark.timeout(1800)
async def test_the_served_api_survives_schemathesis(
    base_url: str, mesh: Mesh, node_errors: _Errors, tmp_path: Path
) -> None:
    owner = await mesh.setup()
    member = await mesh.register("member")
    await mesh.create_room(member, "general")
    failures = []
    for who, user in (("member", member), ("owner", owner)):
        result = await _fuzz(base_url, user.token, tmp_path / f"{who}.xml")
        output = (result.stdout + result.stderr).decode(errors="replace")
        if result.returncode != 0:
            failures.append(f"--- as {who} (exit {result.returncode}) ---\n{output[-20000:]}")
    assert not failures, "\n".join(failures)
    tracebacks = [
        f"{r.name}: {r.getMessage()}" + (" (with traceback)" if r.exc_info else "")
        for r in node_errors.records
    ]
    assert not tracebacks, tracebacks
