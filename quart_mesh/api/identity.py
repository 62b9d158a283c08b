"""DID identity (spec §4.10, §5.5): challenges, signature login, encrypted keys."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, request

from ._common import body, caller, node, reply

bp = Blueprint("identity", __name__)


@bp.post("/api/identity/challenge")
async def challenge() -> tuple[Any, int]:
    fields = await body()
    issued = await node().did_auth.challenge(fields.req_str("did"), address=request.remote_addr)
    return reply(issued.to_json())


@bp.post("/api/identity/verify")
async def verify() -> tuple[Any, int]:
    fields = await body()
    login = await node().did_auth.verify(
        fields.req_str("did"),
        fields.req_str("challenge"),
        fields.req_str("signature"),
        name=fields.opt_str("name"),
        address=request.remote_addr,
    )
    return reply(login.to_json(), 201 if login.created else 200)


@bp.post("/api/identity/store-key")
async def store_key() -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    record = await node().did_auth.store_key(
        actor,
        did=fields.req_str("did"),
        encrypted_key=fields.req_str("encryptedKey"),
        challenge=fields.req_str("challenge"),
        signature=fields.req_str("signature"),
        public_key=fields.opt_str("publicKey"),
    )
    return reply(record.to_json(with_key=False))


@bp.get("/api/identity/retrieve-key")
async def retrieve_key() -> tuple[Any, int]:
    actor = await caller()
    record = await node().did_auth.retrieve_key(actor)
    return reply(record.to_json())
