"""The public registry and the heartbeat between real nodes (``python -m
quart_mesh serve`` subprocesses): B is the registry (its operator turned it
on; loopback addresses allowed, as in a lab), A a public mesh, C a private
one; both A and C have ``MESH_REGISTRY_URL`` set to B. What a registry
refuses is in ``test_registry_checks.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from quart_mesh._version import __version__
from quart_mesh.config import Settings
from quart_mesh.errors import ConfigError
from tests.e2e.test_cli_restart import ServerProcess
from tests.e2e.test_federation import _key, _signed
from tests.helpers import Mesh, assert_error

pytestmark = pytest.mark.timeout(60)

PATH = "/api/meshes/heartbeat"


async def _listed(http: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    r = await http.get("/api/meshes/public")
    assert r.status_code == 200, r.text
    return {entry["did"]: entry for entry in r.json()}


async def _until(http: httpx.AsyncClient, did: str, *, present: bool) -> dict[str, Any] | None:
    """Poll the registry until *did* is (or is no longer) listed."""
    while True:
        entry = (await _listed(http)).get(did)
        if (entry is not None) == present:
            return entry
        await trio.sleep(0.1)


async def test_heartbeat_lists_public_meshes(tmp_path: Path, nursery: trio.Nursery) -> None:
    with trio.fail_after(45):
        registry = ServerProcess(
            tmp_path / "b",
            env={
                "MESH_REGISTRY_ENABLED": "true",
                "MESH_OUTBOUND_ALLOW_PRIVATE": "true",
                "MESH_REGISTRY_TTL": "2",
                # A beats twice a second here, not every 300 s
                "MESH_RATE_REGISTRY_DID": "1000/1min",
            },
        )
        url_b = await registry.start(nursery)
        sender_env = {"MESH_REGISTRY_URL": url_b, "MESH_HEARTBEAT_INTERVAL": "0.5"}
        node_a = ServerProcess(tmp_path / "a", env=sender_env)
        node_c = ServerProcess(tmp_path / "c", env=sender_env)
        url_a = await node_a.start(nursery)
        url_c = await node_c.start(nursery)
        async with (
            httpx.AsyncClient(base_url=url_a, timeout=10) as a,
            httpx.AsyncClient(base_url=url_b, timeout=10) as b,
            httpx.AsyncClient(base_url=url_c, timeout=10) as c,
        ):
            # (nothing is sent before setup: tests/federation/test_heartbeat.py)
            assert await _listed(b) == {}

            owner_a = await Mesh(a).setup(meshName="Mesh A", description="the first mesh")
            await Mesh(a).register("bob")
            r = await a.post("/api/agents/bootstrap", json={"name": "helper", "type": "simple"})
            assert r.status_code == 201, r.text
            await Mesh(c).setup(meshName="Mesh C", visibility="private")
            manifest_a = (await a.get("/.well-known/mesh-manifest.json")).json()
            did_a = manifest_a["did"]
            did_c = (await c.get("/.well-known/mesh-manifest.json")).json()["did"]
            manifest_b = (await b.get("/.well-known/mesh-manifest.json")).json()
            did_b = manifest_b["did"]
            assert manifest_b["federation"]["isRegistry"] is True
            assert manifest_a["federation"] == {
                "enabled": True,
                "policy": "manual",
                "registry": url_b,
                "isRegistry": False,
            }

            # A appears, with its counts, once a heartbeat after the bot came in
            with trio.fail_after(5):
                while True:
                    entry = await _until(b, did_a, present=True)
                    assert entry is not None
                    if entry["bots"] == 1:
                        break
                    await trio.sleep(0.1)
            assert {k: v for k, v in entry.items() if k != "lastSeen"} == {
                "name": "Mesh A",
                "description": "the first mesh",
                "url": url_a,
                "did": did_a,
                "members": 2,
                "bots": 1,
                "version": __version__,
            }
            assert entry["lastSeen"].endswith("Z")
            # C is private: never listed
            assert did_c not in await _listed(b)

            # signatures: unsigned, forged, and a body naming another node
            body = {"did": did_a, "name": "Evil", "url": "http://evil.test", "status": "ok"}
            body |= {"description": "", "members": 1, "bots": 0, "version": "x"}
            assert_error(await b.post(PATH, json=body), 401, "unsigned")
            forger, forger_did = _key()
            raw, headers = _signed(forger, did_a, PATH, body, audience=did_b)
            assert_error(await b.post(PATH, content=raw, headers=headers), 401, "bad_signature")
            raw, headers = _signed(forger, forger_did, PATH, body, audience=did_b)
            assert_error(await b.post(PATH, content=raw, headers=headers), 400, "invalid_field")
            assert (await _listed(b))[did_a]["name"] == "Mesh A"
            # fields are checked
            mine = body | {"did": forger_did}
            for bad, code in [
                ({"url": "ftp://x.test"}, "invalid_url"),
                ({"members": -1}, "invalid_field"),
                ({"bots": "3"}, "invalid_field"),
                ({"name": "n" * 201}, "invalid_field"),
                ({"status": "maybe"}, "invalid_field"),
            ]:
                raw, headers = _signed(forger, forger_did, PATH, mine | bad, audience=did_b)
                r = await b.post(PATH, content=raw, headers=headers)
                assert_error(r, 400, code)
            # a fresh key is not listed: its url must serve a manifest with its DID
            raw, headers = _signed(forger, forger_did, PATH, mine, audience=did_b)
            r = await b.post(PATH, content=raw, headers=headers)
            assert_error(r, 400, "manifest_unreachable")  # evil.test does not resolve
            raw, headers = _signed(forger, forger_did, PATH, mine | {"url": url_a}, audience=did_b)
            r = await b.post(PATH, content=raw, headers=headers)
            assert_error(r, 400, "manifest_mismatch")  # A's URL serves A's DID
            assert set(await _listed(b)) == {did_a}
            assert (await _listed(b))[did_a]["url"] == url_a
            withdrawn = {"did": forger_did, "status": "withdrawn"}
            raw, headers = _signed(forger, forger_did, PATH, withdrawn, audience=did_b)
            assert (await b.post(PATH, content=raw, headers=headers)).status_code == 200
            assert forger_did not in await _listed(b)

            # A turns private: it withdraws at once (well within the TTL); public again: back
            r = await a.put(
                "/api/admin/mesh/settings", json={"visibility": "private"}, headers=owner_a.headers
            )
            assert r.status_code == 200, r.text
            with trio.fail_after(1.5):
                await _until(b, did_a, present=False)
            r = await a.put(
                "/api/admin/mesh/settings", json={"visibility": "public"}, headers=owner_a.headers
            )
            assert r.status_code == 200, r.text
            with trio.fail_after(3):
                await _until(b, did_a, present=True)

            # A stops: it drops out once the TTL has passed
            assert await node_a.stop() == 0
            started = trio.current_time()
            with trio.fail_after(5):
                await _until(b, did_a, present=False)
            assert trio.current_time() - started > 1
            assert did_c not in await _listed(b)
        output = node_a.output + registry.output + node_c.output
        assert b"Traceback" not in output, output.decode(errors="replace")
        await node_c.stop()
        await registry.stop()


async def test_heartbeat_failures_do_not_stop_the_node(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """A registry that is down: the node keeps serving and logs the failures."""
    with trio.fail_after(30):
        env = {"MESH_REGISTRY_URL": "http://127.0.0.1:9", "MESH_HEARTBEAT_INTERVAL": "0.2"}
        node = ServerProcess(tmp_path / "a", env=env)
        url = await node.start(nursery)
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            await Mesh(http).setup()
            await trio.sleep(0.8)
            r = await http.get("/api/health")
            assert r.status_code == 200
            assert json.loads(r.content)["ok"] is True
        assert await node.stop() == 0
        assert b"heartbeat to http://127.0.0.1:9 failed" in node.output
        assert b"Traceback" not in node.output


def test_registry_settings_from_env() -> None:
    settings = Settings.from_env(
        {
            "MESH_REGISTRY_URL": "https://registry.example/",
            "MESH_HEARTBEAT_INTERVAL": "0.5",
            "MESH_REGISTRY_TTL": "2",
        }
    )
    assert settings.registry_url == "https://registry.example"
    assert (settings.heartbeat_interval, settings.registry_ttl) == (0.5, 2.0)
    assert Settings.from_env({}).registry_url is None
    for bad in ("ftp://registry.example", "registry.example", "http://"):
        with pytest.raises(ConfigError, match="MESH_REGISTRY_URL"):
            Settings.from_env({"MESH_REGISTRY_URL": bad})
    with pytest.raises(ConfigError, match="MESH_HEARTBEAT_INTERVAL"):
        Settings.from_env({"MESH_HEARTBEAT_INTERVAL": "-1"})


def test_registry_role_settings_from_env() -> None:
    """Being a registry is off unless the operator turns it on; so are private addresses."""
    default = Settings.from_env({})
    assert (default.registry_enabled, default.outbound_allow_private) == (False, False)
    settings = Settings.from_env(
        {
            "MESH_REGISTRY_ENABLED": "true",
            "MESH_OUTBOUND_ALLOW_PRIVATE": "1",
            "MESH_REGISTRY_VERIFY_TTL": "60",
            "MESH_REGISTRY_FETCH_TIMEOUT": "2.5",
            "MESH_REGISTRY_MANIFEST_MAX_BYTES": "4096",
            "MESH_REGISTRY_FETCH_CONCURRENCY": "2",
            "MESH_RATE_REGISTRY_DID": "3/1min",
            "MESH_RATE_REGISTRY_ADDRESS": "5/1h",
        }
    )
    assert (settings.registry_enabled, settings.outbound_allow_private) == (True, True)
    assert (settings.registry_verify_ttl, settings.registry_fetch_timeout) == (60.0, 2.5)
    assert settings.registry_manifest_max_bytes == 4096
    assert settings.registry_fetch_concurrency == 2
    assert str(settings.rate_limits.registry_did) == "3/60s"
    assert str(settings.rate_limits.registry_address) == "5/3600s"
    for name, bad in [
        ("MESH_REGISTRY_ENABLED", "maybe"),
        ("MESH_REGISTRY_VERIFY_TTL", "-1"),
        ("MESH_REGISTRY_MANIFEST_MAX_BYTES", "0"),
    ]:
        with pytest.raises(ConfigError, match=name):
            Settings.from_env({name: bad})
