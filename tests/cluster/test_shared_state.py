"""Security state shared by the processes of one mesh (decision 0036): two
real ``quart-mesh serve`` processes on one PostgreSQL database.

A probe found each process keeping its own rate-limit buckets, DID
challenges and federation nonces: the 11th bad login was refused on one
process and tried on the other, a challenge issued by one was unknown to
the other, and a signed request replayed to the other was accepted. Here
each is tried across the two processes, and each holds.

Run with ``--store postgresql`` (skipped otherwise). Every wait is bounded.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from quart_mesh.federation.signing import canonical_string
from quart_mesh.identity import did_from_public_key
from quart_mesh.ids import new_id
from tests.cluster.nodes import database_url, open_nodes, start_node
from tests.helpers import PASSWORD, Mesh, assert_error

pytestmark = pytest.mark.timeout(180)


@asynccontextmanager
async def two_processes(
    tmp_path: Path, env: dict[str, str] | None = None
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """Clients of two processes of one mesh, set up (on the first, before
    the second starts, so that nothing here depends on how the second
    learns of the setup)."""
    data_dir = tmp_path / "mesh-data"
    async with (
        open_nodes(tmp_path, 1, env=env) as [first],
        httpx.AsyncClient(base_url=first.url, timeout=20) as one,
        trio.open_nursery() as nursery,
    ):
        await Mesh(one).setup()
        second = await start_node(nursery, data_dir, database_url(data_dir), env=env)
        try:
            async with httpx.AsyncClient(base_url=second.url, timeout=20) as two:
                yield one, two
        finally:
            with trio.CancelScope(shield=True):
                await second.stop()
            nursery.cancel_scope.cancel()


async def bad_login(http: httpx.AsyncClient, name: str) -> httpx.Response:
    return await http.post("/api/auth/login", json={"name": name, "password": "wrong" * 4})


async def test_bad_logins_spread_over_processes_are_refused_after_the_limit(
    tmp_path: Path,
) -> None:
    """``login_name`` counts the attempts on both: 5 on each, the 11th is
    refused. (10 an hour rather than the default 10 a minute: each attempt
    costs an argon2 check, and on a slow machine ten of them may take long
    enough for the default bucket to refill one.)"""
    env = {"MESH_RATE_LOGIN_NAME": "10/3600"}
    with trio.fail_after(150):
        async with two_processes(tmp_path, env) as (one, two):
            for n in range(10):
                r = await bad_login(one if n % 2 else two, "Owner")
                assert_error(r, 401, "invalid_credentials")
            for http in (one, two):
                r = await bad_login(http, "OWNER")  # casefolded: the same name
                assert_error(r, 429, "rate_limited")
                assert 300 <= int(r.headers["retry-after"]) <= 360
                # the right password is refused too: the name is locked for now
                good = {"name": "owner", "password": PASSWORD}
                assert_error(await http.post("/api/auth/login", json=good), 429, "rate_limited")
            # another name is not affected
            assert_error(await bad_login(two, "someone"), 401, "invalid_credentials")


async def test_registrations_spread_over_processes_are_refused_after_the_limit(
    tmp_path: Path,
) -> None:
    """``registration_address`` counts registrations and guest sessions on both."""
    env = {"MESH_RATE_EXEMPT": "none", "MESH_RATE_REGISTRATION_ADDRESS": "3/3600"}
    with trio.fail_after(150):
        async with two_processes(tmp_path, env) as (one, two):
            for n, http in enumerate((one, two, one)):
                body = {"name": f"user{n}", "password": PASSWORD}
                r = await http.post("/api/auth/register", json=body)
                assert r.status_code == 201, r.text
            for http in (two, one):
                body = {"name": "one-too-many", "password": PASSWORD}
                r = await http.post("/api/auth/register", json=body)
                assert_error(r, 429, "rate_limited")
                assert int(r.headers["retry-after"]) > 60


# -- DID challenges -------------------------------------------------------------


def did_key() -> tuple[Ed25519PrivateKey, str]:
    key = Ed25519PrivateKey.generate()
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return key, did_from_public_key(raw)


async def challenge(http: httpx.AsyncClient, did: str) -> str:
    r = await http.post("/api/identity/challenge", json={"did": did})
    assert r.status_code == 200, r.text
    return str(r.json()["challenge"])


def proof(key: Ed25519PrivateKey, did: str, text: str) -> dict[str, str]:
    signature = base64.urlsafe_b64encode(key.sign(text.encode())).rstrip(b"=").decode()
    return {"did": did, "challenge": text, "signature": signature}


async def test_a_challenge_issued_by_one_process_verifies_on_the_other_once(
    tmp_path: Path,
) -> None:
    with trio.fail_after(150):
        async with two_processes(tmp_path) as (one, two):
            key, did = did_key()
            body = proof(key, did, await challenge(one, did))
            r = await two.post("/api/identity/verify", json=body)
            assert r.status_code == 201, r.text  # an unlinked DID registered
            participant_id = r.json()["participantId"]
            for http in (one, two):
                r = await http.post("/api/identity/verify", json=body)
                assert_error(r, 401, "challenge_used")
            # logging in again, the other way round
            body = proof(key, did, await challenge(two, did))
            r = await one.post("/api/identity/verify", json=body)
            assert r.status_code == 200, r.text
            assert r.json()["participantId"] == participant_id

            # one challenge sent to both processes at once: exactly one wins
            statuses: list[int] = []

            async def attempt(http: httpx.AsyncClient) -> None:
                statuses.append((await http.post("/api/identity/verify", json=body)).status_code)

            for _ in range(3):
                statuses.clear()
                body = proof(key, did, await challenge(one, did))
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(attempt, one)
                    nursery.start_soon(attempt, two)
                assert sorted(statuses) == [200, 401]


# -- federation nonces ----------------------------------------------------------


def signed(
    key: Ed25519PrivateKey,
    did: str,
    path: str,
    body: dict[str, Any],
    *,
    audience: str,
    timestamp: float,
) -> tuple[bytes, dict[str, str]]:
    raw = json.dumps(body).encode()
    ts, nonce = str(int(timestamp)), new_id().lower() + "nonce"
    signature = key.sign(canonical_string("POST", path, ts, nonce, raw, audience))
    return raw, {
        "Content-Type": "application/json",
        "X-Mesh-DID": did,
        "X-Mesh-Timestamp": ts,
        "X-Mesh-Nonce": nonce,
        "X-Mesh-Signature": base64.urlsafe_b64encode(signature).rstrip(b"=").decode(),
    }


async def test_a_signed_request_replayed_to_the_other_process_is_refused(
    tmp_path: Path,
) -> None:
    # a stranger's connection request: the one path a node with no
    # connection here is heard on (its nonce is kept)
    path = "/api/connections/request"
    with trio.fail_after(150):
        async with two_processes(tmp_path) as (one, two):
            audience = (await one.get("/.well-known/mesh-manifest.json")).json()["did"]
            key, did = did_key()
            request = {"did": "did:key:another", "connectionId": new_id()}
            raw, headers = signed(key, did, path, request, audience=audience, timestamp=time.time())
            # let through (then refused: the body names another node)
            r = await one.post(path, content=raw, headers=headers)
            assert_error(r, 400, "invalid_field")
            for http in (two, one):
                assert_error(await http.post(path, content=raw, headers=headers), 401, "replayed")
            # nonces are durable: a request signed before these processes
            # started is judged by its timestamp alone (within the window)
            earlier = time.time() - 120
            raw, headers = signed(key, did, path, request, audience=audience, timestamp=earlier)
            assert_error(await two.post(path, content=raw, headers=headers), 400)
            assert_error(await one.post(path, content=raw, headers=headers), 401, "replayed")
            # outside the window: stale, as before
            stale = time.time() - 400
            raw, headers = signed(key, did, path, request, audience=audience, timestamp=stale)
            assert_error(await one.post(path, content=raw, headers=headers), 401, "stale")
