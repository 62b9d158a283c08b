"""A request answered before its body's end (401 before the body is read,
413 at the limit), on a real served node: behind a real nginx (the shipped
recipe, ``deploy/nginx.conf``) the client gets the node's answer, not 502;
straight to the node, a body far beyond what it accepts is not read to its
end.

When the node closed such a connection with the body unread, the kernel
reset it, and nginx, still sending the body, answered 502 (a fifth of the
time here, before the fix). Now the node reads and discards the rest of the
body first, within bounds (``quart_mesh.server.DRAIN_TIMEOUT`` and
``DRAIN_MARGIN``; docs/operations.md, "Behind a reverse proxy").

nginx is Debian's (``apt-get install nginx``; ``.ci/run`` installs it):
without it the proxy tests are skipped, unless ``MESH_REQUIRE_NGINX`` is
set (CI), which makes them fail. It inherits its listening socket (port 0,
loopback) from the test, so connections wait in the socket's backlog until
nginx is ready: nothing is polled.

Loopback only, port 0, no sleeps, a time cap on every test.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import ssl
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

from quart_mesh import Settings
from quart_mesh.app import largest_body
from quart_mesh.server import DRAIN_MARGIN
from tests.helpers import Mesh, User, assert_error
from tests.test_deploy_recipes import NGINX, _self_signed

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

MiB = 1024 * 1024
#: tries per kind of request through nginx (a fifth of them failed before the fix)
TRIES = 20


def _require_nginx() -> str:
    nginx = shutil.which("nginx") or (
        "/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None
    )
    if nginx is None:
        if os.environ.get("MESH_REQUIRE_NGINX"):
            pytest.fail("nginx is required here (MESH_REQUIRE_NGINX): apt-get install nginx")
        pytest.skip("no nginx (apt-get install nginx); .ci/run installs it")
    return nginx


def _recipe(node_url: str, address: str, cert: Path, key: Path) -> str:
    """``deploy/nginx.conf`` as shipped, but listening on *address* (TLS, as
    shipped) and passing to the node at *node_url*; the port-80 redirect and
    the IPv6 listener are left out."""
    text = NGINX.read_text()
    text, redirects = re.subn(r"\nserver \{\s*listen 80;.*\Z", "\n", text, flags=re.S)
    assert redirects == 1, "the recipe's port-80 server block moved"
    text = re.sub(r"^\s*listen \[::\]:\d+ ssl;\n", "", text, flags=re.M)
    text, listens = re.subn(r"listen 443 ssl;", f"listen {address} ssl;", text)
    assert listens == 1
    text, passes = re.subn(r"proxy_pass http://127\.0\.0\.1:8000;", f"proxy_pass {node_url};", text)
    assert passes >= 1
    text = re.sub(r"^(\s*ssl_certificate)\s+\S+;", rf"\1 {cert};", text, flags=re.M)
    return re.sub(r"^(\s*ssl_certificate_key)\s+\S+;", rf"\1 {key};", text, flags=re.M)


@pytest.fixture
async def proxy(
    base_url: str, tmp_path: Path, nursery: trio.Nursery
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a real nginx running the shipped recipe in front of the node."""
    nginx = _require_nginx()
    folder = tmp_path / "nginx"
    folder.mkdir()
    log = folder / "error.log"
    cert, key = _self_signed(folder)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    host, port = listener.getsockname()
    (folder / "quart-mesh.conf").write_text(_recipe(base_url, f"{host}:{port}", cert, key))
    temp_paths = "\n".join(
        f"    {kind}_temp_path {folder / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    (folder / "nginx.conf").write_text(
        # as root, nginx's workers would be "nobody", who cannot reach tmp_path
        ("user root;\n" if os.geteuid() == 0 else "")
        + "daemon off;\n"
        + f"pid {folder / 'nginx.pid'};\n"
        + f"error_log {log} info;\n"
        + "events {}\n"
        + "http {\n"
        + f"    access_log off;\n{temp_paths}\n"
        + f"    include {folder / 'quart-mesh.conf'};\n"
        + "}\n"
    )
    process = await nursery.start(
        partial(
            trio.run_process,
            [nginx, "-p", str(folder), "-c", str(folder / "nginx.conf"), "-e", str(log)],
            check=False,
            # nginx takes a listening socket from its environment (as on its
            # own binary upgrade): connections wait in the backlog until it
            # serves them
            env={**os.environ, "NGINX": f"{listener.fileno()};"},
            pass_fds=(listener.fileno(),),
        )
    )
    listener.close()  # nginx has its own copy
    context = ssl.create_default_context(cafile=str(cert))
    context.check_hostname = False  # the recipe's name, chat.example.org
    try:
        async with httpx.AsyncClient(
            base_url=f"https://{host}:{port}", verify=context, timeout=30
        ) as client:
            yield client
    finally:
        process.terminate()
        with trio.fail_after(10):
            await process.wait()
        print(log.read_text(errors="replace")[-4000:])  # shown on failure


async def _room(mesh: Mesh) -> tuple[User, str]:
    owner = await mesh.setup()
    room_id = (await mesh.create_room(owner, "big"))["roomId"]
    return owner, room_id


async def test_nginx_passes_on_the_413_of_a_body_over_the_limit(
    mesh: Mesh, proxy: httpx.AsyncClient, settings: Settings
) -> None:
    owner, room_id = await _room(mesh)
    # over max_body_bytes (refused by its Content-Length, before it is
    # read), under the recipe's client_max_body_size
    for size in (2 * MiB, 8 * MiB):
        body = b'{"content": "' + b"x" * size + b'"}'
        assert len(body) > settings.limits.max_body_bytes
        for _ in range(TRIES // 2):
            r = await proxy.post(
                f"/api/rooms/{room_id}/messages",
                content=body,
                headers={**owner.headers, "Content-Type": "application/json"},
            )
            assert_error(r, 413, "too_large")
    # the node goes on serving through the proxy
    r = await proxy.post(
        f"/api/rooms/{room_id}/messages", json={"content": "after"}, headers=owner.headers
    )
    assert r.status_code == 201, r.text


async def test_nginx_passes_on_the_401_of_an_upload_without_a_token(
    mesh: Mesh, proxy: httpx.AsyncClient
) -> None:
    """The case of the operations notes: a 10 MiB upload without a token."""
    await mesh.setup()
    data = b"\x00" * (10 * MiB)
    for _ in range(TRIES // 2):
        r = await proxy.post("/api/upload", files={"file": ("big.bin", data)})
        assert_error(r, 401, "unauthorized")


async def test_a_body_far_beyond_the_limit_is_not_read_to_its_end(
    base_url: str, mesh: Mesh, settings: Settings
) -> None:
    """Straight to the node: a 50 MiB body is refused (413, by its
    Content-Length) and read at most to the drain's bound, then the
    connection is cut; the sender could not hand over the rest."""
    owner, room_id = await _room(mesh)
    size = 50 * MiB
    bound = largest_body(settings) + DRAIN_MARGIN
    host, port = base_url.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    head = (
        f"POST /api/rooms/{room_id}/messages HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {owner.token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {size}\r\n\r\n"
    ).encode()
    chunk = b"x" * (256 * 1024)
    sent = 0
    received = bytearray()

    async def send() -> None:
        nonlocal sent
        try:
            await stream.send_all(head)
            while sent < size:
                await stream.send_all(chunk)
                sent += len(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the node cut the connection

    async def receive() -> None:
        try:
            while data := await stream.receive_some(65536):
                received.extend(data)
        except trio.BrokenResourceError:
            pass

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            nursery.start_soon(receive)
    await stream.aclose()
    answer = bytes(received)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert b"connection: close" in answer.lower()
    assert b'"code":"too_large"' in answer, answer[:300]
    # what the sender handed over: what the node read (at most the bound,
    # after the head) plus what the two sockets' buffers held
    assert sent < size, "the node read the whole 50 MiB body"
    assert sent < bound + 16 * MiB, (sent / MiB, bound / MiB)
    r = await mesh.http.post(
        f"/api/rooms/{room_id}/messages", json={"content": "after"}, headers=owner.headers
    )
    assert r.status_code == 201, r.text
