"""The node's log, over real sockets: one access record per request and per
WebSocket session start and end, request ids in a header, in the log and in
500 bodies, nothing secret in any line, and ``--log-format json``."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import trio

from quart_mesh import Settings, create_app, serve
from quart_mesh.logs import JsonFormatter
from tests.helpers import PASSWORD, Changes, Mesh, assert_error, connect

# the same whatever the store: run once, on SQLite
pytestmark = [pytest.mark.e2e, pytest.mark.store_free]


class Records(logging.Handler):
    """Every record of the ``quart_mesh`` loggers; a test waits for one."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._changes = Changes()
        #: the run a test waits in (:meth:`wait_for`), told of records
        #: logged from other threads
        self._run: trio.lowlevel.TrioToken | None = None

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        if trio.lowlevel.in_trio_run():
            self._changes.note()
        elif self._run is not None:  # a worker thread: noted in the run, soon
            with contextlib.suppress(trio.RunFinishedError):
                self._run.run_sync_soon(self._changes.note)

    def access(self) -> list[logging.LogRecord]:
        return [r for r in self.records if r.name == "quart_mesh.access"]

    async def wait_for(self, match: Callable[[logging.LogRecord], bool]) -> logging.LogRecord:
        self._run = trio.lowlevel.current_trio_token()
        await self._changes.until(lambda: any(match(r) for r in self.records), 10)
        return next(r for r in self.records if match(r))


@pytest.fixture
def records() -> Iterator[Records]:
    handler = Records()
    logger = logging.getLogger("quart_mesh")
    old = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)


@pytest.fixture
async def served(settings: Settings, nursery: trio.Nursery) -> str:
    """A real node on a loopback port, with one extra route that fails."""
    app = create_app(settings)

    @app.get("/api/test-boom")
    async def boom() -> str:
        raise RuntimeError("internals that must stay inside")

    url: str = await nursery.start(lambda task_status: serve(app, port=0, task_status=task_status))
    return url


def _request(record: logging.LogRecord, route: str, status: int) -> bool:
    return getattr(record, "route", None) == route and getattr(record, "status", None) == status


async def test_every_request_and_session_is_logged_without_secrets(
    served: str, records: Records
) -> None:
    async with httpx.AsyncClient(base_url=served, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup("alice")
        r = await http.get("/api/setup/status")
        room_id = r.json()["defaultRoomId"]

        # an anonymous request: its route, status, a request id sent back
        record = await records.wait_for(lambda r: _request(r, "/api/setup/status", 200))
        assert record.request_id == r.headers["X-Request-Id"]  # type: ignore[attr-defined]
        assert record.participant_id is None  # type: ignore[attr-defined]
        assert record.method == "GET"  # type: ignore[attr-defined]
        assert isinstance(record.duration_ms, float)  # type: ignore[attr-defined]

        # an authenticated one: the route's rule (no ids), the participant
        r = await http.post(
            f"/api/rooms/{room_id}/messages", json={"content": "hello"}, headers=owner.headers
        )
        assert r.status_code == 201
        record = await records.wait_for(lambda r: _request(r, "/api/rooms/<room_id>/messages", 201))
        assert record.participant_id == owner.participant_id  # type: ignore[attr-defined]
        assert room_id not in record.getMessage()

        # refusals are logged too, with what the client was told
        r = await http.get("/api/auth/me", headers={"Authorization": "Bearer not-a-token"})
        assert_error(r, 401)
        await records.wait_for(lambda rec: _request(rec, "/api/auth/me", 401))
        r = await http.get("/api/no/such/thing")
        assert_error(r, 404, "not_found")
        await records.wait_for(lambda rec: _request(rec, "-", 404))

        # a request id from the client (or its proxy) is kept if it is a plain token
        r = await http.get("/api/setup/status", headers={"X-Request-Id": "edge-42.a:b_c"})
        assert r.headers["X-Request-Id"] == "edge-42.a:b_c"
        await records.wait_for(lambda rec: getattr(rec, "request_id", None) == "edge-42.a:b_c")
        for hostile in ("two words", "x" * 65, "semi;colon", "</script>", "tab\tin"):
            r = await http.get("/api/setup/status", headers={"X-Request-Id": hostile})
            assert r.headers["X-Request-Id"] != hostile
            assert len(r.headers["X-Request-Id"]) == 16

        # a WebSocket session: its start and its end, with why it ended
        async with connect(served, owner) as socket:
            await socket.settle()
            start = await records.wait_for(
                lambda rec: getattr(rec, "event", None) == "session_start"
            )
            assert start.participant_id == owner.participant_id  # type: ignore[attr-defined]
        end = await records.wait_for(lambda rec: getattr(rec, "event", None) == "session_end")
        assert end.session_id == start.session_id  # type: ignore[attr-defined]
        assert end.reason == "closed"  # type: ignore[attr-defined]
        assert end.duration_ms >= 0  # type: ignore[attr-defined]

    # nothing secret in any line: no password, no token, no body, no query
    text = "\n".join(
        logging.Formatter("%(message)s %(exc_text)s").format(r) for r in records.records
    )
    json_text = "\n".join(JsonFormatter().format(r) for r in records.records)
    for secret in (PASSWORD, owner.token, "hello", "not-a-token"):
        assert secret not in text
        assert secret not in json_text


async def test_a_500_names_its_request_id_in_the_body_the_header_and_the_log(
    served: str, records: Records
) -> None:
    async with httpx.AsyncClient(base_url=served, timeout=10) as http:
        r = await http.get("/api/test-boom")
    assert_error(r, 500, "internal_error")
    body = r.json()
    request_id = r.headers["X-Request-Id"]
    assert body["requestId"] == request_id
    assert request_id in body["error"]
    assert "internals" not in r.text
    error = await records.wait_for(lambda rec: rec.levelno == logging.ERROR)
    assert request_id in error.getMessage()
    assert error.exc_info is not None
    access = await records.wait_for(lambda rec: _request(rec, "/api/test-boom", 500))
    assert access.request_id == request_id  # type: ignore[attr-defined]


def test_a_json_line_carries_the_fields_and_the_traceback() -> None:
    logger = logging.getLogger("quart_mesh.test-json")
    try:
        raise ValueError("boom")
    except ValueError:
        record = logger.makeRecord(
            logger.name,
            logging.ERROR,
            __file__,
            1,
            "failed %s",
            ("here",),
            sys.exc_info(),
            extra={"request_id": "abc", "status": 500},
        )
    line = JsonFormatter().format(record)
    assert "\n" not in line
    data = json.loads(line)
    assert data["message"] == "failed here"
    assert data["level"] == "ERROR"
    assert data["logger"] == "quart_mesh.test-json"
    assert data["request_id"] == "abc"
    assert data["status"] == 500
    assert data["time"].endswith("+00:00")
    assert "ValueError: boom" in data["exception"]


async def test_serve_with_log_format_json_writes_json_lines(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "MESH_DATA_DIR": str(tmp_path / "data"),
    }
    env.pop("MESH_LOG_FORMAT", None)
    args = [sys.executable, "-m", "quart_mesh", "serve", "--port", "0", "--log-format", "json"]
    process = await trio.lowlevel.open_process(
        args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
    )
    assert process.stdout is not None
    output = b""
    try:
        with trio.fail_after(30):
            while b"listening on" not in output:
                chunk = await process.stdout.receive_some(4096)
                assert chunk, output.decode(errors="replace")
                output += chunk
            listening = next(
                json.loads(line) for line in output.decode().splitlines() if "listening on" in line
            )
            url = listening["message"].split("listening on ")[1].split()[0]
            async with httpx.AsyncClient(base_url=url) as http:
                r = await http.get("/api/setup/status")
                assert r.status_code == 200
                request_id = r.headers["X-Request-Id"]
            while request_id.encode() not in output:
                chunk = await process.stdout.receive_some(4096)
                assert chunk, output.decode(errors="replace")
                output += chunk
    finally:
        process.terminate()
        with trio.fail_after(15):
            while chunk := await process.stdout.receive_some(65536):
                output += chunk
            await process.wait()
    lines = [json.loads(line) for line in output.decode().splitlines() if line.strip()]
    access = [line for line in lines if line.get("request_id") == request_id]
    assert access
    assert access[0]["logger"] == "quart_mesh.access"
    assert access[0]["route"] == "/api/setup/status"
    assert access[0]["status"] == 200


def test_an_unknown_log_format_is_a_usage_error(tmp_path: Path) -> None:
    env = {**os.environ, "MESH_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run(
        [sys.executable, "-m", "quart_mesh", "serve", "--log-format", "xml"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert done.returncode == 2
    assert "text or json" in done.stderr
    env["MESH_LOG_FORMAT"] = "yaml"
    done = subprocess.run(
        [sys.executable, "-m", "quart_mesh", "serve"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert done.returncode == 2
    assert "MESH_LOG_FORMAT must be text or json" in done.stderr


def test_the_writer_queue_never_blocks_and_says_what_it_dropped() -> None:
    """Records go through a bounded queue to a writer thread; when nobody
    drains it (stderr not read) they are dropped and counted, not waited
    for, and the count is logged once there is room again."""
    import queue

    from quart_mesh.logs import _QueueHandler

    records: queue.Queue[logging.LogRecord] = queue.Queue(2)
    handler = _QueueHandler(records)
    logger = logging.getLogger("quart_mesh.test-queue")

    def record(i: int) -> logging.LogRecord:
        return logger.makeRecord(
            logger.name, logging.INFO, __file__, 1, "n=%d", (i,), None, extra={"request_id": i}
        )

    for i in range(5):
        handler.handle(record(i))  # returns at once though the queue is full
    assert handler.dropped == 3
    first, second = records.get_nowait(), records.get_nowait()
    assert (first.getMessage(), second.getMessage()) == ("n=0", "n=1")
    assert first.request_id == 0  # type: ignore[attr-defined]
    handler.handle(record(5))
    note = records.get_nowait()
    assert note.getMessage() == "3 log records were dropped: the log was not read fast enough"
    assert records.get_nowait().getMessage() == "n=5"
    assert handler.dropped == 0
    # a traceback becomes text before the record leaves the logging thread
    try:
        raise ValueError("boom")
    except ValueError:
        failed = logger.makeRecord(
            logger.name, logging.ERROR, __file__, 1, "failed", (), sys.exc_info()
        )
    handler.handle(failed)
    queued = records.get_nowait()
    assert queued.exc_info is None
    assert "ValueError: boom" in (queued.exc_text or "")
    assert "ValueError: boom" in json.loads(JsonFormatter().format(queued))["exception"]


def test_stopping_the_writer_never_hangs_on_a_full_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    """stderr not read and the queue full: stopping the writer (at exit, or
    before the process ends itself) returns after a bounded wait, no error."""
    import queue
    import threading

    from quart_mesh import logs

    monkeypatch.setattr(logs, "_FLUSH_WAIT", 0.2)
    stuck = threading.Event()

    class Stalled(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            stuck.wait(10)  # a pipe nobody reads

    records: queue.Queue[logging.LogRecord | None] = queue.Queue(3)
    listener = logs._Listener(records, Stalled())
    listener.start()
    handler = logs._QueueHandler(records)
    logger = logging.getLogger("quart_mesh.test-stall")
    for i in range(10):
        handler.handle(logger.makeRecord(logger.name, logging.INFO, __file__, 1, "%d", (i,), None))
    assert handler.dropped > 0
    listener.stop()  # returns: the sentinel could not be queued, the join timed out
    assert listener._thread is None
    stuck.set()
