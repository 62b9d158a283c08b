"""Client-side encryption for the mesh vault (``docs/vault.md``).

The node only ever stores the string :func:`encrypt` returns; the plaintext
and the passphrase stay with the client. This module depends on nothing but
the standard library and ``cryptography``, never on the server code, so a
client may import it (``from quart_mesh.vault_client import encrypt``) or copy
this one file.

Format ``v2`` (written by default; the web client speaks it with WebCrypto)::

    v2.<iterations>.<salt>.<nonce>.<ciphertext+tag>

- iterations: PBKDF2 rounds in decimal (600000 when written here); read
  from the blob, so the count can be raised later without a new version
- key: PBKDF2-HMAC-SHA256(passphrase UTF-8, salt, iterations) → 32 bytes
- associated data: ``b"quart-mesh-vault:v2:" + label`` (UTF-8)

Format ``v1`` (still read; written only when asked for)::

    v1.<salt>.<nonce>.<ciphertext+tag>

- key: scrypt(passphrase UTF-8, salt, N=2**15, r=8, p=1) → 32 bytes
- associated data: ``b"quart-mesh-vault:v1:" + label`` (UTF-8)

Both: salt 16 random bytes, new for every blob; AES-256-GCM with a 12-byte
random nonce and the 16-byte tag appended; every part after the version is
base64url without padding. The associated data binds a blob to its label: it
only decrypts under the label it was stored with, so entries cannot be
swapped.

Deriving the key costs 0.1 to 0.5 s of CPU on purpose (and 32 MiB for v1);
async programs should run these functions in a worker thread
(``trio.to_thread.run_sync``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

__all__ = [
    "PBKDF2_ITERATIONS",
    "PBKDF2_MAX_ITERATIONS",
    "PBKDF2_MIN_ITERATIONS",
    "SCRYPT_N",
    "SCRYPT_P",
    "SCRYPT_R",
    "VERSION",
    "VERSIONS",
    "VaultError",
    "decrypt",
    "encrypt",
    "version_of",
]

#: the format :func:`encrypt` writes unless told otherwise
VERSION = "v2"
#: every format :func:`decrypt` reads
VERSIONS = ("v1", "v2")
#: PBKDF2-HMAC-SHA256 rounds written into new v2 blobs (OWASP's 2023 figure)
PBKDF2_ITERATIONS = 600_000
#: the counts a v2 blob may carry: fewer is too weak to be one of ours, more
#: would let a forged blob keep a client busy for minutes
PBKDF2_MIN_ITERATIONS = 100_000
PBKDF2_MAX_ITERATIONS = 10_000_000
SCRYPT_N = 2**15
SCRYPT_R = 8
SCRYPT_P = 1
_SALT_BYTES = 16
_NONCE_BYTES = 12
_TAG_BYTES = 16
_ITERATIONS = re.compile(r"[1-9][0-9]{0,8}")
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")


class VaultError(ValueError):
    """A blob that is malformed, or does not decrypt with this passphrase and label."""


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    if not _BASE64URL.fullmatch(text):
        raise VaultError("not a vault blob")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise VaultError("not a vault blob") from None


def _check_passphrase(passphrase: str) -> bytes:
    if not passphrase:
        raise ValueError("the passphrase must not be empty")
    return _utf8(passphrase, "the passphrase")


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: not text any client could type
        raise ValueError(f"{what} is not valid Unicode text") from None


def _scrypt_key(passphrase: str, salt: bytes) -> bytes:
    kdf = Scrypt(salt=salt, length=32, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P)
    return kdf.derive(_check_passphrase(passphrase))


def _pbkdf2_key(passphrase: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", _check_passphrase(passphrase), salt, iterations, 32)


def _aad(version: str, label: str) -> bytes:
    return f"quart-mesh-vault:{version}:".encode() + _utf8(label, "the label")


def version_of(blob: str) -> str | None:
    """The format of *blob* (``"v1"``, ``"v2"``), or ``None`` if it is neither."""
    version = blob.split(".", 1)[0]
    return version if version in VERSIONS else None


def _seal(
    plaintext: str,
    passphrase: str,
    *,
    label: str,
    version: str,
    salt: bytes,
    nonce: bytes,
    iterations: int,
) -> str:
    if version == "v2":
        if not PBKDF2_MIN_ITERATIONS <= iterations <= PBKDF2_MAX_ITERATIONS:
            raise ValueError(
                f"iterations must be {PBKDF2_MIN_ITERATIONS} to {PBKDF2_MAX_ITERATIONS}"
            )
        key = _pbkdf2_key(passphrase, salt, iterations)
        head = [version, str(iterations)]
    elif version == "v1":
        key = _scrypt_key(passphrase, salt)
        head = [version]
    else:
        raise ValueError(f"unknown vault format {version!r}")
    sealed = AESGCM(key).encrypt(nonce, _utf8(plaintext, "the secret"), _aad(version, label))
    return ".".join([*head, _b64(salt), _b64(nonce), _b64(sealed)])


def encrypt(
    plaintext: str,
    passphrase: str,
    *,
    label: str,
    version: str = VERSION,
    iterations: int = PBKDF2_ITERATIONS,
) -> str:
    """Encrypt *plaintext* (an API key, say) for storing under *label*.

    Args:
        version: ``"v2"`` (the default) or ``"v1"`` (for clients that only
            read the old format).
        iterations: PBKDF2 rounds of a v2 blob.

    Returns:
        ``v2.<iterations>.<salt>.<nonce>.<ciphertext+tag>``: what
        ``POST /api/vault/entries`` takes as ``blob`` (with the same ``label``).

    Raises:
        ValueError: an empty passphrase, an unknown version, or iterations
            out of range.
    """
    return _seal(
        plaintext,
        passphrase,
        label=label,
        version=version,
        salt=os.urandom(_SALT_BYTES),
        nonce=os.urandom(_NONCE_BYTES),
        iterations=iterations,
    )


def decrypt(blob: str, passphrase: str, *, label: str) -> str:
    """The plaintext :func:`encrypt` sealed into *blob* (v1 or v2) under *label*.

    Raises:
        VaultError: *blob* is not a v1 or v2 blob, or the passphrase or label
            is wrong, or the blob was altered (these three cannot be told
            apart).
        ValueError: an empty passphrase, or a passphrase or label that is not
            valid Unicode text (a lone surrogate).
    """
    parts = blob.split(".")
    version = parts[0]
    if version == "v2" and len(parts) == 5:
        if not _ITERATIONS.fullmatch(parts[1]):
            raise VaultError("not a v2 vault blob")
        iterations = int(parts[1])
        if not PBKDF2_MIN_ITERATIONS <= iterations <= PBKDF2_MAX_ITERATIONS:
            raise VaultError("the blob's iteration count is out of range")
        encoded = parts[2:]
    elif version == "v1" and len(parts) == 4:
        iterations = 0
        encoded = parts[1:]
    else:
        raise VaultError("not a v1 or v2 vault blob")
    salt, nonce, sealed = (_unb64(part) for part in encoded)
    if len(salt) != _SALT_BYTES or len(nonce) != _NONCE_BYTES or len(sealed) < _TAG_BYTES:
        raise VaultError(f"not a {version} vault blob")
    if version == "v2":
        key = _pbkdf2_key(passphrase, salt, iterations)
    else:
        key = _scrypt_key(passphrase, salt)
    try:
        plaintext = AESGCM(key).decrypt(nonce, sealed, _aad(version, label))
    except InvalidTag:
        raise VaultError("wrong passphrase or label, or a damaged blob") from None
    try:
        return plaintext.decode("utf-8")
    except UnicodeDecodeError:  # sealed by a client that did not write text
        raise VaultError(f"the {version} blob does not hold text") from None
