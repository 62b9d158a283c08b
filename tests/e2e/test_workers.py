"""``quart-mesh serve --workers N``: one port, N node processes under one parent.

Real processes only: ``python -m quart_mesh serve`` started as an operator
starts it, its output read line by line. Several workers need PostgreSQL
(``pytest --store postgresql``); on SQLite they are refused at once.

Rules: loopback only, port 0; every wait is bounded by ``trio.fail_after``;
a test waits for a line of output or a process exit. The exceptions are
what nothing announces to the test: a worker's state after ``SIGSTOP``, and
the end of a worker that is not the test's child; both are polled in
``/proc`` (:func:`wait_state`), within a deadline.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests import stores
from tests.e2e.test_metrics import AUTH as METRICS_AUTH
from tests.e2e.test_metrics import TOKEN as METRICS_TOKEN
from tests.e2e.test_metrics import Samples, parse, value
from tests.helpers import Mesh, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

_LISTENING = re.compile(r"quart-mesh listening on (http://\S+)")
_WORKER = r"quart-mesh worker {n} \(pid (\d+)\) serving (http://\S+)"


def _serve(data_dir: Path, *args: str) -> list[str]:
    command = [sys.executable, "-m", "quart_mesh", "serve", "--port", "0"]
    return [*command, "--data-dir", str(data_dir), *args]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESH_")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


class Parent:
    """``quart-mesh serve --workers N`` running; its output (stdout and
    stderr, of the parent and of its workers) kept line by line."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self.exited = trio.Event()
        self._new_line = trio.Event()

    async def pump(self) -> None:
        assert self.process.stdout is not None
        buffer = b""
        async for chunk in self.process.stdout:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for raw in lines:
                self.lines.append(raw.decode(errors="replace"))
                self._new_line.set()
                self._new_line = trio.Event()
        await self.process.wait()
        self.exited.set()
        self._new_line.set()

    def log(self) -> str:
        return "\n".join(self.lines)

    async def wait_for(self, pattern: str, start: int = 0) -> tuple[re.Match[str], int]:
        """The first line from *start* on that matches, and the index after it."""
        while True:
            for index in range(start, len(self.lines)):
                if found := re.search(pattern, self.lines[index]):
                    return found, index + 1
            if self.exited.is_set():
                raise AssertionError(f"no line matching {pattern!r}:\n{self.log()}")
            await self._new_line.wait()


@asynccontextmanager
async def open_parent(data_dir: Path, workers: int, url: str, **env: str) -> AsyncIterator[Parent]:
    process = await trio.lowlevel.open_process(
        _serve(data_dir, "--workers", str(workers)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=_env(MESH_DATABASE_URL=url, **env),
    )
    parent = Parent(process)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(parent.pump)
        try:
            yield parent
        finally:
            with trio.CancelScope(shield=True), trio.fail_after(60):
                if process.returncode is None:
                    # SIGKILL of the parent: its workers see their control
                    # channel close and stop by themselves
                    process.kill()
                await parent.exited.wait()


def ppid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    raise AssertionError("no PPid")


def state(pid: int) -> str:
    # the field after "(comm)" in /proc/<pid>/stat
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


async def wait_state(pid: int, *states: str) -> None:
    """Until process *pid* is in one of *states* (``T`` stopped, ``Z`` ended;
    ``gone`` when reaped)."""
    with trio.fail_after(30):
        while True:
            try:
                now = state(pid)
            except FileNotFoundError:
                now = "gone"
            if now in states:
                return
            await trio.sleep(0.02)


async def all_succeed(url: str, count: int = 20) -> None:
    """*count* requests, each on a new connection (so any worker may take it)."""
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=20) as http:
        for _ in range(count):
            r = await http.get("/api/health")
            assert r.status_code == 200, r.text


# given no MESH_* settings (SQLite in either run), refused before any store: one run
@pytest.mark.store_free
async def test_several_workers_on_sqlite_are_refused(tmp_path: Path) -> None:
    data_dir = tmp_path / "mesh-data"
    for args, env in (
        (["--workers", "2"], {}),
        ([], {"MESH_WORKERS": "2"}),
    ):
        with trio.fail_after(30):
            result = await trio.run_process(
                _serve(data_dir, *args),
                capture_stdout=True,
                capture_stderr=True,
                env=_env(**env),
                check=False,
            )
        out = (result.stdout + result.stderr).decode(errors="replace")
        assert result.returncode == 2, out
        assert result.stderr.decode().strip() == (
            "quart-mesh: --workers 2 needs PostgreSQL (MESH_DATABASE_URL): "
            "a node on SQLite runs in one process only"
        ), out
        assert "listening on" not in out
    assert not data_dir.exists()  # refused before anything was touched


@pytest.mark.store_free  # refused while the settings are read, before any store
@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--workers", "0"], {}, "--workers must be between 1 and 256, not 0"),
        ([], {"MESH_WORKERS": "many"}, "MESH_WORKERS must be a number of processes, not 'many'"),
        ([], {"MESH_WORKERS": "257"}, "MESH_WORKERS must be between 1 and 256, not 257"),
    ],
)
async def test_a_bad_number_of_workers_is_bad_settings(
    tmp_path: Path, args: list[str], env: dict[str, str], message: str
) -> None:
    with trio.fail_after(30):
        result = await trio.run_process(
            _serve(tmp_path / "d", *args),
            capture_stdout=True,
            capture_stderr=True,
            env=_env(**env),
            check=False,
        )
    assert result.returncode == 2
    assert message in result.stderr.decode()


async def test_workers_share_the_port_restart_and_stop(tmp_path: Path) -> None:
    if stores.cluster is None:
        pytest.skip("several workers need PostgreSQL (--store postgresql)")
    data_dir = tmp_path / "mesh-data"
    async with open_parent(data_dir, 2, stores.cluster.url_for(data_dir)) as parent:
        with trio.fail_after(90):
            (listening, _) = await parent.wait_for(_LISTENING.pattern)
            url = listening.group(1)
            pids = {}
            for n in (1, 2):
                (found, _) = await parent.wait_for(_WORKER.format(n=n))
                pids[n] = int(found.group(1))
                assert found.group(2) == url
        # announced once, after both workers serve; two children of the parent
        assert sum("listening on" in line for line in parent.lines) == 1, parent.log()
        assert pids[1] != pids[2]
        assert {ppid(pids[1]), ppid(pids[2])} == {parent.process.pid}

        # each worker serves requests by itself: the other one is stopped
        for stopped in (2, 1):
            os.kill(pids[stopped], signal.SIGSTOP)
            try:
                await wait_state(pids[stopped], "T")
                with trio.fail_after(30):
                    await all_succeed(url)
            finally:
                os.kill(pids[stopped], signal.SIGCONT)

        # a worker killed outright is started again; the other one serves meanwhile
        mark = len(parent.lines)
        os.kill(pids[1], signal.SIGKILL)
        with trio.fail_after(60):
            (_, after) = await parent.wait_for(
                rf"worker 1 \(pid {pids[1]}\) was killed by SIGKILL; starting it again", mark
            )
            await all_succeed(url)
            (found, _) = await parent.wait_for(_WORKER.format(n=1), after)
        replacement = int(found.group(1))
        assert replacement not in pids.values()
        assert ppid(replacement) == parent.process.pid
        with trio.fail_after(30):
            await all_succeed(url)

        # SIGTERM: the workers stop gracefully, then the parent, with status 0
        parent.process.send_signal(signal.SIGTERM)
        with trio.fail_after(60):
            await parent.exited.wait()
        assert parent.process.returncode == 0, parent.log()
        for pid in (replacement, pids[2]):
            assert not Path(f"/proc/{pid}").exists(), parent.log()
        assert "received SIGTERM, stopping the workers" in parent.log()
        assert "Traceback" not in parent.log()
        assert parent.lines[-1].endswith("stopped"), parent.log()


async def test_workers_stop_when_the_parent_is_killed(tmp_path: Path) -> None:
    if stores.cluster is None:
        pytest.skip("several workers need PostgreSQL (--store postgresql)")
    data_dir = tmp_path / "mesh-data"
    async with open_parent(data_dir, 2, stores.cluster.url_for(data_dir)) as parent:
        with trio.fail_after(90):
            (listening, _) = await parent.wait_for(_LISTENING.pattern)
            pids = [int((await parent.wait_for(_WORKER.format(n=n)))[0].group(1)) for n in (1, 2)]
        parent.process.kill()
        with trio.fail_after(60):
            await parent.exited.wait()
            # the workers' output still reaches the pipe until they end
            for n, pid in enumerate(pids, 1):
                await parent.wait_for(rf"worker {n}: the parent process is gone, shutting down")
                await parent.wait_for(rf"worker {n} \(pid {pid}\) stopped")
        for pid in pids:
            await wait_state(pid, "Z", "gone")
        # the port is free again: nothing serves it
        with pytest.raises(httpx.ConnectError):
            await all_succeed(listening.group(1), 1)


# --- /metrics of the whole node ----------------------------------------------------


def answering_pid(response: httpx.Response, pids: Iterable[int]) -> int:
    """The worker that holds *response*'s connection (still open: kept alive).

    The connection's server side is found in ``/proc/net/tcp`` by its ports,
    then among the workers' open files by its inode."""
    stream = response.extensions["network_stream"]
    client_port = stream.get_extra_info("client_addr")[1]
    server_port = stream.get_extra_info("server_addr")[1]
    inodes = [
        fields[9]
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]
        if (fields := line.split())
        and int(fields[1].rsplit(":", 1)[1], 16) == server_port
        and int(fields[2].rsplit(":", 1)[1], 16) == client_port
    ]
    assert len(inodes) == 1, inodes
    for pid in pids:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(FileNotFoundError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inodes[0]}]":
                    return pid
    raise AssertionError(f"none of {list(pids)} holds the connection")


class Via:
    """A kept-alive connection to one worker; each answer is checked to come
    from it."""

    def __init__(self, http: httpx.AsyncClient, pid: int) -> None:
        self.http = http
        self.pid = pid

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        r = await self.http.request(method, path, **kwargs)
        assert answering_pid(r, [self.pid]) == self.pid
        return r

    async def scrape(self) -> Samples:
        r = await self.request("GET", "/metrics", headers=METRICS_AUTH)
        assert r.status_code == 200, r.text
        return parse(r.text)


@asynccontextmanager
async def connection_to(url: str, pid: int, pids: Iterable[int]) -> AsyncIterator[Via]:
    """New connections until the kernel hands one to worker *pid*."""
    for _ in range(200):
        http = httpx.AsyncClient(base_url=url, timeout=20, limits=httpx.Limits(max_connections=1))
        async with http:
            r = await http.get("/api/health/live")
            assert r.status_code == 200, r.text
            if answering_pid(r, pids) == pid:
                yield Via(http, pid)
                return
    raise AssertionError(f"no connection reached worker {pid}")


def counts(samples: Samples) -> Samples:
    """The samples that must never go down: counters, histograms."""
    kinds = ("_total", "_count", "_sum", "_bucket")
    return {key: v for key, v in samples.items() if key[0].endswith(kinds)}


def assert_not_lower(before: Samples, after: Samples) -> None:
    lower = {key: (v, after.get(key)) for key, v in counts(before).items() if after.get(key, 0) < v}
    assert not lower, lower


async def test_a_scrape_of_any_worker_shows_the_whole_node(tmp_path: Path) -> None:
    if stores.cluster is None:
        pytest.skip("several workers need PostgreSQL (--store postgresql)")
    data_dir = tmp_path / "mesh-data"
    database = stores.cluster.url_for(data_dir)
    async with (
        open_parent(data_dir, 2, database, MESH_METRICS_TOKEN=METRICS_TOKEN) as parent,
        AsyncExitStack() as connections,
    ):
        with trio.fail_after(60):
            (listening, _) = await parent.wait_for(_LISTENING.pattern)
            url = listening.group(1)
            pids = [int((await parent.wait_for(_WORKER.format(n=n)))[0].group(1)) for n in (1, 2)]
            (kept, _) = await parent.wait_for(r"the workers keep their metrics in (\S+)")
            folder = Path(kept.group(1))
            one, two = [
                await connections.enter_async_context(connection_to(url, pid, pids)) for pid in pids
            ]
        owner = await Mesh(one.http).setup("alice")
        room_id = (await one.request("GET", "/api/setup/status")).json()["defaultRoomId"]
        before = await one.scrape()  # worker 2 has committed nothing
        post = {"method": "POST", "route": "/api/rooms/<room_id>/messages"}

        async def send(via: Via, text: str) -> None:
            path = f"/api/rooms/{room_id}/messages"
            r = await via.request("POST", path, json={"content": text}, headers=owner.headers)
            assert r.status_code == 201, r.text

        for i in range(3):
            await send(one, f"to one {i}")
        for i in range(2):
            await send(two, f"to two {i}")

        last: Samples = before

        async def both_show(sent: int) -> bool:
            """Whichever worker answers, the scrape counts *sent* sends (the
            node figures of the other worker are copied every second)."""
            nonlocal last
            for via in (one, two):
                seen = await via.scrape()
                assert_not_lower(last, seen)
                last = seen
                assert value(seen, "mesh_http_requests_total", **post, status="201") == sent
                latency = value(seen, "mesh_http_request_duration_seconds_count", **post)
                assert latency == sent
                inf = {**post, "le": "+Inf"}
                assert value(seen, "mesh_http_request_duration_seconds_bucket", **inf) == sent
                committed = value(seen, "mesh_messages_committed_total")
                if committed - value(before, "mesh_messages_committed_total") != sent:
                    return False
            return True

        await wait_for(partial(both_show, 5), 10)
        for via in (one, two):
            seen = await via.scrape()
            # per worker: their descriptors; every other gauge is the node's
            for n in ("1", "2"):
                assert value(seen, "mesh_fd_limit", worker=n) > 0
                assert value(seen, "mesh_open_fds", worker=n) > 0
            labelled = {name for (name, labels) in seen if any(k == "worker" for k, _ in labels)}
            assert labelled == {"mesh_fd_limit", "mesh_open_fds"}
            assert not [key for key in seen if any(k == "pid" for k, _ in key[1])]
        files = sorted(os.listdir(folder))

        # worker 1 is killed outright and started again: no count goes back
        mark = len(parent.lines)
        os.kill(pids[0], signal.SIGKILL)

        async def restarted() -> bool:
            nonlocal last
            seen = await two.scrape()
            assert_not_lower(last, seen)
            last = seen
            return any(re.search(_WORKER.format(n=1), line) for line in parent.lines[mark:])

        await wait_for(restarted, 30)
        (found, _) = await parent.wait_for(_WORKER.format(n=1), mark)
        pids[0] = int(found.group(1))
        with trio.fail_after(30):
            one = await connections.enter_async_context(connection_to(url, pids[0], pids))
        await send(one, "to the new one")
        await wait_for(partial(both_show, 6), 10)
        # the new worker 1 took its files over: none more
        assert sorted(os.listdir(folder)) == files

        parent.process.send_signal(signal.SIGTERM)
        with trio.fail_after(60):
            await parent.exited.wait()
        assert parent.process.returncode == 0, parent.log()
        assert not folder.exists()
