"""Ed25519 signing keys: generation, PEM files, and the key id a signature names.

Private keys are PKCS#8 PEM (optionally encrypted with a password, `cryptography`'s best
available scheme), public keys SubjectPublicKeyInfo PEM: the formats `openssl pkey` reads.
The key id is the first 8 bytes of SHA-256 of the raw 32-byte public key, so a signature can
say which key made it and a verifier holding several trusted keys picks the right one.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from rlx.artifact.atomic import atomic_write
from rlx.errors import RlxError, SigningKeyError
from rlx.safeio import read_regular

__all__ = ["KEY_ID_BYTES", "PrivateKeySource", "PublicKeySource", "generate_keypair", "key_id",
           "load_private_key", "load_public_key", "load_public_keys", "public_key_path",
           "raw_public_key", "save_keypair"]

KEY_ID_BYTES = 8
_MAX_KEY_FILE = 64 << 10  # a PEM key is a few hundred bytes

PublicKeySource = Ed25519PublicKey | bytes | bytearray | str | os.PathLike
PrivateKeySource = Ed25519PrivateKey | bytes | bytearray | str | os.PathLike


def generate_keypair() -> Ed25519PrivateKey:
    """A fresh private key (its public half is `.public_key()`)."""
    return Ed25519PrivateKey.generate()


def raw_public_key(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(key: Ed25519PublicKey | Ed25519PrivateKey) -> bytes:
    """The 8-byte id of a key pair: SHA-256 of the raw public key, truncated."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return hashlib.sha256(raw_public_key(public)).digest()[:KEY_ID_BYTES]


def public_key_path(path: str | os.PathLike) -> Path:
    """Where `save_keypair` puts the public half of the key at `path`: `path` + ".pub"."""
    path = Path(path)
    return path.with_name(path.name + ".pub")


def save_keypair(key: Ed25519PrivateKey, path: str | os.PathLike, *,
                 password: str | bytes | None = None, overwrite: bool = False
                 ) -> tuple[Path, Path]:
    """Write the private key to `path` (mode 0600, encrypted when `password` is given) and
    its public key to `path.pub`, each atomically; refuses to replace either unless
    `overwrite`. Returns both paths."""
    private, public = Path(path), public_key_path(path)
    existing = [str(p) for p in (private, public) if p.exists() or p.is_symlink()]
    if existing and not overwrite:
        verb = "exists" if len(existing) == 1 else "exist"
        raise SigningKeyError(f"{' and '.join(existing)} already {verb}; refusing to replace "
                              "a key (overwrite=True, or --force on the command line)")
    encryption: serialization.KeySerializationEncryption = serialization.NoEncryption()
    if password is not None:
        secret = password.encode("utf-8") if isinstance(password, str) else bytes(password)
        if not secret:
            raise SigningKeyError("the private key's password must not be empty")
        encryption = serialization.BestAvailableEncryption(secret)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            encryption)
    with atomic_write(private, mode=0o600) as out:
        out.write(pem)
    with atomic_write(public) as out:
        out.write(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def _pem(source: bytes | bytearray | str | os.PathLike, what: str) -> tuple[bytes, str]:
    """The PEM bytes of a source, and how to name it in a message."""
    if isinstance(source, (bytes, bytearray)):
        return bytes(source), f"the {what} given as bytes"
    try:
        return read_regular(source, SigningKeyError, limit=_MAX_KEY_FILE), os.fsdecode(source)
    except RlxError as err:
        raise SigningKeyError(f"{what}: {err}") from None


def load_public_key(source: PublicKeySource) -> Ed25519PublicKey:
    """A public key from a key object, SubjectPublicKeyInfo PEM bytes, or a PEM file."""
    if isinstance(source, Ed25519PublicKey):
        return source
    if isinstance(source, Ed25519PrivateKey):
        raise SigningKeyError("a private key was given where a public key is wanted; pass "
                              "key.public_key() (keys are trusted by their public half)")
    data, name = _pem(source, "public key")
    if b"PRIVATE KEY-----" in data:
        raise SigningKeyError(f"{name} is a private key; trust its public half (the .pub "
                              "file keygen wrote beside it)")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as err:
        raise SigningKeyError(f"{name} is not a PEM public key ({_short(err)})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SigningKeyError(f"{name} is a {type(key).__name__.removesuffix('PublicKey')} "
                              "key; rlx signatures use Ed25519")
    return key


def load_public_keys(sources: Iterable[PublicKeySource]) -> list[Ed25519PublicKey]:
    if isinstance(sources, (str, bytes, bytearray, os.PathLike, Ed25519PublicKey)):
        sources = [sources]  # one key where a list was meant: still means that key
    return [load_public_key(s) for s in sources]


def load_private_key(source: PrivateKeySource,
                     password: str | bytes | None = None) -> Ed25519PrivateKey:
    """A private key from a key object, PKCS#8 PEM bytes, or a PEM file (`password` when it
    is encrypted)."""
    if isinstance(source, Ed25519PrivateKey):
        return source
    data, name = _pem(source, "private key")
    secret = password.encode("utf-8") if isinstance(password, str) else password
    encrypted = b"ENCRYPTED PRIVATE KEY-----" in data
    if encrypted and not secret:
        raise SigningKeyError(f"{name} is encrypted; pass its password (--password-env or "
                              "--password-file)")
    if not encrypted and secret:
        raise SigningKeyError(f"{name} is not encrypted, yet a password was given; drop it "
                              "(or re-create the key with keygen --password-*)")
    if not encrypted and b"PRIVATE KEY-----" not in data:
        hint = " (that is a public key: sign with the private one)" \
            if b"PUBLIC KEY-----" in data else ""
        raise SigningKeyError(f"{name} is not a PEM private key{hint}")
    try:
        key = serialization.load_pem_private_key(data, secret if encrypted else None)
    except (ValueError, TypeError) as err:
        reason = "wrong password or corrupt key" if encrypted else _short(err)
        raise SigningKeyError(f"{name}: cannot load the private key ({reason})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(f"{name} is a {type(key).__name__.removesuffix('PrivateKey')} "
                              "key; rlx signatures use Ed25519")
    return key


def _short(err: BaseException) -> str:
    return " ".join(str(err).split())[:160] or type(err).__name__
