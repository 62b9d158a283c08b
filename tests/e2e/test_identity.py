"""DID identity over real sockets: challenge, signature login, linked keys.

Keys are made and signatures computed with PyNaCl (libsodium), and the
``did:key`` is encoded here from the did:key method's definition, so neither
depends on the node's own Ed25519 or base58 code.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
import trio
from nacl.signing import SigningKey

from quart_mesh import Settings, create_app, serve
from quart_mesh.config import Limits, Rate, RateLimits
from tests.helpers import Mesh, User, assert_error, connect

_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def base58btc(data: bytes) -> str:
    number = int.from_bytes(data, "big")
    digits = []
    while number:
        number, rest = divmod(number, 58)
        digits.append(_B58[rest])
    leading = len(data) - len(data.lstrip(b"\0"))
    return "1" * leading + "".join(reversed(digits))


def did_key(key: SigningKey, codec: bytes = b"\xed\x01") -> str:
    """did:key:z + base58btc(multicodec ed25519-pub (0xed 0x01) + 32-byte key)."""
    return "did:key:z" + base58btc(codec + bytes(key.verify_key))


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def sign(key: SigningKey, challenge: str, *, encoding: str = "b64url") -> str:
    signature = key.sign(challenge.encode("utf-8")).signature
    if encoding == "b64":
        return base64.b64encode(signature).decode()
    return b64url(signature)


async def get_challenge(http: httpx.AsyncClient, did: str) -> str:
    r = await http.post("/api/identity/challenge", json={"did": did})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["expiresAt"].endswith("Z")
    return str(body["challenge"])


async def verify(http: httpx.AsyncClient, key: SigningKey, **extra: Any) -> httpx.Response:
    did = did_key(key)
    challenge = await get_challenge(http, did)
    body = {"did": did, "challenge": challenge, "signature": sign(key, challenge), **extra}
    return await http.post("/api/identity/verify", json=body)


async def store_key(
    http: httpx.AsyncClient, user: User, key: SigningKey, blob: str, **extra: Any
) -> httpx.Response:
    did = did_key(key)
    challenge = await get_challenge(http, did)
    body = {
        "did": did,
        "encryptedKey": blob,
        "challenge": challenge,
        "signature": sign(key, challenge),
        **extra,
    }
    return await http.post("/api/identity/store-key", json=body, headers=user.headers)


def as_user(body: dict[str, Any]) -> User:
    assert set(body) >= {"token", "participantId", "name", "created"}
    return User(body["participantId"], body["name"], body["token"])


async def test_an_agent_registers_by_signature_and_logs_in_again(base_url: str, mesh: Mesh) -> None:
    key = SigningKey.generate()
    did = did_key(key)
    # before setup, nothing is issued
    r = await mesh.http.post("/api/identity/challenge", json={"did": did})
    assert_error(r, 403, "not_initialized")
    owner = await mesh.setup()
    node_did = (await mesh.http.get("/.well-known/mesh-manifest.json")).json()["did"]

    challenge = await get_challenge(mesh.http, did)
    # the challenge names this node, so a signature cannot be replayed to another
    assert challenge.startswith(f"mesh-challenge:{node_did}:")
    assert challenge != await get_challenge(mesh.http, did)
    # standard base64 with padding is accepted as well as base64url
    r = await mesh.http.post(
        "/api/identity/verify",
        json={
            "did": did,
            "challenge": challenge,
            "signature": sign(key, challenge, encoding="b64"),
        },
    )
    assert r.status_code == 201, r.text
    first = r.json()
    assert first["created"] is True
    assert first["name"] == "did-" + bytes(key.verify_key).hex()[:12]
    agent = as_user(first)

    profile = (await mesh.http.get("/api/auth/me", headers=agent.headers)).json()
    assert (profile["participantId"], profile["kind"], profile["type"], profile["role"]) == (
        agent.participant_id,
        "bot",
        "nanoclaw",
        "agent",
    )
    agents = (await mesh.http.get("/api/agents", headers=owner.headers)).json()
    assert [(a["agentId"], a["managed"]) for a in agents] == [(agent.participant_id, False)]
    # the same DID logs in to the same participant, with a new token
    r = await verify(mesh.http, key, name="ignored-for-known-dids")
    assert r.status_code == 200, r.text
    again = as_user(r.json())
    assert r.json()["created"] is False
    assert (again.participant_id, again.name) == (agent.participant_id, agent.name)
    assert again.token != agent.token
    # the token works on the WebSocket like any other
    room_id = (await mesh.create_room(owner, "signed"))["roomId"]
    await mesh.join(again, room_id)
    async with connect(base_url, again) as ws:
        await mesh.send(owner, room_id, "hello, key holder")
        await ws.expect("message", content="hello, key holder")
    # a DID that registers with a chosen name
    named = SigningKey.generate()
    r = await verify(mesh.http, named, name="keyed-bot")
    assert r.status_code == 201, r.text
    assert r.json()["name"] == "keyed-bot"
    # it logged in by DID and stored no key: retrieve-key shows the DID, no blob
    r = await mesh.http.get("/api/identity/retrieve-key", headers=as_user(r.json()).headers)
    assert r.status_code == 200, r.text
    assert (r.json()["did"], r.json()["encryptedKey"]) == (did_key(named), None)
    assert r.json()["publicKey"] == b64url(bytes(named.verify_key))


async def test_closed_meshes_refuse_unknown_dids_but_not_linked_ones(mesh: Mesh) -> None:
    owner = await mesh.setup(registrationMode="closed")
    stranger = SigningKey.generate()
    assert_error(await verify(mesh.http, stranger), 403, "registration_closed")
    # the owner links a DID (with a proof), then logs in with it
    owner_key = SigningKey.generate()
    r = await store_key(mesh.http, owner, owner_key, "opaque-blob")
    assert r.status_code == 200, r.text
    r = await verify(mesh.http, owner_key)
    assert r.status_code == 200, r.text
    assert r.json()["created"] is False
    session = as_user(r.json())
    assert (session.participant_id, session.name) == (owner.participant_id, "owner")
    me = (await mesh.http.get("/api/auth/me", headers=session.headers)).json()
    assert (me["kind"], me["role"]) == ("human", "owner")
    participants = (await mesh.http.get("/api/participants", headers=owner.headers)).json()
    assert len(participants) == 1  # the stranger was not registered


async def test_failed_attempts_consume_the_challenge(mesh: Mesh) -> None:
    await mesh.setup()
    key, other = SigningKey.generate(), SigningKey.generate()
    did = did_key(key)

    async def attempt(challenge: str, signature: str, who: str = did) -> httpx.Response:
        body = {"did": who, "challenge": challenge, "signature": signature}
        return await mesh.http.post("/api/identity/verify", json=body)

    # a signature by another key
    challenge = await get_challenge(mesh.http, did)
    assert_error(await attempt(challenge, sign(other, challenge)), 401, "invalid_signature")
    # the challenge is gone, even with the right signature now
    assert_error(await attempt(challenge, sign(key, challenge)), 401, "challenge_used")
    # a signature over something else, a malformed one, an empty one
    for bad in (
        sign(key, challenge + "x"),
        "not base64 !",
        b64url(b"short"),
        "A" * 300,
    ):
        fresh = await get_challenge(mesh.http, did)
        assert_error(await attempt(fresh, bad), 401, "invalid_signature")
    # a challenge issued for another DID
    theirs = await get_challenge(mesh.http, did_key(other))
    assert_error(await attempt(theirs, sign(key, theirs)), 401, "challenge_mismatch")
    assert_error(await attempt(theirs, sign(other, theirs), did_key(other)), 401, "challenge_used")
    # a challenge the node never issued
    forged = "mesh-challenge:did:key:z6Mkfake:" + "A" * 43
    assert_error(await attempt(forged, sign(key, forged)), 401, "unknown_challenge")
    assert_error(await attempt("x" * 5000, sign(key, "x")), 401, "unknown_challenge")
    # a successful login consumes it too
    challenge = await get_challenge(mesh.http, did)
    assert (await attempt(challenge, sign(key, challenge))).status_code == 201
    assert_error(await attempt(challenge, sign(key, challenge)), 401, "challenge_used")
    # bad input is refused before the challenge is touched: it still works afterwards
    challenge = await get_challenge(mesh.http, did)
    r = await mesh.http.post(
        "/api/identity/verify",
        json={"did": did, "challenge": challenge, "signature": sign(key, challenge), "name": 5},
    )
    assert_error(r, 400, "invalid_field")
    assert (await attempt(challenge, sign(key, challenge))).status_code == 200
    # a bad name is refused before the proof; a taken one only after it
    fresh_key = SigningKey.generate()
    fresh_challenge = await get_challenge(mesh.http, did_key(fresh_key))
    body = {
        "did": did_key(fresh_key),
        "challenge": fresh_challenge,
        "signature": sign(fresh_key, fresh_challenge),
        "name": "a b",
    }
    assert_error(await mesh.http.post("/api/identity/verify", json=body), 400, "invalid_name")
    body["name"] = "owner"
    assert_error(await mesh.http.post("/api/identity/verify", json=body), 409, "name_taken")
    body["name"] = "free-name"
    assert_error(await mesh.http.post("/api/identity/verify", json=body), 401, "challenge_used")


async def test_malformed_dids_and_bodies(mesh: Mesh) -> None:
    assert_error(
        await mesh.http.post(
            "/api/identity/verify", json={"did": "did:key:z6Mk", "challenge": "c", "signature": "s"}
        ),
        403,
        "not_initialized",
    )
    await mesh.setup()
    key = SigningKey.generate()
    good = did_key(key)
    for did in (
        "",
        "did:web:example.com",
        "did:key:" + good[len("did:key:") :].replace("z", "", 1),  # no multibase prefix
        "did:key:z",
        "did:key:z0OIl" + good[13:],  # outside the base58 alphabet
        did_key(key, codec=b"\xe7\x01"),  # a secp256k1 multicodec, not Ed25519
        "did:key:z" + base58btc(b"\xed\x01" + bytes(31)),  # 31-byte key
        good + "1",
        good + "x" * 500,
        "did:key:z6Mk\x00",
    ):
        r = await mesh.http.post("/api/identity/challenge", json={"did": did})
        assert_error(r, 400, "invalid_did")
        body = {"did": did, "challenge": "c", "signature": "s"}
        assert_error(await mesh.http.post("/api/identity/verify", json=body), 400, "invalid_did")
    bodies: tuple[tuple[dict[str, Any], str], ...] = (
        ({}, "missing_field"),
        ({"did": 7}, "invalid_field"),
        ({"did": [good]}, "invalid_field"),
    )
    for bad_body, code in bodies:
        r = await mesh.http.post("/api/identity/challenge", json=bad_body)
        assert_error(r, 400, code)
    bodies = (
        ({"did": good, "challenge": "c"}, "missing_field"),
        ({"did": good, "signature": "s"}, "missing_field"),
        ({"did": good, "challenge": 1, "signature": "s"}, "invalid_field"),
    )
    for bad_body, code in bodies:
        r = await mesh.http.post("/api/identity/verify", json=bad_body)
        assert_error(r, 400, code)
    r = await mesh.http.post("/api/identity/verify", content=b"[1, 2]")
    assert_error(r, 400, "invalid_json")


async def test_expired_challenges(tmp_path: Path, nursery: trio.Nursery) -> None:
    settings = Settings(data_dir=tmp_path / "short", limits=Limits(did_challenge_ttl_seconds=1))
    url: str = await nursery.start(
        lambda task_status: serve(create_app(settings), port=0, task_status=task_status)
    )
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        await mesh.setup()
        key = SigningKey.generate()
        did = did_key(key)
        challenge = await get_challenge(http, did)
        await trio.sleep(1.1)  # real time must pass: the node checks the clock
        body = {"did": did, "challenge": challenge, "signature": sign(key, challenge)}
        assert_error(await http.post("/api/identity/verify", json=body), 401, "challenge_expired")
        assert_error(await http.post("/api/identity/verify", json=body), 401, "challenge_used")
        # a fresh one works
        assert (await verify(http, key)).status_code == 201


async def test_store_and_retrieve_the_encrypted_key(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    alice = await mesh.register("alice")
    bob = await mesh.register("bob")
    key = SigningKey.generate()
    did = did_key(key)
    retrieve = "/api/identity/retrieve-key"
    assert_error(await mesh.http.get(retrieve, headers=alice.headers), 404, "key_not_found")
    # an opaque blob, kept byte for byte (non-ASCII, spaces, JSON-looking text)
    blob = 'v1.salt.nonce.ciphertext  é✓ {"not": "parsed"} \\n ' + "Z" * 3000
    r = await store_key(mesh.http, alice, key, blob, publicKey=b64url(bytes(key.verify_key)))
    assert r.status_code == 200, r.text
    assert r.json()["did"] == did
    assert "encryptedKey" not in r.json()
    r = await mesh.http.get(retrieve, headers=alice.headers)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["encryptedKey"] == blob
    assert got["encryptedKey"].encode() == blob.encode()
    assert (got["did"], got["publicKey"]) == (did, b64url(bytes(key.verify_key)))
    # only the owner: bob has none, and nobody can read alice's
    assert_error(await mesh.http.get(retrieve, headers=bob.headers), 404, "key_not_found")
    assert blob not in (await mesh.http.get(retrieve, headers=owner.headers)).text
    assert_error(await mesh.http.get(retrieve), 401, "unauthorized")
    # the DID logs in to alice now
    r = await verify(mesh.http, key)
    assert r.status_code == 200, r.text
    assert r.json()["participantId"] == alice.participant_id
    async with connect(base_url, as_user(r.json())):
        pass

    # bob cannot link alice's DID without her key ...
    challenge = await get_challenge(mesh.http, did)
    body = {
        "did": did,
        "encryptedKey": "mine",
        "challenge": challenge,
        "signature": sign(SigningKey.generate(), challenge),
    }
    r = await mesh.http.post("/api/identity/store-key", json=body, headers=bob.headers)
    assert_error(r, 403, "invalid_signature")
    # ... and even with it, a DID belongs to one participant
    assert_error(await store_key(mesh.http, bob, key, "mine"), 409, "did_taken")
    assert (await mesh.http.get(retrieve, headers=alice.headers)).json()["encryptedKey"] == blob

    # publicKey, if given, must be the DID's key (base64, hex or multibase)
    raw = bytes(key.verify_key)
    for form in (base64.b64encode(raw).decode(), raw.hex(), "z" + base58btc(b"\xed\x01" + raw)):
        assert (await store_key(mesh.http, alice, key, "v2", publicKey=form)).status_code == 200
    other = bytes(SigningKey.generate().verify_key)
    r = await store_key(mesh.http, alice, key, "v3", publicKey=b64url(other))
    assert_error(r, 400, "public_key_mismatch")
    for bad in ("nope", "", b64url(raw[:31]), "z" + "0" * 40):
        r = await store_key(mesh.http, alice, key, "v3", publicKey=bad)
        assert_error(r, 400, "invalid_public_key")
    assert (await mesh.http.get(retrieve, headers=alice.headers)).json()["encryptedKey"] == "v2"
    # bad blobs and sizes
    assert_error(await store_key(mesh.http, alice, key, ""), 400, "invalid_encrypted_key")
    assert_error(await store_key(mesh.http, alice, key, "a\x00b"), 400, "invalid_encrypted_key")
    r = await store_key(mesh.http, alice, key, "x" * (8 * 1024 + 1))
    assert_error(r, 413, "key_too_large")
    r = await store_key(mesh.http, alice, key, "é" * (4 * 1024 + 1))  # counted in UTF-8 bytes
    assert_error(r, 413, "key_too_large")
    # missing proof, wrong types, a stale proof, no token, a guest
    r = await mesh.http.post(
        "/api/identity/store-key", json={"did": did, "encryptedKey": "b"}, headers=alice.headers
    )
    assert_error(r, 400, "missing_field")
    r = await mesh.http.post(
        "/api/identity/store-key",
        json={"did": did, "encryptedKey": 5, "challenge": "c", "signature": "s"},
        headers=alice.headers,
    )
    assert_error(r, 400, "invalid_field")
    r = await mesh.http.post(
        "/api/identity/store-key",
        json={"did": did, "encryptedKey": "b", "challenge": "c", "signature": "s"},
        headers=alice.headers,
    )
    assert_error(r, 403, "unknown_challenge")
    assert_error(await store_key(mesh.http, User("x", "x", "nope"), key, "b"), 401, "invalid_token")
    guest = await mesh.guest()
    assert_error(await store_key(mesh.http, guest, SigningKey.generate(), "b"), 403, "forbidden")
    assert_error(await mesh.http.get(retrieve, headers=guest.headers), 403, "forbidden")

    # a participant has one DID: linking a new one replaces the old
    new_key = SigningKey.generate()
    assert (await store_key(mesh.http, alice, new_key, "new-blob")).status_code == 200
    got = (await mesh.http.get(retrieve, headers=alice.headers)).json()
    assert (got["did"], got["encryptedKey"]) == (did_key(new_key), "new-blob")
    r = await verify(mesh.http, new_key)
    assert (r.status_code, r.json()["participantId"]) == (200, alice.participant_id)
    # the old DID is free again: bob may link it now (he holds the key here)
    assert (await store_key(mesh.http, bob, key, "bobs")).status_code == 200
    r = await verify(mesh.http, key)
    assert r.json()["participantId"] == bob.participant_id


async def test_removing_the_participant_frees_its_did(mesh: Mesh) -> None:
    owner = await mesh.setup()
    key = SigningKey.generate()
    first = as_user((await verify(mesh.http, key)).json())
    r = await mesh.http.post(
        "/api/vault/entries", json={"label": "k", "blob": "b"}, headers=first.headers
    )
    assert r.status_code == 201, r.text
    r = await mesh.http.delete(f"/api/agents/{first.participant_id}", headers=owner.headers)
    assert r.status_code == 200, r.text
    # the link went with the participant (foreign key cascade): the DID registers anew
    r = await verify(mesh.http, key)
    assert r.status_code == 201, r.text
    second = as_user(r.json())
    assert second.participant_id != first.participant_id
    assert (await mesh.http.get("/api/vault/entries", headers=second.headers)).json() == []


async def test_public_keys_that_read_several_ways(mesh: Mesh) -> None:
    owner = await mesh.setup()
    # a base64url key starting with "z" also looks like multibase base58btc
    key = SigningKey.generate()
    while not b64url(bytes(key.verify_key)).startswith("z"):
        key = SigningKey.generate()
    r = await store_key(mesh.http, owner, key, "b", publicKey=b64url(bytes(key.verify_key)))
    assert r.status_code == 200, r.text
    # multibase without the multicodec prefix
    raw_z = "z" + base58btc(bytes(key.verify_key))
    assert (await store_key(mesh.http, owner, key, "b", publicKey=raw_z)).status_code == 200


async def test_concurrent_first_logins_make_one_participant(mesh: Mesh) -> None:
    await mesh.setup()

    async def attempt(
        key: SigningKey, challenge: str, name: str | None, results: list[httpx.Response]
    ) -> None:
        body = {"did": did_key(key), "challenge": challenge, "signature": sign(key, challenge)}
        if name is not None:
            body["name"] = name
        results.append(await mesh.http.post("/api/identity/verify", json=body))

    # generated names (which collide) and chosen names (which do not)
    for names in ((None, None), ("racer-a", "racer-b")):
        key = SigningKey.generate()
        challenges = [await get_challenge(mesh.http, did_key(key)) for _ in names]
        results: list[httpx.Response] = []
        async with trio.open_nursery() as nursery:
            for challenge, name in zip(challenges, names, strict=True):
                nursery.start_soon(attempt, key, challenge, name, results)
        assert sorted(r.status_code for r in results) == [200, 201], [r.text for r in results]
        assert len({r.json()["participantId"] for r in results}) == 1


async def test_attempts_and_registrations_are_rate_limited_per_address(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    limits = RateLimits(
        exempt_addresses=(), login_address=Rate(3, 60), registration_address=Rate(1, 3600)
    )
    settings = Settings(data_dir=tmp_path / "limited", rate_limits=limits)
    url: str = await nursery.start(
        lambda task_status: serve(create_app(settings), port=0, task_status=task_status)
    )
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        await Mesh(http).setup()
        known = SigningKey.generate()
        assert (await verify(http, known)).status_code == 201  # attempt 1, registration 1
        r = await verify(http, SigningKey.generate())  # attempt 2: proved, but no more sign-ups
        assert_error(r, 429, "rate_limited")
        assert (await verify(http, known)).status_code == 200  # attempt 3: a login
        # attempt 4 is refused before the challenge is looked at: it stays usable
        did = did_key(known)
        challenge = await get_challenge(http, did)
        body = {"did": did, "challenge": challenge, "signature": sign(known, challenge)}
        r = await http.post("/api/identity/verify", json=body)
        assert_error(r, 429, "rate_limited")
        assert int(r.headers["retry-after"]) >= 1
