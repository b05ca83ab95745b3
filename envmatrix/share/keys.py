"""Signing keys: ed25519 in PEM, as `openssl genpkey -algorithm ed25519` writes a private key and
`openssl pkey -in KEY -pubout` its public half, read with the `cryptography` package.

A key is named by its keyid: the sha256 of its DER SubjectPublicKeyInfo, in hex, the same bytes
`openssl pkey -pubin -in KEY.pub -outform DER | sha256sum` hashes, so anyone can compute it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from probes import untrusted

from ..errors import InputError

MAKE_KEY = "openssl genpkey -algorithm ed25519 -out signing.pem && openssl pkey -in signing.pem -pubout -out signing.pub"


@dataclass(frozen=True)
class PublicKey:
    """A public key with its keyid and where it was read from."""

    key: Ed25519PublicKey
    keyid: str
    name: str


def keyid(key: Ed25519PublicKey) -> str:
    """sha256 of the key's DER SubjectPublicKeyInfo, hex."""
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def public_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _read(path: Path, what: str) -> bytes:
    """The key file, read once within the PEM key's bound (probes/untrusted.py: a FIFO or device refused unread)."""
    if not path.exists() and not path.is_symlink():
        raise InputError(f"{path}: cannot read the {what} (No such file or directory); make a key pair with: {MAKE_KEY}")
    try:
        return untrusted.read_bytes(path, untrusted.PEM_KEY)
    except untrusted.Refused as exc:
        raise InputError(f"{exc}; pass the {what} file") from None


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """The signing key (unencrypted PEM, ed25519); InputError saying what is wrong and how to make one."""
    data = _read(path, "signing key")
    _one_block(data, str(path))
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise InputError(f"{path}: the key is encrypted; envmatrix signs with an unencrypted key (keep it in a CI secret): {MAKE_KEY}") from None
    except (ValueError, UnsupportedAlgorithm):
        raise InputError(f"{path}: not a PEM private key; make one with: {MAKE_KEY}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise InputError(f"{path}: a {type(key).__name__.removeprefix('_')} key; envmatrix signs with ed25519 only: {MAKE_KEY}")
    return key


def _one_block(data: bytes, name: str) -> None:
    """A key file holds one PEM block: with two, which one is trusted would be the library's choice, not the user's."""
    blocks = data.count(b"-----BEGIN ")
    if blocks > 1:
        raise InputError(f"{name}: {blocks} PEM blocks; a key file holds one key: split it, one key a file (--trust takes several files)")


def public_key_from_pem(data: bytes, name: str) -> PublicKey:
    """An ed25519 public key from PEM bytes (a trusted key file, or the key a site publishes)."""
    _one_block(data, name)
    if b"PRIVATE KEY" in data:
        raise InputError(f"{name}: a private key; trust the public half (openssl pkey -in {name} -pubout -out {name}.pub) and keep this one secret")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise InputError(f"{name}: not a PEM public key (-----BEGIN PUBLIC KEY-----); get the signer's key.pub, or make one with: {MAKE_KEY}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise InputError(f"{name}: not an ed25519 key; envmatrix signs and verifies with ed25519 only")
    return PublicKey(key, keyid(key), name)


def load_public_key(path: Path) -> PublicKey:
    """A trusted key file (`--trust`)."""
    return public_key_from_pem(_read(path, "public key"), str(path))


def load_trusted(paths: list[str]) -> list[PublicKey]:
    """Every `--trust` key, once each."""
    keys: dict[str, PublicKey] = {}
    for path in paths:
        key = load_public_key(Path(path))
        keys.setdefault(key.keyid, key)
    return list(keys.values())
