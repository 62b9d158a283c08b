"""``quart-mesh user|tokens|status`` as real processes, on a stopped node's
data folder and on a running node (through its control socket on SQLite,
through the cluster's bus on PostgreSQL): each chore takes effect at once,
and every refusal is a clear message and a non-zero status, never a
traceback. The control socket answers garbage and oversize lines with an
error and goes on serving."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from quart_mesh.control import CONTROL_SOCKET, MAX_REQUEST
from tests import stores
from tests.helpers import PASSWORD, Mesh, User, assert_error, cli, connect, serve_on, wait_for

pytestmark = pytest.mark.e2e

NEW_PASSWORD = "a brand new secret"


def ok(done: subprocess.CompletedProcess[bytes]) -> str:
    assert done.returncode == 0, done.stderr.decode()
    assert b"Traceback" not in done.stderr, done.stderr.decode()
    return done.stdout.decode()


def refused(done: subprocess.CompletedProcess[bytes], says: str) -> None:
    """Exit status 1, *says* in the message, no traceback."""
    stderr = done.stderr.decode()
    assert done.returncode == 1, (done.returncode, stderr, done.stdout)
    assert says in stderr, stderr
    assert "Traceback" not in stderr, stderr


async def login(http: httpx.AsyncClient, name: str, password: str = PASSWORD) -> User:
    r = await http.post("/api/auth/login", json={"name": name, "password": password})
    assert r.status_code == 200, r.text
    data = r.json()
    return User(data["participantId"], data["name"], data["token"])


async def me(http: httpx.AsyncClient, user: User) -> httpx.Response:
    return await http.get("/api/auth/me", headers=user.headers)


@pytest.mark.sqlite_only
async def test_users_created_on_a_stopped_node_log_in_once_it_serves(tmp_path: Path) -> None:
    data = tmp_path / "node"
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            url = await serve_on(data, nursery)
            async with httpx.AsyncClient(base_url=url, timeout=20) as http:
                await Mesh(http).setup("olivia")
            nursery.cancel_scope.cancel()
        assert not (data / CONTROL_SOCKET).exists()  # removed when the node stopped

        where = ("--data-dir", str(data))
        # a new interpreter once (tests/launcher.py forks the other commands)
        out = ok(
            await cli(
                "user",
                "create",
                "alice",
                "--password-stdin",
                *where,
                stdin=b"%s\n" % PASSWORD.encode(),
                fresh=True,
            )
        )
        assert "created member alice" in out
        out = ok(
            await cli(
                "user",
                "create",
                "bob",
                "--admin",
                "--password-stdin",
                *where,
                stdin=PASSWORD.encode(),
            )
        )
        assert "created admin bob" in out

        async with trio.open_nursery() as nursery:
            url = await serve_on(data, nursery)
            async with httpx.AsyncClient(base_url=url, timeout=20) as http:
                for name, role in (("alice", "member"), ("bob", "admin")):
                    user = await login(http, name)
                    r = await me(http, user)
                    assert r.status_code == 200, r.text
                    assert r.json()["role"] == role
            nursery.cancel_scope.cancel()


@pytest.mark.sqlite_only
async def test_chores_on_a_running_node_take_effect_at_once(tmp_path: Path) -> None:
    data = tmp_path / "node"
    where = ("--data-dir", str(data))
    with trio.fail_after(90):
        async with trio.open_nursery() as nursery:
            url = await serve_on(data, nursery)
            socket_path = data / CONTROL_SOCKET
            assert socket_path.stat().st_mode & 0o777 == 0o600
            async with httpx.AsyncClient(base_url=url, timeout=20) as http:
                await Mesh(http).setup("olivia")

                # created through the running node: logs in at once
                ok(
                    await cli(
                        "user",
                        "create",
                        "carol",
                        "--password-stdin",
                        *where,
                        stdin=PASSWORD.encode(),
                    )
                )
                first = await login(http, "carol")
                second = await login(http, "carol")

                listed = json.loads(ok(await cli("tokens", "list", "carol", "--json", *where)))
                assert [t["kind"] for t in listed] == ["login", "login"]
                assert not any(t["revoked"] for t in listed)
                table = ok(await cli("tokens", "list", "carol", *where))
                assert table.splitlines()[0].split() == [
                    "TOKEN",
                    "ID",
                    "KIND",
                    "ISSUED",
                    "EXPIRES",
                    "STATE",
                ]

                # revoke one: that one is refused, the other still works
                first_id = _token_id(first)
                assert {t["tokenId"] for t in listed} == {first_id, _token_id(second)}
                # the id after the options (argparse leaves it over: found all the same)
                ok(await cli("tokens", "revoke", "carol", *where, first_id))
                r = await me(http, first)
                assert r.status_code == 401, r.text
                assert r.json()["code"] == "token_revoked", r.text
                assert (await me(http, second)).status_code == 200
                listed = json.loads(ok(await cli("tokens", "list", "carol", "--json", *where)))
                assert {t["tokenId"]: t["revoked"] for t in listed} == {
                    first_id: True,
                    _token_id(second): False,
                }

                # reset the password: the old one and the old token are refused
                # at once, and the session opened with that token ends
                async with connect(url, second) as ws:
                    out = ok(
                        await cli(
                            "user",
                            "reset-password",
                            "carol",
                            "--password-stdin",
                            *where,
                            stdin=NEW_PASSWORD.encode() + b"\n",
                        )
                    )
                    assert "signed out everywhere" in out
                    await ws.expect("error", code="token_revoked")
                r = await me(http, second)
                assert r.status_code == 401, r.text
                assert r.json()["code"] == "token_revoked", r.text
                r = await http.post("/api/auth/login", json={"name": "carol", "password": PASSWORD})
                assert r.status_code == 401
                third = await login(http, "carol", NEW_PASSWORD)  # the same second: still good
                assert (await me(http, third)).status_code == 200

                # --keep-tokens keeps them
                ok(
                    await cli(
                        "user",
                        "reset-password",
                        "carol",
                        "--keep-tokens",
                        "--password-stdin",
                        *where,
                        stdin=PASSWORD.encode(),
                    )
                )
                assert (await me(http, third)).status_code == 200
                fourth = await login(http, "carol")

                # revoke --all
                out = ok(await cli("tokens", "revoke", "carol", "--all", *where))
                assert "signed carol out everywhere" in out
                for user in (third, fourth):
                    assert (await me(http, user)).status_code == 401
                fifth = await login(http, "carol")
                assert (await me(http, fifth)).status_code == 200
            nursery.cancel_scope.cancel()


def _token_id(user: User) -> str:
    import jwt

    return str(jwt.decode(user.token, options={"verify_signature": False})["jti"])


@pytest.mark.sqlite_only
async def test_status_before_and_after_setup(tmp_path: Path) -> None:
    data = tmp_path / "node"
    where = ("--data-dir", str(data))
    with trio.fail_after(60):
        status = json.loads(ok(await cli("status", "--json", *where)))
        assert status["initialized"] is False
        assert status["nodeRunning"] is False
        assert not data.exists()  # status made nothing
        assert "set up:        no" in ok(await cli("status", *where))

        async with trio.open_nursery() as nursery:
            url = await serve_on(data, nursery)
            async with httpx.AsyncClient(base_url=url, timeout=20) as http:
                mesh = Mesh(http)
                fresh = json.loads(ok(await cli("status", "--json", *where)))
                assert fresh["initialized"] is False
                assert fresh["nodeRunning"] is True
                await mesh.setup("olivia")
                await mesh.register("pat")
                await mesh.guest()
                status = json.loads(ok(await cli("status", "--json", *where)))
            nursery.cancel_scope.cancel()
        assert status["initialized"] is True
        assert status["meshName"] == "Test Mesh"
        assert status["owner"] == "olivia"
        assert status["participants"] == {
            "total": 3,
            "byKind": {"guest": 1, "human": 2},
            "byRole": {"member": 1, "owner": 1, "spectator": 1},
        }
        assert status["store"]["backend"] == "sqlite"
        assert status["dataDir"] == str(data.resolve())
        # stopped: the command reads the store itself
        text = ok(await cli("status", *where))
        assert "owner:         olivia" in text
        assert "node running:  no" in text


@pytest.mark.sqlite_only
async def test_refusals_are_clear_and_never_a_traceback(tmp_path: Path) -> None:
    data = tmp_path / "node"
    where = ("--data-dir", str(data))
    with trio.fail_after(90):
        async with trio.open_nursery() as nursery:
            url = await serve_on(data, nursery)
            # not set up yet
            refused(
                await cli(
                    "user", "create", "alice", "--password-stdin", *where, stdin=PASSWORD.encode()
                ),
                "not set up",
            )
            async with httpx.AsyncClient(base_url=url, timeout=20) as http:
                await Mesh(http).setup("olivia")
            refused(await cli("tokens", "list", "nobody", *where), "no participant named 'nobody'")
            refused(
                await cli("tokens", "revoke", "olivia", "nope", *where), "no valid token 'nope'"
            )
            # an id that begins with "-" (earlier releases issued such): as it
            # is, or after "--", it reaches the chore
            refused(
                await cli("tokens", "revoke", "olivia", "-nopeNopeNopeNop", *where),
                "no valid token '-nopeNopeNopeNop'",
            )
            refused(
                await cli("tokens", "revoke", "olivia", *where, "--", "-nope"),
                "no valid token '-nope'",
            )
            # a second word, or a misspelt option, is argparse's error as ever
            for words in (("nope", "again"), ("--alll",), ("--datadir=elsewhere",)):
                done = await cli("tokens", "revoke", "olivia", *words, *where)
                assert done.returncode == 2, done.stderr
                said = f"unrecognized arguments: {words[-1]}".encode()
                assert said in done.stderr, done.stderr
                assert b"Traceback" not in done.stderr
            refused(
                await cli(
                    "user",
                    "reset-password",
                    "nobody",
                    "--password-stdin",
                    *where,
                    stdin=PASSWORD.encode(),
                ),
                "no participant named",
            )
            refused(
                await cli("user", "create", "alice", "--password-stdin", *where, stdin=b"abc\n"),
                "password",
            )
            refused(
                await cli(
                    "user", "create", "Olivia", "--password-stdin", *where, stdin=PASSWORD.encode()
                ),
                "taken",
            )
            # no terminal, no --password-stdin: never waits for a password
            refused(await cli("user", "create", "alice", *where), "--password-stdin")
            refused(await cli("user", "create", "alice", "--password-stdin", *where), "no password")
            nursery.cancel_scope.cancel()
        # no store at all
        refused(
            await cli(
                "user", "create", "x", "--data-dir", str(tmp_path / "empty"), "--password-stdin"
            ),
            "no node's store",
        )
        # neither a token nor --all
        done = await cli("tokens", "revoke", "olivia", *where)
        assert done.returncode == 1
        assert b"--all" in done.stderr


async def _control(path: Path, payload: bytes) -> dict[str, Any]:
    """Send raw bytes to the control socket; its one-line answer."""
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await sock.connect(str(path))
    async with trio.SocketStream(sock) as stream:
        await stream.send_all(payload)
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = await stream.receive_some(65536)
            assert chunk, answer
            answer += chunk
    result: dict[str, Any] = json.loads(answer)
    return result


@pytest.mark.sqlite_only
async def test_the_control_socket_refuses_garbage_and_goes_on(tmp_path: Path) -> None:
    data = tmp_path / "node"
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            url = await serve_on(data, nursery)
            path = data / CONTROL_SOCKET
            for payload, code in (
                (b"garbage\n", "bad_request"),
                (b"\xff\xfe\n", "bad_request"),
                (b"[" * 60_000 + b"\n", "bad_request"),  # deeper than json goes
                (b"[1, 2]\n", "bad_request"),
                (b'{"op": "drop_tables"}\n', "unknown_operation"),
                # a lone surrogate: JSON allows it, but it is no text
                (b'{"op": "list_tokens", "name": "\\ud800"}\n', "bad_request"),
                (b'{"op": "list_tokens"}\n', "bad_request"),
                (b'{"op": "list_tokens", "name": 5}\n', "bad_request"),
                (b'{"op": "setup_status", "extra": 1}\n', "bad_request"),
                (b"x" * (MAX_REQUEST + 10), "too_large"),
            ):
                answer = await _control(path, payload)
                assert answer["ok"] is False, (payload[:40], answer)
                assert answer["code"] == code, (payload[:40], answer)
            # a client that connects and goes away
            sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
            await sock.connect(str(path))
            sock.close()
            # the node still serves, and the socket still answers
            async with httpx.AsyncClient(base_url=url, timeout=20) as http:
                assert (await http.get("/api/health")).json()["ok"] is True
            answer = await _control(path, b'{"op": "setup_status"}\n')
            assert answer["ok"] is True
            assert answer["result"]["initialized"] is False
            nursery.cancel_scope.cancel()


async def test_a_chore_on_postgresql_reaches_the_running_node(tmp_path: Path) -> None:
    """On PostgreSQL the command is one more process of the mesh: its
    revocation reaches the serving process through the cluster's bus."""
    cluster = stores.cluster
    if cluster is None:
        pytest.skip("about PostgreSQL: run with --store postgresql")
    data = tmp_path / "node"
    database = ("--database-url", cluster.url_for(data), "--data-dir", str(data))
    with trio.fail_after(90):
        async with trio.open_nursery() as nursery:
            url = await serve_on(data, nursery)
            assert not (data / CONTROL_SOCKET).exists()
            async with httpx.AsyncClient(base_url=url, timeout=20) as http:
                owner = await Mesh(http).setup("olivia")
                ok(
                    await cli(
                        "user",
                        "create",
                        "carol",
                        "--password-stdin",
                        *database,
                        stdin=PASSWORD.encode(),
                    )
                )
                carol = await login(http, "carol")
                listed = json.loads(ok(await cli("tokens", "list", "carol", "--json", *database)))
                assert [t["tokenId"] for t in listed] == [_token_id(carol)]
                async with connect(url, carol) as ws:
                    ok(await cli("tokens", "revoke", "carol", "--all", *database))
                    await ws.expect("error", code="token_revoked")

                async def refused_now() -> bool:
                    return (await me(http, carol)).status_code == 401

                await wait_for(refused_now)
                assert (await me(http, owner)).status_code == 200
                status = json.loads(ok(await cli("status", "--json", *database)))
                assert status["store"]["backend"] == "postgresql"
                assert status["participants"]["total"] == 2
                # no data folder there: refused, and none is made
                elsewhere = tmp_path / "elsewhere"
                refused(
                    await cli(
                        "status",
                        "--database-url",
                        cluster.url_for(data),
                        "--data-dir",
                        str(elsewhere),
                    ),
                    "no node's data folder",
                )
                assert not elsewhere.exists()
            nursery.cancel_scope.cancel()


@pytest.mark.sqlite_only
async def test_a_node_whose_folder_cannot_hold_the_socket_serves_without_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "node"
    (data / CONTROL_SOCKET).mkdir(parents=True)  # no socket can be made there
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            url = await serve_on(data, nursery)
            async with httpx.AsyncClient(base_url=url, timeout=20) as http:
                assert (await http.get("/api/health")).json()["ok"] is True
            nursery.cancel_scope.cancel()
    assert any("no control socket" in r.getMessage() for r in caplog.records)


@pytest.mark.sqlite_only
async def test_a_long_poll_ends_when_its_participant_is_signed_out_everywhere(
    tmp_path: Path,
) -> None:
    data = tmp_path / "node"
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            url = await serve_on(data, nursery)
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                mesh = Mesh(http)
                owner = await mesh.setup("olivia")
                member = await mesh.register("carol")
                answer: list[httpx.Response] = []
                answered = trio.Event()

                async def long_poll() -> None:
                    answer.append(
                        await http.post("/api/poll", json={"timeout": 25}, headers=member.headers)
                    )
                    answered.set()

                nursery.start_soon(long_poll)

                async def waiting() -> bool:  # a poll counts its caller online
                    r = await http.get(
                        f"/api/participants/{member.participant_id}", headers=owner.headers
                    )
                    return bool(r.json()["online"])

                await wait_for(waiting)
                ok(await cli("tokens", "revoke", "carol", "--all", "--data-dir", str(data)))
                with trio.fail_after(10):  # at once, not when the poll's 25 s are up
                    await answered.wait()
                assert answer[0].status_code == 401, answer[0].text
                assert answer[0].json()["code"] == "token_revoked"
            nursery.cancel_scope.cancel()


async def test_a_long_poll_ends_when_its_own_token_is_signed_out(mesh: Mesh) -> None:
    owner = await mesh.setup("olivia")
    member = await mesh.register("carol")
    answered = trio.Event()
    answer: list[httpx.Response] = []

    async def long_poll() -> None:
        answer.append(
            await mesh.http.post("/api/poll", json={"timeout": 25}, headers=member.headers)
        )
        answered.set()

    async def waiting() -> bool:  # a poll counts its caller online
        r = await mesh.http.get(f"/api/participants/{member.participant_id}", headers=owner.headers)
        return bool(r.json()["online"])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(long_poll)
        await wait_for(waiting)
        r = await mesh.http.post("/api/auth/logout", headers=member.headers)
        assert r.status_code == 200, r.text
        with trio.fail_after(10):  # at once, not when the poll's 25 s are up
            await answered.wait()
    assert_error(answer[0], 401, "token_revoked")
