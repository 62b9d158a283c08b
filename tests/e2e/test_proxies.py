"""Limits that work behind a reverse proxy, logins nobody can lock, and the
setup code of a node reachable from the network (issue 27 items 5 and 8,
decision 0055), over served nodes: the client address a trusted proxy
forwards is the one limited, an untrusted peer's forwarding headers are
ignored, wrong passwords from one address leave the right one from another
working (slowed, never refused), ``quart-mesh user unlock`` clears a name's
counts, and a node bound to a non-loopback address asks for the code it logs.

Test rules: loopback only (a node bound to 0.0.0.0 is reached on 127.0.0.1),
port 0, a time cap on every test, waits on answers and log lines.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
import trio

from quart_mesh import Settings, create_app, serve
from quart_mesh.client_address import ClientAddresses
from quart_mesh.config import Rate, RateLimits
from quart_mesh.services.setup_claim import SETUP_CODE_FILE
from tests import stores
from tests.e2e.test_cli_restart import ServerProcess
from tests.e2e.test_stock_hypercorn import Process
from tests.e2e.test_workers import Parent
from tests.e2e.test_workers import _env as workers_env
from tests.e2e.test_workers import _serve as workers_serve
from tests.helpers import PASSWORD, Mesh, assert_error, cli, open_client
from tests.stores import node_env

pytestmark = pytest.mark.e2e

# the client address ---------------------------------------------------------

TRUSTED = ("127.0.0.1", "10.0.0.0/8", "fd00::/8")


@pytest.mark.parametrize(
    ("peer", "header", "values", "client"),
    [
        # no trusted proxy in the way: the peer, whatever it claims
        ("198.51.100.7", "x-forwarded-for", ["203.0.113.5"], "198.51.100.7"),
        ("198.51.100.7", "forwarded", ["for=203.0.113.5"], "198.51.100.7"),
        # a trusted proxy: the hop it added
        ("127.0.0.1", "x-forwarded-for", ["203.0.113.5"], "203.0.113.5"),
        ("::ffff:127.0.0.1", "x-forwarded-for", ["203.0.113.5"], "203.0.113.5"),
        # what the client wrote before the proxy's hop is not believed
        ("127.0.0.1", "x-forwarded-for", ["1.1.1.1, 203.0.113.5"], "203.0.113.5"),
        ("127.0.0.1", "x-forwarded-for", ["1.1.1.1", "203.0.113.5"], "203.0.113.5"),
        # through trusted hops, to the first that is not
        ("127.0.0.1", "x-forwarded-for", ["1.1.1.1, 203.0.113.5, 10.1.2.3"], "203.0.113.5"),
        # a client that forges a trusted hop gains nothing
        ("127.0.0.1", "x-forwarded-for", ["10.9.9.9, 203.0.113.5"], "203.0.113.5"),
        # ports and brackets as proxies write them; IPv6
        ("127.0.0.1", "x-forwarded-for", ["203.0.113.5:4711"], "203.0.113.5"),
        ("127.0.0.1", "x-forwarded-for", ["[2001:db8::1]:4711"], "2001:db8::1"),
        ("127.0.0.1", "x-forwarded-for", ["2001:DB8::1"], "2001:db8::1"),
        # malformed or obfuscated: the trusted hop that passed it on is the client
        ("127.0.0.1", "x-forwarded-for", ["not-an-address"], "127.0.0.1"),
        ("127.0.0.1", "x-forwarded-for", ["203.0.113.5, unknown"], "127.0.0.1"),
        ("127.0.0.1", "x-forwarded-for", ["203.0.113.5, 10.1.2.3, junk"], "127.0.0.1"),
        ("127.0.0.1", "x-forwarded-for", ["junk, 10.1.2.3"], "10.1.2.3"),
        ("127.0.0.1", "x-forwarded-for", [], "127.0.0.1"),
        ("127.0.0.1", "x-forwarded-for", [""], "127.0.0.1"),
        # RFC 7239
        ("127.0.0.1", "forwarded", ['for="[2001:db8::1]:80";proto=https'], "2001:db8::1"),
        ("127.0.0.1", "forwarded", ["for=1.1.1.1, for=203.0.113.5;by=10.0.0.1"], "203.0.113.5"),
        ("127.0.0.1", "forwarded", ["for=_hidden"], "127.0.0.1"),
        ("127.0.0.1", "forwarded", ["proto=https"], "127.0.0.1"),
        # the other header is not read
        ("127.0.0.1", "forwarded", [], "127.0.0.1"),
        # not over IP (a unix socket): as it is
        ("/run/mesh.sock", "x-forwarded-for", ["203.0.113.5"], "/run/mesh.sock"),
        (None, "x-forwarded-for", ["203.0.113.5"], None),
    ],
)
def test_the_client_address_is_read_through_trusted_hops_only(
    peer: str | None, header: str, values: list[str], client: str | None
) -> None:
    assert ClientAddresses(TRUSTED, header).resolve(peer, values) == client


def test_without_trusted_proxies_forwarding_headers_are_ignored() -> None:
    addresses = ClientAddresses()
    assert addresses.resolve("127.0.0.1", ["203.0.113.5"]) == "127.0.0.1"


# per-address limits behind a proxy ---------------------------------------------------


def _settings(tmp_path: Path, **changes: object) -> Settings:
    rates = RateLimits(
        registration_address=Rate(2, 3600),
        login_address=Rate(30, 3600),
        login_name=Rate(3, 3600),
        login_slowdown=Rate(2, 3600),
        login_max_delay=0.5,
        challenge_address=Rate(2, 3600),
    )
    return Settings(data_dir=tmp_path / "mesh-data", rate_limits=rates).with_overrides(**changes)


async def _served(settings: Settings, nursery: trio.Nursery, host: str = "127.0.0.1") -> str:
    app = create_app(settings)
    url: str = await nursery.start(
        lambda task_status: serve(app, host=host, port=0, task_status=task_status)
    )
    return url


def _code(settings: Settings) -> str:
    """The setup code a node behind a trusted proxy asks for (from its data folder)."""
    return (settings.data_dir / SETUP_CODE_FILE).read_text()


def _from(address: str) -> dict[str, str]:
    return {"X-Forwarded-For": address}


async def _register(http: httpx.AsyncClient, name: str, address: str) -> httpx.Response:
    return await http.post(
        "/api/auth/register", json={"name": name, "password": PASSWORD}, headers=_from(address)
    )


async def test_an_untrusted_peer_is_limited_by_its_own_address(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """No trusted proxy (loopback not exempt here): forwarding headers change
    nothing, the peer's own address is counted."""
    settings = _settings(tmp_path)
    settings = settings.with_overrides(
        rate_limits=RateLimits(registration_address=Rate(2, 3600), exempt_addresses=())
    )
    with trio.fail_after(60):
        url = await _served(settings, nursery)
        async with httpx.AsyncClient(base_url=url, timeout=20) as http:
            await Mesh(http).setup()
            assert (await _register(http, "ann", "203.0.113.1")).status_code == 201
            assert (await _register(http, "ben", "203.0.113.2")).status_code == 201
            assert_error(await _register(http, "cat", "203.0.113.3"), 429, "rate_limited")
            # bootstrap and guests count against the same address
            r = await http.post("/api/auth/guest", headers=_from("203.0.113.4"))
            assert_error(r, 429, "rate_limited")


async def test_behind_a_trusted_proxy_each_forwarded_client_is_limited(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """With 127.0.0.1 trusted, the loopback proxy's clients are limited one by
    one (registrations, guests, DID challenges), though loopback is exempt."""
    settings = _settings(tmp_path, trusted_proxies=("127.0.0.1",))
    with trio.fail_after(60):
        url = await _served(settings, nursery)
        async with httpx.AsyncClient(base_url=url, timeout=20) as http:
            await Mesh(http).setup(setupCode=_code(settings))
            assert (await _register(http, "ann", "203.0.113.5")).status_code == 201
            r = await http.post("/api/auth/guest", headers=_from("203.0.113.5"))
            assert r.status_code == 201, r.text
            assert_error(await _register(http, "ben", "203.0.113.5"), 429, "rate_limited")
            # what the client itself wrote in front of the proxy's hop is not believed
            forged = {"X-Forwarded-For": "198.51.100.1, 203.0.113.5"}
            r = await http.post(
                "/api/auth/register", json={"name": "ben", "password": PASSWORD}, headers=forged
            )
            assert_error(r, 429, "rate_limited")
            # another client of the proxy has its own budget
            assert (await _register(http, "ben", "203.0.113.6")).status_code == 201
            # DID challenges too
            did = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
            for _ in range(2):
                r = await http.post(
                    "/api/identity/challenge", json={"did": did}, headers=_from("203.0.113.7")
                )
                assert r.status_code != 429, r.text
            r = await http.post(
                "/api/identity/challenge", json={"did": did}, headers=_from("203.0.113.7")
            )
            assert_error(r, 429, "rate_limited")
            # a request straight from loopback (no header) is still exempt
            for name in ("dee", "eve", "fay"):
                assert (
                    await http.post("/api/auth/register", json={"name": name, "password": PASSWORD})
                ).status_code == 201


async def test_the_access_log_names_the_forwarded_client_of_requests_and_sessions(
    tmp_path: Path, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="quart_mesh.access")
    settings = _settings(tmp_path, trusted_proxies=("127.0.0.1",))
    with trio.fail_after(60):
        url = await _served(settings, nursery)
        async with httpx.AsyncClient(base_url=url, timeout=20) as http:
            owner = await Mesh(http).setup(setupCode=_code(settings))
            r = await http.get("/api/setup/status", headers=_from("203.0.113.9"))
            assert r.status_code == 200
            # the node's own WebSocket transport
            async with open_client(url, extra_headers=[("X-Forwarded-For", "203.0.113.10")]) as ws:
                await ws.send_message(json.dumps({"type": "authenticate", "token": owner.token}))
                assert json.loads(await ws.get_message())["type"] == "auth_ok"
    clients = {
        (getattr(r, "route", None) or getattr(r, "event", None), getattr(r, "client", None))
        for r in caplog.records
        if r.name == "quart_mesh.access"
    }
    assert ("/api/setup/status", "203.0.113.9") in clients
    assert ("session_start", "203.0.113.10") in clients


# logins nobody can lock ---------------------------------------------------------------


async def _login(http: httpx.AsyncClient, name: str, password: str, address: str) -> httpx.Response:
    return await http.post(
        "/api/auth/login", json={"name": name, "password": password}, headers=_from(address)
    )


async def test_wrong_passwords_from_one_address_slow_the_name_but_never_lock_the_owner(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    settings = _settings(tmp_path, trusted_proxies=("127.0.0.1",))
    attacker, owner_address = "203.0.113.66", "198.51.100.20"
    with trio.fail_after(90):
        url = await _served(settings, nursery)
        async with httpx.AsyncClient(base_url=url, timeout=20) as http:
            await Mesh(http).setup("olivia", setupCode=_code(settings))
            answers = [await _login(http, "olivia", "wrong" * 4, attacker) for _ in range(3)]
            for r in answers:
                assert_error(r, 401, "invalid_credentials")
            # the first two failures are within login_slowdown: no wait
            assert "Login-Delay" not in answers[0].headers
            assert "Login-Delay" not in answers[1].headers
            # then every attempt for the name waits, at most login_max_delay
            assert 0 < float(answers[2].headers["Login-Delay"]) <= 0.5
            # the attacker's address is refused for this name (login_name)
            r = await _login(http, "olivia", "wrong" * 4, attacker)
            assert_error(r, 429, "rate_limited")
            assert int(r.headers["Retry-After"]) > 0
            r = await _login(http, "olivia", PASSWORD, attacker)
            assert_error(r, 429, "rate_limited")
            # the owner, from her own address: in, only slowed down
            r = await _login(http, "OLIVIA", PASSWORD, owner_address)
            assert r.status_code == 200, r.text
            assert 0 < float(r.headers["Login-Delay"]) <= 0.5
            # another name is not slowed
            r = await _login(http, "someone", "wrong" * 4, owner_address)
            assert_error(r, 401, "invalid_credentials")
            assert "Login-Delay" not in r.headers


async def test_user_unlock_forgets_a_names_failed_logins(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """``quart-mesh user unlock NAME`` as a real process on the served node's
    data folder (through its control socket on SQLite, the store on PostgreSQL)."""
    settings = _settings(tmp_path, trusted_proxies=("127.0.0.1",))
    attacker = "203.0.113.66"
    with trio.fail_after(120):
        url = await _served(settings, nursery)
        async with httpx.AsyncClient(base_url=url, timeout=20) as http:
            await Mesh(http).setup("olivia", setupCode=_code(settings))
            for _ in range(3):
                await _login(http, "olivia", "wrong" * 4, attacker)
            assert_error(await _login(http, "olivia", PASSWORD, attacker), 429, "rate_limited")

            where = ("--data-dir", str(settings.data_dir))
            env = node_env(settings.data_dir)
            done = await cli("user", "unlock", "olivia", *where, env=env)
            assert done.returncode == 0, done.stderr.decode()
            assert b"unlocked olivia" in done.stdout, done.stdout

            r = await _login(http, "olivia", PASSWORD, attacker)
            assert r.status_code == 200, r.text
            assert "Login-Delay" not in r.headers

            done = await cli("user", "unlock", "nobody", *where, env=env)
            assert done.returncode == 1
            assert b"nobody" in done.stderr
            assert b"Traceback" not in done.stderr


# the setup code ---------------------------------------------------------------------

_CODE = re.compile(rb"setup code: ([A-Z0-9-]+)")


def _init(**extra: object) -> dict[str, object]:
    return {"name": "olivia", "password": PASSWORD, "meshName": "Claimed", **extra}


async def test_a_node_on_a_public_address_asks_for_the_setup_code_it_logged(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """``quart-mesh serve --host 0.0.0.0``: the code is in its log; without it,
    or with a wrong one, no setup; with it, the first caller is the owner."""
    data_dir = tmp_path / "node"
    server = ServerProcess(data_dir, "--host", "0.0.0.0")
    with trio.fail_after(90):
        url = await server.start(nursery)
        port = url.rsplit(":", 1)[1]
        while not (match := _CODE.search(server.output)):
            await trio.sleep(0.05)  # the drain task appends the log as it comes
        code = match.group(1).decode()
        assert len(code.replace("-", "")) == 16
        assert (data_dir / SETUP_CODE_FILE).stat().st_mode & 0o077 == 0
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=20) as http:
            status = (await http.get("/api/setup/status")).json()
            assert status["initialized"] is False
            assert status["codeRequired"] is True
            r = await http.post("/api/setup/init", json=_init())
            assert_error(r, 403, "setup_code_required")
            r = await http.post("/api/setup/init", json=_init(setupCode="AAAA-BBBB-CCCC-DDDD"))
            assert_error(r, 403, "invalid_setup_code")
            r = await http.post("/api/setup/init", json=_init(setupCode="x" * 10_000))
            assert_error(r, 403, "invalid_setup_code")
            # as people type it: lower case, no hyphens
            r = await http.post(
                "/api/setup/init", json=_init(setupCode=code.replace("-", "").lower())
            )
            assert r.status_code == 201, r.text
            assert not (data_dir / SETUP_CODE_FILE).exists()  # used
            status = (await http.get("/api/setup/status")).json()
            assert (status["initialized"], status["codeRequired"]) == (True, False)
            r = await http.post("/api/setup/init", json=_init(name="mallory", setupCode=code))
            assert_error(r, 409, "already_initialized")
        assert await server.stop() == 0
    assert server.output.count(b"setup code:") == 1


async def test_a_node_on_loopback_needs_no_setup_code(
    tmp_path: Path, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    settings = _settings(tmp_path)
    with trio.fail_after(60):
        url = await _served(settings, nursery)
        async with httpx.AsyncClient(base_url=url, timeout=20) as http:
            assert (await http.get("/api/setup/status")).json()["codeRequired"] is False
            r = await http.post("/api/setup/init", json=_init())
            assert r.status_code == 201, r.text
    assert "setup code" not in caplog.text
    assert not (settings.data_dir / SETUP_CODE_FILE).exists()


async def test_setup_code_always_is_asked_for_on_loopback_too_and_rate_limited(
    tmp_path: Path, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    """``MESH_SETUP_CODE=always`` (a node behind a proxy on the same host):
    the code is asked for, wrong guesses count per forwarded client."""
    caplog.set_level(logging.WARNING, logger="quart_mesh")
    settings = _settings(tmp_path, trusted_proxies=("127.0.0.1",), setup_code="always")
    settings = settings.with_overrides(
        rate_limits=RateLimits(login_address=Rate(2, 3600), exempt_addresses=())
    )
    with trio.fail_after(60):
        url = await _served(settings, nursery)
        match = re.search(r"setup code: ([A-Z0-9-]+)", caplog.text)
        assert match, caplog.text
        code = match.group(1)
        assert (settings.data_dir / SETUP_CODE_FILE).read_text() == code
        async with httpx.AsyncClient(base_url=url, timeout=20) as http:
            for _ in range(2):
                r = await http.post(
                    "/api/setup/init", json=_init(setupCode="WRONG"), headers=_from("203.0.113.1")
                )
                assert_error(r, 403, "invalid_setup_code")
            r = await http.post(
                "/api/setup/init", json=_init(setupCode=code), headers=_from("203.0.113.1")
            )
            assert_error(r, 429, "rate_limited")
            r = await http.post(
                "/api/setup/init", json=_init(setupCode=code), headers=_from("203.0.113.2")
            )
            assert r.status_code == 201, r.text


async def test_under_stock_hypercorn_the_quart_route_and_rest_use_the_forwarded_client(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """``hypercorn -k trio 'quart_mesh.asgi:create_asgi_app()'`` behind a
    trusted proxy: registrations are limited per forwarded client, the
    WebSocket session through Quart's route is logged with it, and the node
    asks for the setup code it logged (a node that trusts a proxy is reached
    from outside through it, whatever it binds)."""
    server = Process.hypercorn(tmp_path / "mesh-data")
    server.env = {
        "MESH_TRUSTED_PROXIES": "127.0.0.1",
        "MESH_RATE_REGISTRATION_ADDRESS": "2/1h",
        "MESH_LOG_LEVEL": "INFO",
    }
    with trio.fail_after(90):
        await server.start(nursery)
        url = await server.url()
        async with httpx.AsyncClient(base_url=url, timeout=20) as http:
            assert (await http.get("/api/setup/status")).json()["codeRequired"] is True
            assert_error(await http.post("/api/setup/init", json=_init()), 403)
            code = (tmp_path / "mesh-data" / SETUP_CODE_FILE).read_text()
            assert f"setup code: {code}".encode() in server.output
            owner = await Mesh(http).setup(setupCode=code)
            assert (await _register(http, "ann", "203.0.113.5")).status_code == 201
            assert (await _register(http, "ben", "203.0.113.5")).status_code == 201
            assert_error(await _register(http, "cat", "203.0.113.5"), 429, "rate_limited")
            assert (await _register(http, "cat", "203.0.113.6")).status_code == 201
            async with open_client(url, extra_headers=[("X-Forwarded-For", "203.0.113.11")]) as ws:
                await ws.send_message(json.dumps({"type": "authenticate", "token": owner.token}))
                assert json.loads(await ws.get_message())["type"] == "auth_ok"
                while b"client=203.0.113.11" not in server.output:
                    await server._more.wait()
        assert await server.stop() == 0
    assert b"WS session_start" in server.output
    assert b"setup code:" in server.output


async def test_every_worker_asks_for_the_same_setup_code(tmp_path: Path) -> None:
    """``quart-mesh serve --workers 2 --host 0.0.0.0`` (PostgreSQL): the code
    is in the data folder, so both workers log and ask for the same one,
    whichever takes the request."""
    if stores.cluster is None:
        pytest.skip("several workers need PostgreSQL (--store postgresql)")
    data_dir = tmp_path / "mesh-data"
    process = await trio.lowlevel.open_process(
        workers_serve(data_dir, "--workers", "2", "--host", "0.0.0.0"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=workers_env(MESH_DATABASE_URL=stores.cluster.url_for(data_dir)),
    )
    parent = Parent(process)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(parent.pump)
        try:
            with trio.fail_after(90):
                (listening, _) = await parent.wait_for(r"quart-mesh listening on (http://\S+)")
                port = listening.group(1).rsplit(":", 1)[1]
                codes = set()
                after = 0
                for _ in (1, 2):
                    (found, after) = await parent.wait_for(r"setup code: ([A-Z0-9-]+)", after)
                    codes.add(found.group(1))
                for n in (1, 2):
                    await parent.wait_for(rf"quart-mesh worker {n} \(pid \d+\) serving")
            assert len(codes) == 1, parent.log()
            (code,) = codes
            limits = httpx.Limits(max_keepalive_connections=0)  # any worker may answer
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=20
            ) as http:
                for _ in range(6):
                    r = await http.post("/api/setup/init", json=_init())
                    assert_error(r, 403, "setup_code_required")
                    status = (await http.get("/api/setup/status")).json()
                    assert status["codeRequired"] is True
                r = await http.post("/api/setup/init", json=_init(setupCode=code))
                assert r.status_code == 201, r.text
        finally:
            with trio.CancelScope(shield=True), trio.fail_after(60):
                if process.returncode is None:
                    process.send_signal(signal.SIGTERM)
                await parent.exited.wait()
    assert process.returncode == 0, parent.log()


async def test_ipv6_clients_are_limited_by_their_64(tmp_path: Path, nursery: trio.Nursery) -> None:
    """Behind a trusted proxy, IPv6 clients that rotate through one /64 share
    its per-address budget; another /64 has its own."""
    settings = _settings(tmp_path, trusted_proxies=("127.0.0.1",))
    with trio.fail_after(60):
        url = await _served(settings, nursery)
        async with httpx.AsyncClient(base_url=url, timeout=20) as http:
            await Mesh(http).setup(setupCode=_code(settings))
            assert (await _register(http, "ann", "2001:db8:5:6::1")).status_code == 201
            assert (await _register(http, "ben", "2001:db8:5:6::2")).status_code == 201
            r = await _register(http, "cat", "2001:db8:5:6:ffff::3")
            assert_error(r, 429, "rate_limited")
            assert (await _register(http, "cat", "2001:db8:5:7::1")).status_code == 201
