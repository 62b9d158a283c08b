"""Tokens: a token verified once is not verified again, but its expiry is
checked on every use, and other bytes are verified as ever; a token's id
never begins with "-". Passwords: the parameters a new hash gets."""

from __future__ import annotations

import time

import pytest

from quart_mesh import security
from quart_mesh.errors import Unauthorized
from quart_mesh.security import Tokens

pytestmark = pytest.mark.store_free


def test_a_verified_token_still_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = Tokens(b"k" * 32)
    token = tokens.issue("P1", "human", ttl_seconds=60)
    assert tokens.check(token).participant_id == "P1"
    assert tokens.check(token).participant_id == "P1"  # the verified one
    later = time.time() + 61
    monkeypatch.setattr(security.time, "time", lambda: later)
    with pytest.raises(Unauthorized) as refused:
        tokens.check(token)
    assert refused.value.code == "token_expired"
    with pytest.raises(Unauthorized) as again:  # and again
        tokens.check(token)
    assert again.value.code == "token_expired"


def test_a_token_id_never_begins_with_a_dash() -> None:
    """An id is given on the command line (``tokens revoke NAME ID``), where
    ``-...`` reads as an option; one id in 64 would begin with it (the
    chance that 5,000 draws miss every one is below 1e-34)."""
    tokens = Tokens(b"k" * 32)
    ids = [tokens.mint("P1", "human", ttl_seconds=60)[1].token_id for _ in range(5000)]
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(i) == 16 for i in ids)
    assert len(set(ids)) == len(ids)
    assert {i[0] for i in ids} >= set("AZaz09_")  # the rest of the alphabet still begins them


def test_other_bytes_are_verified() -> None:
    tokens = Tokens(b"k" * 32)
    token = tokens.issue("P1", "human", ttl_seconds=60)
    tokens.check(token)
    head, body, signature = token.split(".")
    forged = f"{head}.{body}.{signature[:-2]}{'AA' if signature[-2:] != 'AA' else 'BB'}"
    with pytest.raises(Unauthorized) as refused:
        tokens.check(forged)
    assert refused.value.code == "invalid_token"
    other = Tokens(b"x" * 32)  # another node's secret
    with pytest.raises(Unauthorized):
        other.check(token)


def test_the_verified_tokens_are_bounded() -> None:
    tokens = Tokens(b"k" * 32)
    issued = [tokens.issue(f"P{i}", "human", ttl_seconds=60) for i in range(Tokens._VERIFIED + 10)]
    for token in issued:
        tokens.check(token)
    assert len(tokens._verified) == Tokens._VERIFIED
    assert tokens.check(issued[0]).participant_id == "P0"  # verified again


async def test_new_passwords_get_rfc_9106_parameters_and_any_hash_verifies() -> None:
    """The node's hasher (the suite's in-process nodes use a cheaper one:
    ``tests/conftest.py``): argon2id at 64 MiB, three passes, four lanes;
    a hash made with other parameters still verifies, by its own."""
    from argon2 import PasswordHasher

    from quart_mesh.security import Passwords

    passwords = Passwords()
    made = await passwords.hash("correct horse")
    assert made.startswith("$argon2id$v=19$m=65536,t=3,p=4$"), made
    assert await passwords.verify(made, "correct horse")
    assert not await passwords.verify(made, "wrong horse")
    cheap = PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1).hash("correct horse")
    assert await passwords.verify(cheap, "correct horse")
    assert not await passwords.verify(None, "correct horse")
