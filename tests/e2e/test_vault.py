"""The zero-knowledge vault over real sockets.

The end-to-end test runs the node as a real ``quart-mesh serve`` subprocess
(logging at DEBUG), stores an API key encrypted on the client, spawns a
managed bot with the decrypted key, and then searches everything the node
wrote — database, WAL and shared-memory files, the whole data folder, and
its output — for the plaintext key in any common encoding.
"""

from __future__ import annotations

import base64
import secrets
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from quart_mesh.config import Limits, Settings
from quart_mesh.vault_client import VaultError, decrypt, encrypt
from tests import stores
from tests.e2e.test_agents import bot_pids, wait_for
from tests.e2e.test_cli_restart import ServerProcess
from tests.helpers import Mesh, User, assert_error

ENTRIES = "/api/vault/entries"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "mesh-data", limits=Limits(max_vault_entries=3))


def encodings(secret: str) -> dict[str, bytes]:
    """*secret* as it could sit in a file: raw, hex, and base64/base64url at
    every byte alignment (the middle of the encoding, which does not depend on
    neighbouring bytes)."""
    raw = secret.encode()
    forms = {"raw": raw, "hex": raw.hex().encode(), "HEX": raw.hex().upper().encode()}
    for shift in range(3):
        padded = b"\0" * shift + raw
        forms[f"base64+{shift}"] = base64.b64encode(padded)[4:-4]
        forms[f"base64url+{shift}"] = base64.urlsafe_b64encode(padded)[4:-4]
    forms["utf-16"] = secret.encode("utf-16-le")
    return forms


def found_in(data: bytes, forms: dict[str, bytes]) -> list[str]:
    return [name for name, needle in forms.items() if needle in data]


def scan_folder(folder: Path, forms: dict[str, bytes]) -> dict[str, list[str]]:
    hits = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and (names := found_in(path.read_bytes(), forms)):
            hits[str(path.relative_to(folder))] = names
    return hits


async def test_an_api_key_goes_from_the_vault_to_a_bot_and_nowhere_else(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    data_dir = tmp_path / "mesh-data"
    server = ServerProcess(data_dir, env={"MESH_LOG_LEVEL": "DEBUG"})
    url = await server.start(nursery)
    api_key = f"sk-test-{secrets.token_hex(24)}"
    passphrase = f"passphrase-{secrets.token_hex(8)}"
    forms = encodings(api_key)
    forms.update({f"passphrase {k}": v for k, v in encodings(passphrase).items()})
    pids_before = set(bot_pids())
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        blob = await trio.to_thread.run_sync(
            lambda: encrypt(api_key, passphrase, label="openai-main")
        )
        r = await http.post(
            ENTRIES,
            json={"label": "openai-main", "provider": "openai", "blob": blob},
            headers=owner.headers,
        )
        assert r.status_code == 201, r.text
        entry_id = r.json()["entryId"]
        # listed back as stored; decrypted on the client only
        [entry] = (await http.get(ENTRIES, headers=owner.headers)).json()
        assert entry["entryId"] == entry_id
        assert (entry["label"], entry["provider"], entry["blob"]) == ("openai-main", "openai", blob)
        plaintext = await trio.to_thread.run_sync(
            lambda: decrypt(entry["blob"], passphrase, label=entry["label"])
        )
        assert plaintext == api_key

        # the client sends the plaintext once, to spawn a managed bot
        r = await http.post(
            "/api/agents/spawn",
            json={"name": "keyed-echo", "type": "echo", "apiKey": plaintext},
            headers=owner.headers,
        )
        assert r.status_code == 201, r.text
        agent_id = r.json()["agentId"]
        assert api_key not in r.text

        async def agent() -> dict[str, Any]:
            agents = (await http.get("/api/agents", headers=owner.headers)).json()
            return dict(next(a for a in agents if a["agentId"] == agent_id))

        async def running() -> bool:
            return bool((await agent())["status"] == "running")

        await wait_for(running)
        assert set(bot_pids()) - pids_before, "the bot process is running"
        assert api_key not in (await http.get("/api/agents", headers=owner.headers)).text
        assert api_key not in (await http.get("/api/state", headers=owner.headers)).text

        # while it runs: the database, its WAL and shared memory, the whole folder
        # (on PostgreSQL: the data folder, the database's files and the WAL)
        folders = stores.stored_folders(data_dir)
        if stores.backend() == "sqlite":
            stored = {p.name for p in data_dir.iterdir()}
            assert stored >= {"mesh.db", "mesh.db-wal", "mesh.db-shm"}
        assert {f: h for folder in folders for f, h in scan_folder(folder, forms).items()} == {}
        # the scan does see what is stored: the blob itself is in the store
        blob_hits = [scan_folder(folder, {"blob": blob.encode()}) for folder in folders]
        blob_hits = [hits for hits in blob_hits if hits]
        assert blob_hits, "the encrypted blob should be in the database files"

        r = await http.delete(f"/api/agents/{agent_id}", headers=owner.headers)
        assert r.status_code == 200, r.text

        async def no_bot_left() -> bool:
            return not (set(bot_pids()) - pids_before)

        await wait_for(no_bot_left)
        r = await http.delete(f"{ENTRIES}/{entry_id}", headers=owner.headers)
        assert r.status_code == 200, r.text
    assert await server.stop(signal.SIGTERM) == 0
    assert not (set(bot_pids()) - pids_before)

    # after shutdown (WAL checkpointed into the database): still nothing
    assert scan_folder(data_dir, forms) == {}
    assert found_in(server.output, forms) == []
    # the node did log at DEBUG (it logs no request lines, nor bot starts, at any level)
    assert b" DEBUG quart_mesh" in server.output
    assert b"Traceback" not in server.output


async def test_each_participant_sees_only_their_own_entries(mesh: Mesh) -> None:
    owner = await mesh.setup()
    alice = await mesh.register("alice")
    bob = await mesh.register("bob")
    blob = await trio.to_thread.run_sync(lambda: encrypt("sk-alice", "alice's words", label="a"))
    r = await mesh.http.post(ENTRIES, json={"label": "a", "blob": blob}, headers=alice.headers)
    assert r.status_code == 201, r.text
    created = r.json()
    assert set(created) == {"entryId", "label", "provider", "createdAt"}
    assert created["provider"] is None
    entry_id = created["entryId"]
    # bob, the owner too: an empty vault, and alice's entry does not exist for them
    for other in (bob, owner):
        r = await mesh.http.get(ENTRIES, headers=other.headers)
        assert (r.status_code, r.json()) == (200, [])
        r = await mesh.http.delete(f"{ENTRIES}/{entry_id}", headers=other.headers)
        assert_error(r, 404, "entry_not_found")
        assert blob not in r.text
    # unknown and malformed ids look the same
    for bad in ("01ARZ3NDEKTSV4RRFFQ69G5FAV", "nope", entry_id.lower()):
        assert_error(await mesh.http.delete(f"{ENTRIES}/{bad}", headers=alice.headers), 404)
    [listed] = (await mesh.http.get(ENTRIES, headers=alice.headers)).json()
    assert listed == {**created, "blob": blob}
    # a wrong passphrase or label does not decrypt (checked on the client)
    with pytest.raises(VaultError):
        decrypt(blob, "not alice's words", label="a")
    with pytest.raises(VaultError):
        decrypt(blob, "alice's words", label="b")
    # alice deletes hers; then it is gone
    r = await mesh.http.delete(f"{ENTRIES}/{entry_id}", headers=alice.headers)
    assert (r.status_code, r.json()) == (200, {"ok": True, "entryId": entry_id})
    assert (await mesh.http.get(ENTRIES, headers=alice.headers)).json() == []
    assert_error(await mesh.http.delete(f"{ENTRIES}/{entry_id}", headers=alice.headers), 404)


async def test_vault_input_sizes_and_access(mesh: Mesh) -> None:
    await mesh.setup()
    alice = await mesh.register("alice")

    async def add(user: User | None = None, **body: Any) -> httpx.Response:
        headers = (user or alice).headers
        return await mesh.http.post(ENTRIES, json=body, headers=headers)

    for body, status, code in (
        ({"blob": "b"}, 400, "missing_field"),
        ({"label": "l"}, 400, "missing_field"),
        ({"label": 1, "blob": "b"}, 400, "invalid_field"),
        ({"label": "l", "blob": {"x": 1}}, 400, "invalid_field"),
        ({"label": "l", "blob": "b", "provider": 3}, 400, "invalid_field"),
        ({"label": "", "blob": "b"}, 400, "invalid_label"),
        ({"label": "x" * 101, "blob": "b"}, 400, "invalid_label"),
        ({"label": "a\nb", "blob": "b"}, 400, "invalid_label"),
        ({"label": "l", "blob": "b", "provider": ""}, 400, "invalid_provider"),
        ({"label": "l", "blob": "b", "provider": "p" * 65}, 400, "invalid_provider"),
        ({"label": "l", "blob": ""}, 400, "invalid_blob"),
        ({"label": "l", "blob": "a\x00b"}, 400, "invalid_blob"),
        ({"label": "l", "blob": "x" * (16 * 1024 + 1)}, 413, "blob_too_large"),
        ({"label": "l", "blob": "é" * (8 * 1024 + 1)}, 413, "blob_too_large"),
        ({"label": "l", "blob": "x" * (70 * 1024)}, 413, "too_large"),
    ):
        assert_error(await add(**body), status, code)
    r = await mesh.http.post(ENTRIES, content=b"{not json", headers=alice.headers)
    assert_error(r, 400, "invalid_json")
    # the largest blob and label fit
    r = await add(label="é" * 100, blob="x" * (16 * 1024), provider="p" * 64)
    assert r.status_code == 201, r.text
    # at most max_vault_entries (3 here) per participant; others are not affected
    assert (await add(label="two", blob="b")).status_code == 201
    assert (await add(label="three", blob="b")).status_code == 201
    assert_error(await add(label="four", blob="b"), 409, "vault_full")
    bob = await mesh.register("bob")
    assert (await add(bob, label="bobs", blob="b")).status_code == 201
    # no token, a bad token, a guest (spectators keep no vault)
    assert_error(await mesh.http.get(ENTRIES), 401, "unauthorized")
    assert_error(await mesh.http.post(ENTRIES, json={"label": "l", "blob": "b"}), 401)
    bogus = {"Authorization": "Bearer nope"}
    assert_error(await mesh.http.get(ENTRIES, headers=bogus), 401, "invalid_token")
    entry_id = (await mesh.http.get(ENTRIES, headers=alice.headers)).json()[0]["entryId"]
    assert_error(await mesh.http.delete(f"{ENTRIES}/{entry_id}"), 401, "unauthorized")
    guest = await mesh.guest()
    assert_error(await mesh.http.get(ENTRIES, headers=guest.headers), 403, "forbidden")
    assert_error(await add(guest, label="l", blob="b"), 403, "forbidden")
    r = await mesh.http.delete(f"{ENTRIES}/{entry_id}", headers=guest.headers)
    assert_error(r, 403, "forbidden")
    assert len((await mesh.http.get(ENTRIES, headers=alice.headers)).json()) == 3


def test_client_format_round_trips_and_refuses_tampering() -> None:
    """The default format (v2) and the old one (v1), as a client uses them;
    the known-answer vectors are in ``tests/test_vault_client.py``."""
    for version, parts in (("v2", 5), ("v1", 4)):
        blob = encrypt("sk-ünïcode-key", "pass phrase", label="label ✓", version=version)
        *head, salt, nonce, sealed = blob.split(".")
        assert head[0] == version
        assert len(head) + 3 == parts
        assert len(base64.urlsafe_b64decode(salt + "==")) == 16
        assert len(base64.urlsafe_b64decode(nonce + "==")) == 12
        assert "=" not in blob
        assert decrypt(blob, "pass phrase", label="label ✓") == "sk-ünïcode-key"
        flipped = sealed[:-2] + ("A" if sealed[-2] != "A" else "B") + sealed[-1]
        prefix = ".".join(head)
        for bad in (
            f"{prefix}.{salt}.{nonce}.{flipped}",
            f"{prefix}.{salt}.{nonce}",
            f"{prefix}.{salt}.{salt}.{sealed}",
            f"v3.{salt}.{nonce}.{sealed}",
            "",
        ):
            with pytest.raises(VaultError):
                decrypt(bad, "pass phrase", label="label ✓")
    assert encrypt("k", "p", label="l").startswith("v2.600000.")
    # a fresh salt and nonce every time
    assert encrypt("k", "p", label="l") != encrypt("k", "p", label="l")
    with pytest.raises(ValueError, match="passphrase"):
        encrypt("k", "", label="l")
