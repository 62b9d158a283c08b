"""``quart-mesh serve``'s exit status when it cannot serve or stops failing.

An ``OSError`` before the node listens (the port is taken) means it cannot
serve: status 1 and one line saying why. Once it listens, any failure is a
part of the node that failed, an ``OSError`` included (a bot that could not
be spawned, out of file descriptors): status 70 with the traceback, so that
whatever runs it starts it again.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trio

# the same whatever the store: run once, on SQLite
pytestmark = [pytest.mark.timeout(60), pytest.mark.store_free]

_SERVE = textwrap.dedent(
    """
    import errno
    import sys
    from quart_mesh import cli
    from quart_mesh.services.world import World

    if sys.argv[3] == "fail":
        async def broken(self):
            raise OSError(errno.EMFILE, "Too many open files (injected)")

        World.flush_reads = broken
    sys.exit(cli.main(["serve", "--port", sys.argv[2], "--data-dir", sys.argv[1]]))
    """
)


async def _serve(tmp_path: Path, port: int, mode: str) -> tuple[int, str]:
    script = tmp_path / "serve.py"
    script.write_text(_SERVE)
    with trio.fail_after(30):
        result = await trio.run_process(
            [sys.executable, str(script), str(tmp_path / "mesh-data"), str(port), mode],
            capture_stdout=True,
            stderr=subprocess.STDOUT,
            check=False,
        )
    return result.returncode, result.stdout.decode(errors="replace")


async def test_a_port_that_is_taken_is_cannot_serve(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        code, output = await _serve(tmp_path, taken.getsockname()[1], "plain")
    assert code == 1, output
    assert "cannot serve" in output
    assert "listening on" not in output
    assert "Traceback" not in output


async def test_an_os_error_once_listening_is_a_part_that_failed(tmp_path: Path) -> None:
    code, output = await _serve(tmp_path, 0, "fail")
    assert "listening on" in output, output
    assert code == 70, output
    assert "the node stopped because one of its parts failed" in output
    assert "OSError: [Errno 24] Too many open files (injected)" in output
    assert "Traceback" in output
    assert "cannot serve" not in output
