"""Signing keys: generation, PEM files, and the key id a signature names.

Two kinds, one per signature format: Ed25519 signs rlx's own `.sig`; ECDSA on P-256, P-384
or P-521 signs an OpenSSF model-signing bundle (the curves that tool accepts; it takes no
Ed25519 key). A key of the other kind is refused in one line that names the right format.
Private keys are PKCS#8 PEM (optionally encrypted with a password, `cryptography`'s best
available scheme), public keys SubjectPublicKeyInfo PEM: the formats `openssl pkey` reads.
The key id of an Ed25519 key is the first 8 bytes of SHA-256 of the raw 32-byte public key;
of an ECDSA key, of its SubjectPublicKeyInfo PEM (model-signing's key hint, truncated): a
signature says which key made it and a verifier holding several picks the right one.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from rlx.artifact.atomic import atomic_write
from rlx.errors import RlxError, SigningKeyError
from rlx.safeio import read_regular

__all__ = ["ECDSA_CURVES", "KEY_ID_BYTES", "PrivateKey", "PrivateKeySource", "PublicKey",
           "PublicKeySource", "generate_keypair", "key_id", "key_label", "load_ecdsa_private_key",
           "load_private_key", "load_public_key", "load_public_keys", "public_key_path",
           "public_pem", "raw_public_key", "save_keypair"]

KEY_ID_BYTES = 8
_MAX_KEY_FILE = 64 << 10  # a PEM key is a few hundred bytes

# model-signing's curves, by cryptography's name: what its key signer and verifier accept
ECDSA_CURVES = {"secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521"}
_KINDS = "Ed25519 (rlx .sig) or ECDSA P-256/P-384/P-521 (model-signing bundles)"

PublicKey = Ed25519PublicKey | ec.EllipticCurvePublicKey
PrivateKey = Ed25519PrivateKey | ec.EllipticCurvePrivateKey
PublicKeySource = PublicKey | bytes | bytearray | str | os.PathLike
PrivateKeySource = PrivateKey | bytes | bytearray | str | os.PathLike


def generate_keypair(kind: str = "ed25519") -> PrivateKey:
    """A fresh private key (its public half is `.public_key()`): "ed25519" for rlx's `.sig`,
    "ecdsa-p256" for model-signing bundles."""
    if kind == "ecdsa-p256":
        return ec.generate_private_key(ec.SECP256R1())
    if kind != "ed25519":
        raise SigningKeyError(f"unknown key kind {kind!r}; expected ed25519 or ecdsa-p256")
    return Ed25519PrivateKey.generate()


def raw_public_key(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_pem(key: PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM,
                            serialization.PublicFormat.SubjectPublicKeyInfo)


def key_id(key: PublicKey | PrivateKey) -> bytes:
    """The 8-byte id of a key pair: SHA-256 of the raw public key (Ed25519) or of its PEM
    (ECDSA), truncated."""
    public = key.public_key() if isinstance(key, (Ed25519PrivateKey,
                                                  ec.EllipticCurvePrivateKey)) else key
    raw = raw_public_key(public) if isinstance(public, Ed25519PublicKey) else public_pem(public)
    return hashlib.sha256(raw).digest()[:KEY_ID_BYTES]


def key_label(key: object) -> str:
    """"Ed25519", "ECDSA P-256", ...: how messages name a key's kind."""
    if isinstance(key, (ec.EllipticCurvePublicKey, ec.EllipticCurvePrivateKey)):
        return f"ECDSA {ECDSA_CURVES.get(key.curve.name, key.curve.name)}"
    return type(key).__name__.removesuffix("PublicKey").removesuffix("PrivateKey")


def public_key_path(path: str | os.PathLike) -> Path:
    """Where `save_keypair` puts the public half of the key at `path`: `path` + ".pub"."""
    path = Path(path)
    return path.with_name(path.name + ".pub")


def save_keypair(key: PrivateKey, path: str | os.PathLike, *,
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
        out.write(public_pem(key.public_key()))
    return private, public


def _pem(source: bytes | bytearray | str | os.PathLike, what: str) -> tuple[bytes, str]:
    """The PEM bytes of a source, and how to name it in a message."""
    if isinstance(source, (bytes, bytearray)):
        return bytes(source), f"the {what} given as bytes"
    try:
        return read_regular(source, SigningKeyError, limit=_MAX_KEY_FILE), os.fsdecode(source)
    except RlxError as err:
        raise SigningKeyError(f"{what}: {err}") from None


def load_public_key(source: PublicKeySource) -> PublicKey:
    """A public key from a key object, SubjectPublicKeyInfo PEM bytes, or a PEM file: Ed25519
    (verifies `.sig` files) or ECDSA on a supported curve (verifies model-signing bundles)."""
    if isinstance(source, (Ed25519PrivateKey, ec.EllipticCurvePrivateKey)):
        raise SigningKeyError("a private key was given where a public key is wanted; pass "
                              "key.public_key() (keys are trusted by their public half)")
    if isinstance(source, (Ed25519PublicKey, ec.EllipticCurvePublicKey)):
        return _supported(source, "the public key given")
    data, name = _pem(source, "public key")
    if b"PRIVATE KEY-----" in data:
        raise SigningKeyError(f"{name} is a private key; trust its public half (the .pub "
                              "file keygen wrote beside it)")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as err:
        raise SigningKeyError(f"{name} is not a PEM public key ({_short(err)})") from None
    return _supported(key, name)


def load_public_keys(sources: Iterable[PublicKeySource]) -> list[PublicKey]:
    if isinstance(sources, (str, bytes, bytearray, os.PathLike, Ed25519PublicKey,
                            ec.EllipticCurvePublicKey)):
        sources = [sources]  # one key where a list was meant: still means that key
    return [load_public_key(s) for s in sources]


def load_private_key(source: PrivateKeySource,
                     password: str | bytes | None = None) -> Ed25519PrivateKey:
    """An Ed25519 private key, the kind rlx's `.sig` format signs with, from a key object,
    PKCS#8 PEM bytes, or a PEM file (`password` when it is encrypted)."""
    key, name = _private(source, password)
    if not isinstance(key, Ed25519PrivateKey):
        hint = " (sign with it in --format model-signing)" \
            if isinstance(key, ec.EllipticCurvePrivateKey) else ""
        raise SigningKeyError(f"{name} is an {key_label(key)} key; the rlx .sig format signs "
                              f"with Ed25519{hint}")
    return key


def load_ecdsa_private_key(source: PrivateKeySource,
                           password: str | bytes | None = None) -> ec.EllipticCurvePrivateKey:
    """An ECDSA private key on a curve model-signing accepts, as `load_private_key` reads
    one."""
    key, name = _private(source, password)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise SigningKeyError(f"{name} is an {key_label(key)} key; model-signing bundles are "
                              "signed with ECDSA P-256, P-384 or P-521 (rlx-bake keygen "
                              "--format model-signing); Ed25519 signs the rlx .sig format")
    _supported(key.public_key(), name)
    return key


def _private(source: PrivateKeySource, password: str | bytes | None) -> tuple[PrivateKey, str]:
    """Any private key, and how to name it: the password's presence is checked first."""
    if isinstance(source, (Ed25519PrivateKey, ec.EllipticCurvePrivateKey)):
        return source, "the private key given"
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
    if not isinstance(key, (Ed25519PrivateKey, ec.EllipticCurvePrivateKey)):
        raise SigningKeyError(f"{name} is a key of type {key_label(key)}; rlx signs with "
                              f"{_KINDS}")
    return key, name


def _supported(key, name: str) -> PublicKey:
    if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name in ECDSA_CURVES:
        return key
    if isinstance(key, Ed25519PublicKey):
        return key
    raise SigningKeyError(f"{name} is a key of type {key_label(key)}; rlx verifies {_KINDS}")


def _short(err: BaseException) -> str:
    return " ".join(str(err).split())[:160] or type(err).__name__
