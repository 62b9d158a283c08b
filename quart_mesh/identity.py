"""``did:key`` identifiers for Ed25519 keys, and the node's own key.

A ``did:key`` for an Ed25519 public key is ``did:key:z`` followed by the
base58btc encoding of the multicodec prefix ``0xed 0x01`` and the 32-byte raw
key (https://w3c-ccg.github.io/did-method-key/). The node's key is 32 random
bytes (the Ed25519 private seed) in ``<data_dir>/node.key``, created on first
start with mode 0600; federation signs node-to-node requests with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from .data_folder import create_once

__all__ = [
    "NodeIdentity",
    "b58decode",
    "b58encode",
    "did_from_public_key",
    "load_or_create_node_identity",
    "public_key_from_did",
    "verify",
]

_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_INDEX = {c: i for i, c in enumerate(_ALPHABET)}
_ED25519_PUB = b"\xed\x01"
KEY_FILE = "node.key"
_KEY_FILE = KEY_FILE
#: longest DID accepted for parsing (an Ed25519 did:key is 56 characters)
_MAX_DID = 128


def b58encode(data: bytes) -> str:
    number = int.from_bytes(data, "big")
    out = ""
    while number:
        number, rest = divmod(number, 58)
        out = _ALPHABET[rest] + out
    zeros = len(data) - len(data.lstrip(b"\0"))
    return "1" * zeros + out


def b58decode(text: str) -> bytes:
    """Raises ValueError for characters outside the base58btc alphabet."""
    number = 0
    for char in text:
        if char not in _INDEX:
            raise ValueError(f"not base58btc: {char!r}")
        number = number * 58 + _INDEX[char]
    body = number.to_bytes((number.bit_length() + 7) // 8, "big") if number else b""
    zeros = len(text) - len(text.lstrip("1"))
    return b"\0" * zeros + body


def did_from_public_key(public_key: bytes) -> str:
    if len(public_key) != 32:
        raise ValueError("an Ed25519 public key is 32 bytes")
    return "did:key:z" + b58encode(_ED25519_PUB + public_key)


def public_key_from_did(did: str) -> bytes:
    """The raw Ed25519 public key a ``did:key`` names.

    Raises:
        ValueError: not a well-formed Ed25519 ``did:key``.
    """
    if not isinstance(did, str) or len(did) > _MAX_DID or not did.startswith("did:key:z"):
        raise ValueError("a DID must be did:key:z… (base58btc)")
    raw = b58decode(did[len("did:key:z") :])
    if len(raw) != 34 or not raw.startswith(_ED25519_PUB):
        raise ValueError("the did:key does not name an Ed25519 public key")
    return raw[2:]


def verify(did: str, signature: bytes, message: bytes) -> bool:
    """Whether *signature* is the Ed25519 signature of *message* by *did*'s key."""
    try:
        key = Ed25519PublicKey.from_public_bytes(public_key_from_did(did))
        key.verify(signature, message)
    except (ValueError, InvalidSignature):
        return False
    return True


@dataclass(frozen=True)
class NodeIdentity:
    """The node's Ed25519 key pair and its DID."""

    private_key: Ed25519PrivateKey
    did: str

    @property
    def public_key(self) -> bytes:
        return self.private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    def sign(self, message: bytes) -> bytes:
        return self.private_key.sign(message)


def load_or_create_node_identity(data_dir: Path) -> NodeIdentity:
    """The node's key from ``<data_dir>/node.key``, created (mode 0600) on first start."""
    path = data_dir / _KEY_FILE

    def new_seed() -> str:
        key = Ed25519PrivateKey.generate()
        return key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()).hex()

    seed = bytes.fromhex(create_once(path, new_seed).strip())
    if len(seed) != 32:
        raise ValueError(f"{path} does not hold a 32-byte Ed25519 key")
    key = Ed25519PrivateKey.from_private_bytes(seed)
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return NodeIdentity(key, did_from_public_key(public))
