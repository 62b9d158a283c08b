"""The vault's client-side formats (``quart_mesh.vault_client``): known-answer
vectors for v1 (scrypt) and v2 (PBKDF2), both made by an independent
implementation (Node.js: ``crypto.scryptSync`` with ``createCipheriv`` for
v1, WebCrypto through ``js/vaultcrypto.js`` for v2), so Python, the page and a
third implementation agree byte for byte. The page decrypts the same v2
vector in ``tests/web/test_vault.py``."""

from __future__ import annotations

import base64

import pytest

from quart_mesh import vault_client
from quart_mesh.vault_client import VaultError, decrypt, encrypt, version_of

pytestmark = pytest.mark.store_free

SECRET = "sk-test-ünïcode-κλειδί"
PASSPHRASE = "correct horse ✓ battery"
LABEL = "openai main ✓"
SALT = bytes(range(16))
NONCE = bytes(range(0xA0, 0xAC))
V2_VECTOR = (
    "v2.600000.AAECAwQFBgcICQoLDA0ODw.oKGio6Slpqeoqaqr."
    "S8OhSuigEGl8b7OU-inDuT5TjQAVS7krd5sdCRhg47lWUbU_P-_DHRIWZpJgIw"
)
V1_VECTOR = (
    "v1.AAECAwQFBgcICQoLDA0ODw.oKGio6Slpqeoqaqr."
    "ASgaZv8sE3qaCJm-yF3eOfuWklSx8SxJTm33W4iedOn1_WO_REluH6VRkiUOaw"
)


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@pytest.mark.parametrize(("version", "vector"), [("v2", V2_VECTOR), ("v1", V1_VECTOR)])
def test_known_answers(version: str, vector: str) -> None:
    sealed = vault_client._seal(
        SECRET,
        PASSPHRASE,
        label=LABEL,
        version=version,
        salt=SALT,
        nonce=NONCE,
        iterations=600_000,
    )
    assert sealed == vector
    assert decrypt(vector, PASSPHRASE, label=LABEL) == SECRET
    assert version_of(vector) == version


def test_v2_is_written_by_default_with_its_iterations_in_the_blob() -> None:
    blob = encrypt("sk-key", "pass phrase", label="label ✓")
    version, iterations, salt, nonce, sealed = blob.split(".")
    assert (version, iterations) == ("v2", "600000")
    assert vault_client.VERSION == "v2"
    assert vault_client.PBKDF2_ITERATIONS == 600_000
    assert (len(unb64(salt)), len(unb64(nonce)), len(unb64(sealed))) == (16, 12, 6 + 16)
    assert "=" not in blob
    assert decrypt(blob, "pass phrase", label="label ✓") == "sk-key"
    # a fresh salt and nonce every time
    assert encrypt("k", "p", label="l") != encrypt("k", "p", label="l")
    # the count can be raised later: a blob says its own, and is read with it
    stronger = encrypt("sk-key", "pass phrase", label="l", iterations=700_000)
    assert stronger.split(".")[1] == "700000"
    assert decrypt(stronger, "pass phrase", label="l") == "sk-key"
    # the old format is still written when asked for, and read
    old = encrypt("sk-old", "pass phrase", label="l", version="v1")
    assert old.startswith("v1.")
    assert len(old.split(".")) == 4
    assert decrypt(old, "pass phrase", label="l") == "sk-old"


@pytest.mark.parametrize("vector", [V2_VECTOR, V1_VECTOR])
def test_wrong_passphrase_label_or_tampering_fail_alike(vector: str) -> None:
    with pytest.raises(VaultError):
        decrypt(vector, "not the passphrase", label=LABEL)
    with pytest.raises(VaultError):
        decrypt(vector, PASSPHRASE, label="another label")
    *head, sealed = vector.split(".")
    flipped = sealed[:-2] + ("A" if sealed[-2] != "A" else "B") + sealed[-1]
    with pytest.raises(VaultError):
        decrypt(".".join([*head, flipped]), PASSPHRASE, label=LABEL)
    # a v2 blob is not read as v1 and the other way round: the associated
    # data names the version
    if head[0] == "v2":
        as_v1 = ".".join(["v1", *head[2:], sealed])
    else:
        as_v1 = ".".join(["v2", "600000", *head[1:], sealed])
    with pytest.raises(VaultError):
        decrypt(as_v1, PASSPHRASE, label=LABEL)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "v3.a.b.c",
        "v2.AAECAwQFBgcICQoLDA0ODw.oKGio6Slpqeoqaqr.S8Oh",  # v2 without iterations
        "v1.600000.AAECAwQFBgcICQoLDA0ODw.oKGio6Slpqeoqaqr.S8Oh",  # v1 with them
        V2_VECTOR.replace("v2.600000.", "v2.0600000."),  # leading zero
        V2_VECTOR.replace("v2.600000.", "v2.-600000."),
        V2_VECTOR.replace("v2.600000.", "v2.99999."),  # too few rounds
        V2_VECTOR.replace("v2.600000.", "v2.10000001."),  # too many
        V2_VECTOR.replace("v2.600000.", "v2.6e5."),
        V2_VECTOR.replace(".oKGio6Slpqeoqaqr.", ".oKGio6Slpqeoqaqr=."),  # padding
        V2_VECTOR.replace(".oKGio6Slpqeoqaqr.", ".oKGio6Slpqeoqa+r."),  # not base64url
        V2_VECTOR.replace(".oKGio6Slpqeoqaqr.", ".oKGio6Slpqeoqa."),  # short nonce
        V2_VECTOR.replace(".AAECAwQFBgcICQoLDA0ODw.", ".AAECAwQFBgcICQoLDA0O."),  # short salt
        "v2.600000.AAECAwQFBgcICQoLDA0ODw.oKGio6Slpqeoqaqr.AAAA",  # shorter than a tag
        "v1.é.a.b",
    ],
)
def test_malformed_blobs_are_refused(bad: str) -> None:
    with pytest.raises(VaultError):
        decrypt(bad, PASSPHRASE, label=LABEL)


def test_bad_arguments() -> None:
    for version in ("v1", "v2"):
        with pytest.raises(ValueError, match="passphrase"):
            encrypt("k", "", label="l", version=version)
    with pytest.raises(ValueError, match="passphrase"):
        decrypt(V2_VECTOR, "", label=LABEL)
    with pytest.raises(ValueError, match="format"):
        encrypt("k", "p", label="l", version="v3")
    with pytest.raises(ValueError, match="iterations"):
        encrypt("k", "p", label="l", iterations=1000)
    assert version_of("v9.x") is None
    assert version_of("nonsense") is None


def test_text_that_is_not_unicode_is_refused_as_such() -> None:
    # a lone surrogate in what is sealed, the passphrase or the label
    with pytest.raises(ValueError, match="secret"):
        encrypt("k\ud800", "p", label="l", iterations=100_000)
    with pytest.raises(ValueError, match="passphrase"):
        encrypt("k", "p\ud800", label="l", iterations=100_000)
    with pytest.raises(ValueError, match="label"):
        decrypt(V2_VECTOR, "p", label="l\ud800")


def test_a_blob_that_does_not_hold_text_is_a_vault_error() -> None:
    # sealed correctly, by some other client, around bytes that are not UTF-8
    salt, nonce = b"s" * 16, b"n" * 12
    key = vault_client._pbkdf2_key("p", salt, 100_000)
    sealed = vault_client.AESGCM(key).encrypt(nonce, b"\xff\xfe", b"quart-mesh-vault:v2:l")
    b64 = vault_client._b64
    blob = ".".join(["v2", "100000", b64(salt), b64(nonce), b64(sealed)])
    with pytest.raises(VaultError, match="text"):
        decrypt(blob, "p", label="l")
