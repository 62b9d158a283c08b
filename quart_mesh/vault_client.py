"""Client-side encryption for the mesh vault (format ``v1``; ``docs/vault.md``).

The node only ever stores the string :func:`encrypt` returns; the plaintext
and the passphrase stay with the client. This module depends on nothing but
the standard library and ``cryptography``, never on the server code, so a
client may import it (``from quart_mesh.vault_client import encrypt``) or copy
this one file.

Format ``v1``::

    v1.<salt>.<nonce>.<ciphertext+tag>      each part base64url without padding

- key: scrypt(passphrase UTF-8, salt, N=2**15, r=8, p=1) → 32 bytes
- salt: 16 random bytes, new for every blob
- cipher: AES-256-GCM, nonce 12 random bytes, tag 16 bytes (appended)
- associated data: ``b"quart-mesh-vault:v1:" + label`` (UTF-8): the blob only
  decrypts under the label it was stored with, so entries cannot be swapped.

Deriving the key costs about 32 MiB and 0.1 to 0.2 s of CPU on purpose; async
programs should run these functions in a worker thread
(``trio.to_thread.run_sync``).
"""

from __future__ import annotations

import base64
import binascii
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

__all__ = ["SCRYPT_N", "SCRYPT_P", "SCRYPT_R", "VERSION", "VaultError", "decrypt", "encrypt"]

VERSION = "v1"
SCRYPT_N = 2**15
SCRYPT_R = 8
SCRYPT_P = 1
_SALT_BYTES = 16
_NONCE_BYTES = 12
_TAG_BYTES = 16
_AAD_PREFIX = b"quart-mesh-vault:v1:"


class VaultError(ValueError):
    """A blob that is malformed, or does not decrypt with this passphrase and label."""


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    if not text.isascii():
        raise VaultError("not a v1 vault blob")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise VaultError("not a v1 vault blob") from None


def _key(passphrase: str, salt: bytes) -> bytes:
    if not passphrase:
        raise ValueError("the passphrase must not be empty")
    kdf = Scrypt(salt=salt, length=32, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P)
    return kdf.derive(passphrase.encode("utf-8"))


def _aad(label: str) -> bytes:
    return _AAD_PREFIX + label.encode("utf-8")


def encrypt(plaintext: str, passphrase: str, *, label: str) -> str:
    """Encrypt *plaintext* (an API key, say) for storing under *label*.

    Returns:
        ``v1.<salt>.<nonce>.<ciphertext+tag>``: what ``POST /api/vault/entries``
        takes as ``blob`` (with the same ``label``).

    Raises:
        ValueError: an empty passphrase.
    """
    salt = os.urandom(_SALT_BYTES)
    nonce = os.urandom(_NONCE_BYTES)
    sealed = AESGCM(_key(passphrase, salt)).encrypt(nonce, plaintext.encode("utf-8"), _aad(label))
    return ".".join((VERSION, _b64(salt), _b64(nonce), _b64(sealed)))


def decrypt(blob: str, passphrase: str, *, label: str) -> str:
    """The plaintext :func:`encrypt` sealed into *blob* under *label*.

    Raises:
        VaultError: *blob* is not a ``v1`` blob, or the passphrase or label is
            wrong, or the blob was altered (these cannot be told apart).
        ValueError: an empty passphrase.
    """
    parts = blob.split(".")
    if len(parts) != 4 or parts[0] != VERSION:
        raise VaultError("not a v1 vault blob")
    salt, nonce, sealed = (_unb64(part) for part in parts[1:])
    if len(salt) != _SALT_BYTES or len(nonce) != _NONCE_BYTES or len(sealed) < _TAG_BYTES:
        raise VaultError("not a v1 vault blob")
    try:
        plaintext = AESGCM(_key(passphrase, salt)).decrypt(nonce, sealed, _aad(label))
    except InvalidTag:
        raise VaultError("wrong passphrase or label, or a damaged blob") from None
    return plaintext.decode("utf-8")
