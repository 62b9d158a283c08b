"""The deployment recipes: ``Dockerfile``, ``.dockerignore``, the systemd unit,
the nginx and Caddy snippets, and ``docs/operations.md``, which documents them.

Nothing is built or installed here. The files are parsed and checked against
the node's own settings, limits and command line. A tool that is on PATH
(``systemd-analyze``, ``nginx``, ``caddy``) also checks its own file;
otherwise that part is skipped. The image's health check command is run for
real against a node on loopback, a closed port and a server answering 503.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trio

from quart_mesh import cli
from quart_mesh.app import largest_body
from quart_mesh.config import Settings
from quart_mesh.workers import STOP_MARGIN

# the recipes and documents are the same whatever the store
pytestmark = [pytest.mark.timeout(60), pytest.mark.store_free]

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
UNIT = ROOT / "deploy" / "quart-mesh.service"
NGINX = ROOT / "deploy" / "nginx.conf"
CADDYFILE = ROOT / "deploy" / "Caddyfile"
OPERATIONS = ROOT / "docs" / "operations.md"
RECIPES = (DOCKERFILE, DOCKERIGNORE, UNIT, NGINX, CADDYFILE)

DEFAULTS = Settings()
#: the longest graceful stop: a ``--workers`` parent waits this long for its workers
LONGEST_STOP = DEFAULTS.graceful_timeout + STOP_MARGIN
#: a proxy must wait longer than every wait the node allows itself
LONGEST_NODE_WAIT = max(
    DEFAULTS.model_timeout,
    DEFAULTS.ws_idle_timeout,
    DEFAULTS.ws_ping_interval,
    DEFAULTS.max_poll_timeout,
)
#: the largest request body the node accepts, on any path
LARGEST_BODY = largest_body(DEFAULTS)


# --- reading the files ---------------------------------------------------------


def _logical_lines(text: str, comment: str = "#") -> Iterator[str]:
    """Lines with backslash continuations joined. A comment line is never
    continued, and one inside a continued line is dropped (as Docker does)."""
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(comment):
            if not pending:
                yield line
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        yield pending + line
        pending = ""
    if pending:
        yield pending.strip()


@dataclass(frozen=True)
class Instruction:
    name: str
    args: str


def _dockerfile() -> list[Instruction]:
    instructions = []
    for line in _logical_lines(DOCKERFILE.read_text()):
        if not line or line.startswith("#"):
            continue
        name, _, args = line.partition(" ")
        instructions.append(Instruction(name.upper(), args.strip()))
    return instructions


def _final_stage() -> list[Instruction]:
    """The instructions of the image that runs (after the last ``FROM``)."""
    instructions = _dockerfile()
    last_from = max(i for i, ins in enumerate(instructions) if ins.name == "FROM")
    return instructions[last_from:]


def _one(instructions: list[Instruction], name: str) -> str:
    """The arguments of the last *name* instruction (the one that counts)."""
    found = [ins.args for ins in instructions if ins.name == name]
    assert found, f"the Dockerfile has no {name}"
    return found[-1]


def _docker_env(instructions: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for ins in instructions:
        if ins.name != "ENV":
            continue
        words = shlex.split(ins.args)
        if "=" not in words[0]:  # the old form, ENV NAME value
            env[words[0]] = " ".join(words[1:])
            continue
        for word in words:
            name, _, value = word.partition("=")
            env[name] = value
    return env


def _exec_form(args: str, what: str) -> list[str]:
    try:
        argv = json.loads(args)
    except ValueError:
        pytest.fail(f"{what} must be in exec form (a JSON list), not {args!r}")
    assert isinstance(argv, list), what
    assert all(isinstance(word, str) for word in argv), what
    return argv


def _healthcheck() -> tuple[dict[str, str], list[str]]:
    """The ``HEALTHCHECK`` options and its command."""
    args = _one(_dockerfile(), "HEALTHCHECK")
    options_part, cmd, command = args.partition("CMD ")
    assert cmd, f"HEALTHCHECK without CMD: {args!r}"
    options = {}
    for option in options_part.split():
        name, _, value = option.removeprefix("--").partition("=")
        options[name] = value
    return options, _exec_form(command.strip(), "HEALTHCHECK CMD")


@dataclass
class Unit:
    """A systemd unit: each key's assignments in order, per section."""

    sections: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def values(self, section: str, key: str) -> list[str]:
        """A list setting's items: an empty assignment clears the list."""
        items: list[str] = []
        for value in self.sections[section].get(key, []):
            items = [] if value == "" else [*items, value]
        return items

    def last(self, section: str, key: str) -> str:
        values = self.sections[section].get(key)
        assert values is not None, f"[{section}] has no {key}="
        return values[-1]

    def environment(self) -> dict[str, str]:
        env = {}
        for value in self.values("Service", "Environment"):
            for word in shlex.split(value):
                name, _, setting = word.partition("=")
                env[name] = setting
        return env


def _unit(text: str) -> Unit:
    unit = Unit()
    current: dict[str, list[str]] | None = None
    for line in _logical_lines(text):
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = unit.sections.setdefault(line[1:-1], {})
            continue
        key, equals, value = line.partition("=")
        assert equals, f"not a KEY=value line: {line!r}"
        assert current is not None, f"a setting before any section: {line!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return unit


_TIMESPAN_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def _seconds(value: str) -> float:
    """A systemd or nginx time span (``60``, ``90s``, ``1min 30s``, ``3m``)."""
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value)
    assert parts, f"not a time span: {value!r}"
    return sum(float(number) * _TIMESPAN_UNITS[unit] for number, unit in parts)


def _bytes(value: str) -> int:
    """An nginx (``11m``) or Caddy (``11MiB``, ``11MB``) size."""
    match = re.fullmatch(r"(\d+)\s*([a-zA-Z]*)", value.strip())
    assert match, f"not a size: {value!r}"
    number, unit = int(match[1]), match[2].lower()
    scale = {
        "": 1,
        "b": 1,
        "k": 1024,
        "kib": 1024,
        "kb": 1000,
        "m": 1024**2,
        "mib": 1024**2,
        "mb": 1000**2,
        "g": 1024**3,
        "gib": 1024**3,
        "gb": 1000**3,
    }
    return number * scale[unit]


def _without_comments(text: str) -> str:
    return "\n".join(re.sub(r"(^|\s)#.*$", "", line) for line in text.splitlines())


def _assert_balanced(text: str, name: str) -> None:
    depth = 0
    for number, line in enumerate(_without_comments(text).splitlines(), 1):
        for char in line:
            depth += {"{": 1, "}": -1}.get(char, 0)
            assert depth >= 0, f"{name}:{number}: '}}' without its '{{'"
    assert depth == 0, f"{name}: {depth} '{{' never closed"


def _directive(text: str, name: str) -> list[str]:
    """The arguments of each nginx directive *name* (comments left out)."""
    return re.findall(rf"(?:^|[;{{}}])\s*{name}\s+([^;{{}}]*);", _without_comments(text), re.M)


#: a fenced code block, perhaps indented (inside a list item)
_FENCED = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<info>\S*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S
)


def _fenced_blocks(markdown: str) -> list[tuple[str, str]]:
    """``(info string, content)`` of each fenced code block, indentation removed."""
    blocks = []
    for match in _FENCED.finditer(markdown):
        indent = len(match["indent"])
        body = "".join(line[indent:] for line in match["body"].splitlines(keepends=True))
        blocks.append((match["info"], body))
    return blocks


# --- Dockerfile and .dockerignore ------------------------------------------------


def test_the_image_is_built_from_a_slim_official_python_and_this_source_tree() -> None:
    instructions = _dockerfile()
    for args in (ins.args for ins in instructions if ins.name == "FROM"):
        image = args.split()[0]
        match = re.fullmatch(r"python:3\.(\d+)-slim(?:-\w+)?", image)
        assert match, f"not a slim official Python image: {image}"
        assert int(match[1]) >= 11, image
    runs = " ".join(ins.args for ins in instructions if ins.name == "RUN")
    assert re.search(r"pip install (?:--?\S+ )*\"?\.(?:\[[\w,-]+\])?\"?(?:\s|$)", runs), (
        "the package must be installed from the source tree (pip install .)"
    )
    copied = " ".join(ins.args for ins in instructions if ins.name == "COPY")
    for needed in ("pyproject.toml", "README.md", "quart_mesh"):
        assert needed in copied, f"{needed} is not copied into the build"


def test_the_node_runs_unprivileged_on_every_interface_with_its_data_in_a_volume() -> None:
    stage = _final_stage()
    user = _one(stage, "USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit(), f"USER must be a fixed numeric uid, not {user!r}"
    assert int(uid) != 0, "the node must not run as root"
    assert not gid or (gid.isdigit() and int(gid) != 0), user
    runs = " ".join(ins.args for ins in stage if ins.name == "RUN")
    assert f"--uid {uid}" in runs, f"uid {uid} is not created in the image"

    env = _docker_env(stage)
    volume = _one(stage, "VOLUME")
    volumes = json.loads(volume) if volume.startswith("[") else volume.split()
    assert env.get("MESH_DATA_DIR") in volumes, "the data folder must be the volume"
    assert env.get("MESH_HOST") == "0.0.0.0", "inside a container the node binds every interface"
    exposed = [port.split("/")[0] for port in _one(stage, "EXPOSE").split()]
    assert env.get("MESH_PORT") in exposed, "the port the node binds must be exposed"


def test_the_node_is_the_containers_main_process_and_gets_sigterm() -> None:
    stage = _final_stage()
    entrypoint = _exec_form(_one(stage, "ENTRYPOINT"), "ENTRYPOINT")
    cmd = _exec_form(_one(stage, "CMD"), "CMD")
    assert [*entrypoint, *cmd] == ["quart-mesh", "serve"]
    stop = [ins.args for ins in stage if ins.name == "STOPSIGNAL"]
    assert stop in ([], ["SIGTERM"]), "SIGTERM is the node's graceful stop"


def test_the_health_check_asks_api_health_without_curl() -> None:
    options, argv = _healthcheck()
    assert argv[:2] == ["python", "-c"], "slim images have no curl: use Python"
    code = argv[2]
    assert "/api/health" in code
    assert "curl" not in code
    assert "wget" not in code
    assert "MESH_PORT" in code, "the check must follow the port the node binds"
    timeout = re.search(r"timeout=(\d+(?:\.\d+)?)", code)
    assert timeout, "the request needs a timeout"
    assert float(timeout[1]) < _seconds(options["timeout"]), (
        "the request must give up before Docker kills the check"
    )


def _dockerignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.removeprefix("!").strip("/")
        regex, i = "", 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex, i = regex + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                regex, i = regex + ".*", i + 2
            elif pattern[i] == "*":
                regex, i = regex + "[^/]*", i + 1
            elif pattern[i] == "?":
                regex, i = regex + "[^/]", i + 1
            else:
                regex, i = regex + re.escape(pattern[i]), i + 1
        rules.append((negate, re.compile(regex)))
    return rules


def _ignored(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: the last pattern matching the path, or a folder above it, wins."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    ignored = False
    for negate, regex in rules:
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            ignored = not negate
    return ignored


def test_dockerignore_sends_only_what_the_build_copies() -> None:
    rules = _dockerignore_rules()
    for path in (
        ".venv/bin/python",
        ".git/HEAD",
        ".pytest_cache/v/cache/nodeids",
        ".mypy_cache/3.11/cache.db",
        ".ruff_cache/content",
        ".hypothesis/examples/x",
        ".nox/tests/bin/python",
        "mesh-data/mesh.db",
        "mesh-data/secret.key",
        "tests/conftest.py",
        "quart_mesh/__pycache__/cli.cpython-311.pyc",
        "quart_mesh.egg-info/PKG-INFO",
        "build/lib/quart_mesh/cli.py",
        "dist/quart_mesh-0.1.0-py3-none-any.whl",
    ):
        assert _ignored(path, rules), f"{path} would be sent to the Docker build"

    sources = []
    for ins in _dockerfile():
        if ins.name == "COPY" and "--from=" not in ins.args:
            sources += shlex.split(ins.args)[:-1]
    assert sources
    for source in sources:
        copied = ROOT / source
        files = [copied] if copied.is_file() else [f for f in copied.rglob("*") if f.is_file()]
        assert files, f"COPY {source}: nothing there"
        for file in files:
            relative = file.relative_to(ROOT).as_posix()
            if "__pycache__" not in relative:
                assert not _ignored(relative, rules), f"COPY needs {relative}, which is ignored"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def _run_health_check(port: int) -> subprocess.CompletedProcess[bytes]:
    """The image's health check command as Docker runs it, with this Python
    and ``MESH_PORT`` set; proxies in the environment point nowhere, which
    the check must ignore."""
    _, argv = _healthcheck()
    env = {
        **os.environ,
        "MESH_PORT": str(port),
        "http_proxy": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "no_proxy": "",
        "NO_PROXY": "",
    }
    with trio.fail_after(30):
        return await trio.run_process(
            [sys.executable, *argv[1:]],
            env=env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


async def test_the_health_check_passes_against_a_running_node(base_url: str) -> None:
    port = urlsplit(base_url).port
    assert port is not None
    result = await _run_health_check(port)
    assert result.returncode == 0, result.stderr.decode()


async def test_the_health_check_fails_on_a_closed_port() -> None:
    result = await _run_health_check(_free_port())
    assert result.returncode == 1, result.stderr.decode()  # Docker: 1 is unhealthy
    assert b"Connection refused" in result.stderr


async def test_the_health_check_fails_when_health_answers_503(nursery: trio.Nursery) -> None:
    body = b'{"ok": false}'
    answer = (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
    )

    async def unhealthy(stream: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data and (chunk := await stream.receive_some(4096)):
            data += chunk
        assert data.startswith(b"GET /api/health/live ")
        await stream.send_all(answer)
        await stream.aclose()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    nursery.start_soon(trio.serve_listeners, unhealthy, listeners)
    result = await _run_health_check(listeners[0].socket.getsockname()[1])
    assert result.returncode == 1, result.stderr.decode()
    assert b"503" in result.stderr
    nursery.cancel_scope.cancel()


# --- systemd ---------------------------------------------------------------------


def test_the_unit_runs_quart_mesh_serve_with_its_data_in_its_state_directory() -> None:
    unit = _unit(UNIT.read_text())
    assert unit.last("Service", "Type") in ("simple", "exec")
    argv = shlex.split(unit.last("Service", "ExecStart"))
    assert Path(argv[0]).is_absolute()
    assert Path(argv[0]).name == "quart-mesh"
    assert argv[1] == "serve"

    dynamic = unit.last("Service", "DynamicUser") == "yes"
    user = unit.sections["Service"].get("User", [""])[-1]
    assert dynamic or user not in ("", "root", "0"), "the node needs a user of its own"
    state = unit.last("Service", "StateDirectory")
    env = unit.environment()
    assert env["MESH_DATA_DIR"] == f"/var/lib/{state}", "the data folder is the state directory"


def test_the_unit_stops_gracefully_and_restarts_on_failure_only() -> None:
    unit = _unit(UNIT.read_text())
    assert unit.last("Service", "KillSignal") == "SIGTERM"
    assert unit.last("Service", "KillMode") == "mixed", "the node stops its children itself"
    assert _seconds(unit.last("Service", "TimeoutStopSec")) > LONGEST_STOP
    assert unit.last("Service", "Restart") == "on-failure"  # 70 and 1 are restarted
    prevent = " ".join(unit.values("Service", "RestartPreventExitStatus")).split()
    assert "2" in prevent, "bad settings (exit status 2) must not be restarted"


def test_the_unit_is_sandboxed() -> None:
    unit = _unit(UNIT.read_text())
    expected = {
        "NoNewPrivileges": "yes",
        "CapabilityBoundingSet": "",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "ProtectKernelTunables": "yes",
        "ProtectKernelModules": "yes",
        "ProtectKernelLogs": "yes",
        "ProtectControlGroups": "yes",
        "RestrictNamespaces": "yes",
        "RestrictSUIDSGID": "yes",
        "LockPersonality": "yes",
        "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
        "SystemCallFilter": "@system-service",
    }
    for key, value in expected.items():
        assert unit.last("Service", key) == value, f"{key}={value} expected"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    """With ExecStart pointed at this virtualenv's quart-mesh (verify
    checks that the program exists)."""
    program = Path(sys.executable).with_name("quart-mesh")
    if not program.exists():
        pytest.skip("quart-mesh is not installed next to this Python")
    text = re.sub(r"^ExecStart=\S+", f"ExecStart={program}", UNIT.read_text(), count=1, flags=re.M)
    copy = tmp_path / UNIT.name
    copy.write_text(text)
    result = subprocess.run(
        ["systemd-analyze", "verify", str(copy)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    # unknown keys and bad values are warnings: exit status 0, a line naming the file
    complaints = [
        line for line in (result.stdout + result.stderr).splitlines() if UNIT.name in line
    ]
    assert result.returncode == 0, result.stderr
    assert not complaints, "\n".join(complaints)


# --- reverse proxies ----------------------------------------------------------------


def test_the_proxies_and_recipes_agree_on_where_the_node_listens() -> None:
    unit_env = _unit(UNIT.read_text()).environment()
    node = f"{unit_env['MESH_HOST']}:{unit_env['MESH_PORT']}"
    assert unit_env["MESH_HOST"] == "127.0.0.1", "behind a proxy the unit binds loopback"
    assert unit_env["MESH_PORT"] == str(DEFAULTS.port)
    assert _docker_env(_final_stage())["MESH_PORT"] == str(DEFAULTS.port)
    passes = _directive(NGINX.read_text(), "proxy_pass")
    assert passes
    assert set(passes) == {f"http://{node}"}
    caddy = _without_comments(CADDYFILE.read_text())
    assert re.findall(r"^\s*reverse_proxy\s+(\S+)", caddy, re.M) == [node]


def test_nginx_passes_websockets_and_waits_longer_than_the_node() -> None:
    text = NGINX.read_text()
    _assert_balanced(text, NGINX.name)
    assert _directive(text, "proxy_http_version") == ["1.1"]
    headers = [" ".join(args.split()) for args in _directive(text, "proxy_set_header")]
    assert "Upgrade $http_upgrade" in headers
    connection = [h for h in headers if h.startswith("Connection ")]
    assert connection in (["Connection $connection_upgrade"], ['Connection "upgrade"'])
    if connection == ["Connection $connection_upgrade"]:
        assert re.search(r"map\s+\$http_upgrade\s+\$connection_upgrade\s*\{", text)
    assert "Host $host" in headers
    # an upgrade must open its own connection to the node
    assert not _directive(text, "keepalive"), "no upstream keepalive in front of the node"

    (body,) = _directive(text, "client_max_body_size")
    assert _bytes(body) >= LARGEST_BODY
    (read_timeout,) = _directive(text, "proxy_read_timeout")
    assert _seconds(read_timeout) > LONGEST_NODE_WAIT
    assert any("ssl" in listen.split() for listen in _directive(text, "listen"))


#: the paths that make accounts, sessions and challenges: limited per client address
ACCOUNT_PATHS = (
    "/api/auth/register",
    "/api/auth/login",
    "/api/auth/guest",
    "/api/agents/bootstrap",
    "/api/identity/challenge",
    "/api/identity/verify",
    "/api/setup/init",
)


def test_nginx_forwards_the_client_address_and_limits_the_account_paths() -> None:
    """The node limits each client by the address nginx appends to
    ``X-Forwarded-For`` (it trusts nginx on loopback); nginx itself limits
    the account paths per address (``limit_req``), and nothing else."""
    text = NGINX.read_text()
    headers = [" ".join(args.split()) for args in _directive(text, "proxy_set_header")]
    assert "X-Forwarded-For $proxy_add_x_forwarded_for" in headers
    assert "X-Real-IP $remote_addr" in headers
    (zone,) = _directive(text, "limit_req_zone")
    key, name, rate = zone.split()
    assert key == "$binary_remote_addr"
    zone_name = name.removeprefix("zone=").split(":")[0]
    assert re.fullmatch(r"rate=\d+r/[sm]", rate), rate
    (limit,) = _directive(text, "limit_req")
    assert f"zone={zone_name}" in limit.split()
    assert _directive(text, "limit_req_status") == ["429"]
    # the limited location matches exactly the account paths
    (pattern,) = re.findall(r"location\s+~\s+(\S+)\s*\{", _without_comments(text))
    for path in ACCOUNT_PATHS:
        assert re.search(pattern, path), path
    for path in ("/api/rooms", "/ws", "/api/auth/me", "/api/setup/status", "/api/auth/login/x"):
        assert not re.search(pattern, path), path
    # what the node needs to be told, said where the recipe is read
    assert "MESH_TRUSTED_PROXIES=127.0.0.1" in text
    assert "MESH_SETUP_CODE=always" in text


def test_caddy_forwards_the_client_address_and_the_node_is_told_to_trust_it() -> None:
    text = CADDYFILE.read_text()
    assert "MESH_TRUSTED_PROXIES=127.0.0.1" in text
    assert "MESH_SETUP_CODE=always" in text
    assert re.search(r"^\s*header_up\s+X-Real-IP\s+\{remote_host\}", text, re.M)
    # the plugin's matcher, shown commented out, names the same paths
    (pattern,) = re.findall(r"path_regexp\s+(\S+)", text)
    for path in ACCOUNT_PATHS:
        assert re.search(pattern, path), path
    assert not re.search(pattern, "/api/rooms")


def test_operations_tells_how_to_run_behind_a_proxy() -> None:
    text = OPERATIONS.read_text()
    for needed in ("MESH_TRUSTED_PROXIES=127.0.0.1", "MESH_SETUP_CODE", "quart-mesh user unlock"):
        assert needed in text, needed


def _self_signed(folder: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "chat.example.org")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.mark.skipif(shutil.which("nginx") is None, reason="no nginx")
def test_nginx_accepts_the_snippet(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    text = NGINX.read_text()
    text = re.sub(r"^(\s*ssl_certificate)\s+\S+;", rf"\1 {cert};", text, flags=re.M)
    text = re.sub(r"^(\s*ssl_certificate_key)\s+\S+;", rf"\1 {key};", text, flags=re.M)
    (tmp_path / "quart-mesh.conf").write_text(text)
    temp_paths = "\n".join(
        f"    {kind}_temp_path {tmp_path / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path / 'nginx.pid'};\n"
        f"error_log {tmp_path / 'error.log'};\n"
        "events {}\n"
        "http {\n"
        f"    access_log off;\n{temp_paths}\n"
        f"    include {tmp_path / 'quart-mesh.conf'};\n"
        "}\n"
    )
    result = subprocess.run(
        [
            "nginx",
            "-t",
            "-p",
            str(tmp_path),
            "-c",
            str(tmp_path / "nginx.conf"),
            "-e",
            str(tmp_path / "error.log"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_caddy_proxies_to_the_node_with_a_large_enough_body_limit() -> None:
    text = CADDYFILE.read_text()
    _assert_balanced(text, CADDYFILE.name)
    sizes = re.findall(r"^\s*max_size\s+(\S+)", _without_comments(text), re.M)
    assert len(sizes) == 1
    assert _bytes(sizes[0]) >= LARGEST_BODY
    # no timeout on proxied streams: the node's pings and idle timeout decide
    assert "stream_timeout" not in _without_comments(text)


@pytest.mark.skipif(shutil.which("caddy") is None, reason="no caddy")
def test_caddy_adapts_the_caddyfile() -> None:
    result = subprocess.run(
        ["caddy", "adapt", "--config", str(CADDYFILE), "--adapter", "caddyfile"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    handlers = {h["handler"]: h for h in _json_objects(json.loads(result.stdout)) if "handler" in h}
    assert "reverse_proxy" in handlers
    max_size = handlers["request_body"]["max_size"]
    assert isinstance(max_size, int)
    assert max_size >= LARGEST_BODY


def _json_objects(value: object) -> Iterator[dict[str, object]]:
    if isinstance(value, dict):
        yield value
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            yield from _json_objects(item)


# --- docs/operations.md --------------------------------------------------------------


def test_operations_has_the_recipes_sections_and_inlines_the_snippets_verbatim() -> None:
    text = OPERATIONS.read_text()
    headings = re.findall(r"^#{2,3} (.+)$", text, re.M)
    for heading in (
        "Running in a container",
        "Running under systemd",
        "Behind a reverse proxy (TLS and WebSockets)",
        "`MESH_PUBLIC_URL`",
    ):
        assert heading in headings, f"docs/operations.md has no section {heading!r}"
    blocks = _fenced_blocks(text)
    for info, path in (("nginx", NGINX), ("caddy", CADDYFILE)):
        inline = [content for lang, content in blocks if lang == info]
        assert inline == [path.read_text()], f"the {info} block must be {path.name} verbatim"
    for named in re.findall(r"`((?:deploy/[\w.-]+)|Dockerfile|\.dockerignore)`", text):
        assert (ROOT / named).is_file(), f"docs/operations.md names {named}, which is missing"


def _anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings: lower case, punctuation dropped,
    spaces made hyphens."""
    prose = _FENCED.sub("", markdown)
    headings = re.findall(r"^#{1,6} (.+)$", prose, re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def test_the_links_of_operations_lead_somewhere() -> None:
    text = OPERATIONS.read_text()
    problems = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _FENCED.sub("", text)):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        linked = OPERATIONS.parent / path if path else OPERATIONS
        if not linked.is_file():
            problems.append(f"{target}: no file {path}")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked.read_text()):
            problems.append(f"{target}: no heading #{anchor} in {linked.name}")
    assert not problems, "\n".join(problems)


def test_the_documented_docker_run_matches_the_image() -> None:
    runs = [
        line
        for _, content in _fenced_blocks(OPERATIONS.read_text())
        for line in _logical_lines(content)
        if line.startswith("docker run ") and "--name mesh " in line
    ]
    assert len(runs) == 1, runs
    words = shlex.split(runs[0])
    assert "--init" in words
    stop = words[words.index("--stop-timeout") + 1]
    assert float(stop) > LONGEST_STOP, "docker stop must wait out a graceful stop"
    data_dir = _docker_env(_final_stage())["MESH_DATA_DIR"]
    mounts = [words[i + 1] for i, word in enumerate(words) if word == "-v"]
    assert any(mount.endswith(f":{data_dir}") for mount in mounts), mounts


# --- commands and variables named in the docs and recipes -----------------------------

#: where a command may start, then NAME=value assignments, then the program
_INVOCATION = re.compile(
    r"(?:^|[;&|(]\s*|\$\s+|ExecStart=)"
    r"(?:[A-Z][A-Z0-9_]*=\S*\s+)*"
    r"(?:(?:\.{0,2}/)?(?:[\w.-]+/)*quart-mesh|python3?\s+-m\s+quart_mesh)"
    r"(?=\s|$)(?P<args>[^\n#;&|)]*)"
)


def _texts_with_commands() -> Iterator[tuple[str, str]]:
    """``(where, text)`` of every place a command may be written: each line
    of a code block and each inline code span of the docs, and each line of
    the recipe files (comments included: they show commands too)."""
    docs = OPERATIONS.read_text()
    for _, content in _fenced_blocks(docs):
        for line in _logical_lines(content):
            yield "docs/operations.md", line
    prose = _FENCED.sub("", docs)
    for span in re.findall(r"`([^`]+)`", prose):
        yield "docs/operations.md", " ".join(span.split())
    for path in RECIPES:
        for line in _logical_lines(path.read_text()):
            yield path.name, line.lstrip("#").strip()


@dataclass(frozen=True)
class Command:
    #: option name -> whether it takes a value
    options: dict[str, bool]
    positionals: bool


def _run_cli(*args: str) -> str:
    program = Path(sys.executable).with_name("quart-mesh")
    prefix = [str(program)] if program.exists() else [sys.executable, "-m", "quart_mesh"]
    result = subprocess.run(
        [*prefix, *args], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


#: an option in ``--help`` output, and its metavar if it takes a value
_OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)(?:[ =]([A-Z][A-Z0-9_]*))?")


def _command(help_text: str) -> Command:
    options: dict[str, bool] = {}
    for name, metavar in re.findall(_OPTION, help_text):
        options[name] = options.get(name, False) or bool(metavar)
    usage = help_text.split("\n\n")[0]
    without_options = re.sub(r"\[[^\]]*\]", "", usage.removeprefix("usage:"))
    positionals = len(re.findall(r"(?<![\w-])[a-z][\w-]*", without_options)) > 2
    return Command(options, positionals)


def _help(*args: str) -> str:
    """``quart-mesh <args> --help`` as the program prints it, from its parser
    in this process (a process each would take seconds apiece on a busy
    machine; the installed program itself is run once, by :func:`_cli`)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exited:
        cli.main([*args, "--help"])
    assert exited.value.code == 0, out.getvalue()
    return out.getvalue()


@cache
def _cli() -> tuple[Command, dict[str, Command]]:
    """The real command line: ``quart-mesh --help`` and each subcommand's ``--help``."""
    top = _run_cli("--help")
    choices = re.search(r"\{([a-z][\w,-]*)\}", top)
    assert choices, top
    mine = re.search(r"\{([a-z][\w,-]*)\}", _help())
    assert mine, "no subcommands in this source's help"
    assert mine[1] == choices[1], "the installed program is not this source's"
    subcommands: dict[str, Command] = {}
    for name in choices[1].split(","):
        text = _help(name)
        subcommands[name] = _command(text)
        # a subcommand of subcommands (``quart-mesh user create``)
        nested = re.search(r"\{([a-z][\w,-]*)\}", text.split("\n\n")[0])
        for sub in nested[1].split(",") if nested else ():
            subcommands[f"{name} {sub}"] = _command(_help(name, sub))
    return _command(top), subcommands


def _check_invocation(words: list[str]) -> str | None:
    """What is wrong with ``quart-mesh <words>``, or ``None``."""
    top, subcommands = _cli()
    if not words:
        return None
    if words[0].startswith("-"):
        unknown = [w for w in words if w.startswith("-") and w.split("=")[0] not in top.options]
        return f"unknown options {unknown}" if unknown else None
    name, rest = words[0], words[1:]
    if rest and f"{name} {rest[0]}" in subcommands:
        name, rest = f"{name} {rest[0]}", rest[1:]
    if name not in subcommands:
        if rest and not rest[0].startswith("-"):
            return None  # prose, such as a log line: "quart-mesh listening on …"
        return f"no subcommand {name!r} (there are {sorted(subcommands)})"
    command = subcommands[name]
    i = 0
    while i < len(rest):
        word = rest[i]
        if word.startswith("-") and word != "-":  # "-" alone: standard input or output
            option, equals, _ = word.partition("=")
            if option not in command.options:
                return f"{name} has no option {option}"
            takes_value = command.options[option]
            if equals and not takes_value:
                return f"{name} {option} takes no value"
            if takes_value and not equals:
                i += 1  # its value
        elif not command.positionals:
            return f"{name} takes no argument {word!r}"
        i += 1
    return None


def test_every_quart_mesh_command_in_the_docs_and_recipes_exists() -> None:
    checked, problems = 0, []
    for where, text in _texts_with_commands():
        for match in _INVOCATION.finditer(text):
            try:
                words = shlex.split(match["args"])
            except ValueError:
                words = match["args"].split()
            problem = _check_invocation(words)
            checked += 1
            if problem:
                problems.append(f"{where}: {match[0].strip()!r}: {problem}")
    assert checked >= 5, "the commands were not found: is the pattern broken?"
    assert not problems, "\n".join(problems)


class _Recorder(Mapping[str, str]):
    """An empty environment that notes every variable asked for."""

    def __init__(self) -> None:
        self.asked: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.asked.add(key)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def test_every_mesh_variable_in_the_docs_and_recipes_is_read_by_the_node() -> None:
    environ = _Recorder()
    Settings.from_env(environ)
    read = environ.asked
    assert {"MESH_DATA_DIR", "MESH_PUBLIC_URL", "MESH_MAX_UPLOAD_BYTES"} <= read

    problems = []
    for path in (OPERATIONS, *RECIPES):
        for match in re.finditer(r"\bMESH_[A-Z0-9_]+(?P<wildcard>[*<])?", path.read_text()):
            name = match[0].rstrip("*<")
            if match["wildcard"] or name.endswith("_"):
                if not any(variable.startswith(name) for variable in read):
                    problems.append(f"{path.name}: no variable starts with {name}")
            elif name not in read:
                problems.append(f"{path.name}: the node does not read {name}")
    assert not problems, "\n".join(sorted(set(problems)))
