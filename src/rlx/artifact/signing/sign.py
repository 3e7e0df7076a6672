"""`sign_artifact` and `verify_signature`: signatures kept beside the artifact, in one of two
formats told apart by the signature file's content: rlx's own `.sig` (Ed25519, the
default, below) or an OpenSSF model-signing bundle (ECDSA: `bundle`, `bundle_sign`).

The signature of `model.rlx` is `model.rlx.sig` (of a dir package `pkg/`, `pkg.sig`): a
detached file, so the artifact's bytes never change and every reader, old or new, reads a
signed artifact exactly as before. Verifying checks, in this order and before anything of
the artifact is parsed: the `.sig` file's header, that its key id names a trusted key, the
Ed25519 signature over the message, and then that every part of the artifact hashes to what
the message says (lengths first, then SHA-256). Each refusal is a `SignatureError` whose
`reason` says which check failed.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from rlx.artifact.atomic import atomic_write
from rlx.artifact.layout import signature_path
from rlx.artifact.signing.bundle import (
    FILE,
    Envelope,
    Manifest,
    authenticate,
    check_members,
    is_bundle,
)
from rlx.artifact.signing.keys import (
    PrivateKeySource,
    PublicKey,
    PublicKeySource,
    key_id,
    load_private_key,
    load_public_keys,
)
from rlx.artifact.signing.layout import (
    MAX_MESSAGE_BYTES,
    SIG_HEADER,
    Part,
    SignatureFile,
    Statement,
)
from rlx.artifact.signing.parts import (
    MAGICS,
    HashedFile,
    dir_members,
    hash_file,
    map_members,
    signed_parts,
    signing_kind,
)
from rlx.errors import ArtifactError, SignatureError
from rlx.safeio import FileIdentity, map_file, read_regular

__all__ = ["FORMATS", "SignatureInfo", "read_signature", "sign_artifact", "signature_path",
           "verify_members_of", "verify_signature", "verify_signature_of"]

FORMATS = ("rlx", "model-signing")


@dataclass(frozen=True)
class SignatureInfo:
    """A signature and what it covers. `verified` is False for what `read_signature` shows
    without a key: then nothing of it is authenticated."""

    artifact: Path
    signature: Path
    kind: str
    key_id: str  # hex
    parts: int
    size: int
    verified: bool
    files: tuple[HashedFile, ...] = field(default=(), repr=False, compare=False)
    digest: str = field(default="", repr=False, compare=False)  # SHA-256 of the statement
    format: str = "rlx"  # or "model-signing"

    def check_unchanged(self) -> None:
        """Refuse when a verified file was replaced or written since it was hashed (best
        effort: by inode, size and mtime, which is what an in-place write or a rename
        changes)."""
        for hashed in self.files:
            try:
                now = FileIdentity.of(os.stat(hashed.path))
            except OSError:
                now = None
            if now != hashed.identity:
                raise SignatureError(f"{self.artifact}: {hashed.path} changed after its "
                                     "signature was verified", "changed")


def sign_artifact(artifact: str | os.PathLike, key: PrivateKeySource, *,
                  password: str | bytes | None = None,
                  signature: str | os.PathLike | None = None,
                  format: str = "rlx") -> SignatureInfo:
    """Sign a `.rlx` (plain or encrypted) or `.rlxp` artifact: `format="rlx"` with an
    Ed25519 private key (a key object, PKCS#8 PEM bytes or a PEM file), `"model-signing"`
    with an ECDSA P-256/P-384/P-521 key in a PEM file (needs `rlx[signing]`); `password` if
    the key is encrypted.

    The artifact is validated first (every checksum of a plain file or package; the
    container of an encrypted one, which is signed as ciphertext and needs no password):
    a corrupt artifact is never signed. Writes `signature` (default: `signature_path`)
    atomically, replacing an earlier signature there."""
    if format not in FORMATS:
        raise ValueError(f"unknown signature format {format!r}; expected one of {FORMATS}")
    path = Path(artifact)
    private = load_private_key(key, password) if format == "rlx" else None
    kind = signing_kind(path)
    before = None if path.is_dir() else FileIdentity.of(os.stat(path))
    _validate(path, kind)
    out = Path(signature) if signature is not None else signature_path(path)
    if private is None:
        return _sign_bundle(path, kind, key, password, before, out)
    parts, hashed = signed_parts(path, kind)
    if before is not None and hashed[0].identity != before:
        raise ArtifactError(f"{path} changed while it was being signed")
    statement = Statement(kind, key_id(private), tuple(parts))
    message = statement.message()
    with atomic_write(out) as f:
        f.write(SignatureFile(statement.key_id, private.sign(message), message).to_bytes())
    return _info(path, out, statement, True, hashed)


def _sign_bundle(path: Path, kind: str, key: PrivateKeySource, password: str | bytes | None,
                 before: FileIdentity | None, out: Path) -> SignatureInfo:
    """`sign_artifact` in the model-signing format, by the `model_signing` package."""
    from rlx.artifact.signing.bundle_sign import bundle_of

    data, private = bundle_of(path, key, password)
    if before is not None and FileIdentity.of(os.stat(path)) != before:
        raise ArtifactError(f"{path} changed while it was being signed")
    manifest = Manifest.parse(Envelope.parse(data, str(out)).payload, str(out))
    with atomic_write(out) as f:
        f.write(data)
    size = sum(m.stat().st_size for m in dir_members(path, ArtifactError).values()) \
        if kind == "rlxp-dir" else os.stat(path).st_size
    return SignatureInfo(path, out, kind, key_id(private).hex(), len(manifest.resources),
                         size, True, (), manifest.digest, "model-signing")


def _validate(path: Path, kind: str) -> None:
    if kind == "rlx":
        from rlx.artifact.reader import read_rlx

        read_rlx(path, verify="full")
    elif kind == "rlx-encrypted":
        from rlx.artifact.crypto import read_encryption_info

        read_encryption_info(path)
    else:
        from rlx.artifact.rlxp.read import read_rlxp

        read_rlxp(path, verify="full")


def _signature_bytes(artifact: Path, signature: str | os.PathLike | None
                     ) -> tuple[Path, bytes]:
    """The signature file of `artifact` (`signature`, default beside it) and its bytes."""
    sig_path = Path(signature) if signature is not None else signature_path(artifact)
    if not os.path.lexists(sig_path):
        raise SignatureError(f"{artifact} is not signed (no signature file {sig_path})",
                             "unsigned")
    try:
        data = read_regular(sig_path, ArtifactError, limit=SIG_HEADER.size + MAX_MESSAGE_BYTES)
    except ArtifactError as err:
        raise SignatureError(f"{artifact}: {err}", "malformed") from None
    return sig_path, data


def read_signature(artifact: str | os.PathLike,
                   signature: str | os.PathLike | None = None) -> SignatureInfo | None:
    """What the signature beside `artifact` claims (which key, which kind), checking
    nothing but its layout; None when there is no signature file."""
    path = Path(artifact)
    try:
        sig_path, data = _signature_bytes(path, signature)
    except SignatureError as err:
        if err.reason == "unsigned":
            return None
        raise
    if is_bundle(data):
        envelope = Envelope.parse(data, str(sig_path))
        manifest = Manifest.parse(envelope.payload, str(sig_path))
        kind = "rlxp-dir" if manifest.paths != {FILE} else signing_kind(path)
        return SignatureInfo(path, sig_path, kind, envelope.key_id, len(manifest.resources),
                             0, False, (), manifest.digest, "model-signing")
    sig = SignatureFile.parse(data, str(sig_path))
    return _info(path, sig_path, Statement.parse(sig.message, str(sig_path)), False, [])


def verify_signature(artifact: str | os.PathLike, trusted_keys: Iterable[PublicKeySource], *,
                     signature: str | os.PathLike | None = None) -> SignatureInfo:
    """Check that `artifact` is signed by one of `trusted_keys` (key objects, PEM bytes or
    PEM files) and that its bytes are the ones signed; `SignatureError` when not.

    This answers for the bytes hashed here; a reader that goes on to use the file must
    verify the bytes it maps instead (`verify_signature_of`, `verify_members_of`, as
    `open_artifact` does)."""
    path = Path(artifact)
    if not path.exists():
        raise ArtifactError(f"{path} does not exist")
    keys, sig_path, data = _keys_and_signature(path, trusted_keys, signature)
    if is_bundle(data):
        envelope, manifest = _authenticated_bundle(path, keys, sig_path, data)
        members = map_members(path) if path.is_dir() else \
            {FILE: memoryview(map_file(path, ArtifactError).buffer)}
        return _bundle_info(path, sig_path, envelope, manifest, members)
    statement = _authenticated(path, keys, sig_path, data)
    folder = statement.kind == "rlxp-dir"
    if folder != path.is_dir():
        raise _mismatch(path, f"the signature is for a {statement.kind} artifact, this is a "
                              f"{'folder' if path.is_dir() else 'file'}")
    if folder:
        hashed = _check_dir(path, statement)
    else:
        size = path.stat().st_size
        _check_size(path, size, statement)
        hashed = [_hash(path, [p.length for p in statement.parts], str(path))]
        _check_digests(path, statement, hashed[0].digests)
    kind = signing_kind(path)  # the signed bytes hold the magic: only a lying signer fails it
    _check_kind(path, kind, statement)
    return _info(path, sig_path, statement, True, hashed)


def verify_signature_of(artifact: str | os.PathLike, data: memoryview,
                        trusted_keys: Iterable[PublicKeySource], *,
                        signature: str | os.PathLike | None = None) -> SignatureInfo:
    """`verify_signature` of a single-file artifact's bytes as the caller holds them (its
    validated mapping): what is hashed here is what the caller goes on to parse and run,
    whatever happens to `artifact`'s path meanwhile. `artifact` only names the file and
    finds the signature beside it."""
    path = Path(artifact)
    keys, sig_path, signed = _keys_and_signature(path, trusted_keys, signature)
    if is_bundle(signed):
        envelope, manifest = _authenticated_bundle(path, keys, sig_path, signed)
        return _bundle_info(path, sig_path, envelope, manifest, {FILE: data})
    statement = _authenticated(path, keys, sig_path, signed)
    if statement.kind == "rlxp-dir":
        raise _mismatch(path, f"the signature is for a {statement.kind} artifact, this is a "
                              "file")
    _check_size(path, len(data), statement)
    digests, start = [], 0
    for part in statement.parts:
        digests.append(hashlib.sha256(data[start:start + part.length]).digest())
        start += part.length
    _check_digests(path, statement, digests)
    head = bytes(data[:8])
    _check_kind(path, MAGICS.get(head) or MAGICS.get(head[:4], "unknown"), statement)
    return _info(path, sig_path, statement, True, [])


def verify_members_of(artifact: str | os.PathLike, members: Mapping[str, memoryview],
                      trusted_keys: Iterable[PublicKeySource], *,
                      signature: str | os.PathLike | None = None) -> SignatureInfo:
    """`verify_signature` of a dir package's members as the caller holds them (each mapped
    once, by relative POSIX path): they must be exactly the signed members, each hashing to
    its signed SHA-256, so what the caller goes on to parse and run is what was signed,
    whatever happens to the folder meanwhile. `artifact` only names the folder and finds
    the signature beside it."""
    path = Path(artifact)
    keys, sig_path, signed_bytes = _keys_and_signature(path, trusted_keys, signature)
    if is_bundle(signed_bytes):
        envelope, manifest = _authenticated_bundle(path, keys, sig_path, signed_bytes)
        return _bundle_info(path, sig_path, envelope, manifest, members)
    statement = _authenticated(path, keys, sig_path, signed_bytes)
    if statement.kind != "rlxp-dir":
        raise _mismatch(path, f"the signature is for a {statement.kind} artifact, this is a "
                              "folder")
    signed = _signed_members(path, statement, members)
    for name, data in sorted(members.items()):
        _check_member_size(path, name, len(data), signed[name])
        _check_member_digest(path, name, hashlib.sha256(data).digest(), signed[name])
    return _info(path, sig_path, statement, True, [])


def _keys_and_signature(path: Path, trusted_keys: Iterable[PublicKeySource],
                        signature: str | os.PathLike | None
                        ) -> tuple[list[PublicKey], Path, bytes]:
    """The trusted keys (every key file checked first), and the signature file's path and
    bytes."""
    keys = load_public_keys(trusted_keys)
    return (keys, *_signature_bytes(path, signature))


def _authenticated(path: Path, keys: list[PublicKey], sig_path: Path, data: bytes
                   ) -> Statement:
    """The statement of what an rlx `.sig` file covers, its key trusted and its signature
    valid."""
    sig = SignatureFile.parse(data, str(sig_path))
    ed25519 = [k for k in keys if isinstance(k, Ed25519PublicKey)]
    signer = sig.key_id.hex()
    candidates = [k for k in ed25519 if key_id(k) == sig.key_id]
    if not candidates:
        trusted = ", ".join(key_id(k).hex() for k in ed25519) or "none"
        why = "; an ECDSA key verifies model-signing bundles only, an rlx .sig needs the " \
              "signer's Ed25519 public key" if len(ed25519) < len(keys) else ""
        raise SignatureError(f"{path}: signed by key {signer}, which is not trusted (trusted "
                             f"keys: {trusted}){why}", "untrusted")
    if not any(_valid(k, sig) for k in candidates):
        raise SignatureError(f"{path}: the signature in {sig_path} is not valid for key "
                             f"{signer} (the signature or the signed message was altered)",
                             "invalid")
    statement = Statement.parse(sig.message, str(sig_path))
    if statement.key_id != sig.key_id:
        raise SignatureError(f"{sig_path}: the signed message names key "
                             f"{statement.key_id.hex()}, the header {signer}", "malformed")
    return statement


def _authenticated_bundle(path: Path, keys: list[PublicKey], sig_path: Path, data: bytes
                          ) -> tuple[Envelope, Manifest]:
    """A model-signing bundle, its key trusted and its signature valid, and what it covers."""
    envelope = Envelope.parse(data, str(sig_path))
    return envelope, authenticate(envelope, keys, path, str(sig_path))


def _bundle_info(path: Path, sig_path: Path, envelope: Envelope, manifest: Manifest,
                 members: Mapping[str, memoryview]) -> SignatureInfo:
    """`members` checked against an authenticated bundle's manifest (`bundle.check_members`)."""
    size = check_members(path, manifest, members)
    kind = "rlxp-dir"
    if FILE in members:
        head = bytes(members[FILE][:8])
        kind = MAGICS.get(head) or MAGICS.get(head[:4], "")
        if not kind:
            raise ArtifactError(f"{path} is not an rlx artifact (bad magic {head!r})")
    return SignatureInfo(path, sig_path, kind, envelope.key_id, len(manifest.resources), size,
                         True, (), manifest.digest, "model-signing")


def _check_kind(path: Path, kind: str, statement: Statement) -> None:
    if kind != statement.kind:
        raise _mismatch(path, f"the signature is for a {statement.kind} artifact, this is a "
                              f"{kind} one")


def _valid(key, sig: SignatureFile) -> bool:
    try:
        key.verify(sig.signature, sig.message)
    except InvalidSignature:
        return False
    return True


def _mismatch(path: Path, what: str) -> SignatureError:
    return SignatureError(f"{path}: {what}: it was changed after it was signed", "mismatch")


def _hash(path: Path, lengths: list[int], where: str, member: bool = False) -> HashedFile:
    try:
        return hash_file(path, lengths, where, member=member)
    except ArtifactError as err:  # it changed, or vanished, between the checks and now
        raise SignatureError(str(err), "changed") from None


def _check_size(path: Path, size: int, statement: Statement) -> None:
    if size != statement.size:
        raise _mismatch(path, f"it is {size:,} bytes, the signature covers {statement.size:,}")


def _check_digests(path: Path, statement: Statement, digests) -> None:
    start, changed = 0, []
    for part, digest in zip(statement.parts, digests):
        if digest != part.sha256:
            changed.append(f"{part.name} (bytes {start}..{start + part.length})")
        start += part.length
    if changed:
        more = f" and {len(changed) - 1} other part(s) differ" if len(changed) > 1 \
            else " differs"
        raise _mismatch(path, f"{changed[0]}{more} from the signed bytes")


def _check_dir(path: Path, statement: Statement) -> list[HashedFile]:
    try:
        members = dir_members(path, ArtifactError)
    except ArtifactError as err:
        raise SignatureError(str(err), "mismatch") from None
    signed = _signed_members(path, statement, members)
    hashed = []
    for name, member in members.items():
        part = signed[name]
        _check_member_size(path, name, member.stat().st_size, part)
        result = _hash(member, [part.length], f"{path}: {name}", member=True)
        _check_member_digest(path, name, result.digests[0], part)
        hashed.append(result)
    return hashed


def _signed_members(path: Path, statement: Statement, names: Iterable[str]) -> dict[str, Part]:
    """The signed parts by member name, once `names` are exactly the signed members."""
    signed = {p.name: p for p in statement.parts}
    names = set(names)
    extra, missing = sorted(names - set(signed)), sorted(set(signed) - names)
    if missing:
        raise _mismatch(path, f"the signed member {missing[0]} is missing")
    if extra:
        raise _mismatch(path, f"{extra[0]} is not covered by the signature")
    return signed


def _check_member_size(path: Path, name: str, size: int, part: Part) -> None:
    if size != part.length:
        raise _mismatch(path, f"member {name} is {size:,} bytes, {part.length:,} signed")


def _check_member_digest(path: Path, name: str, digest: bytes, part: Part) -> None:
    if digest != part.sha256:
        raise _mismatch(path, f"member {name} differs from the signed bytes")


def _info(path: Path, sig_path: Path, statement: Statement, verified: bool,
          hashed: list[HashedFile]) -> SignatureInfo:
    return SignatureInfo(path, sig_path, statement.kind, statement.key_id.hex(),
                         len(statement.parts), statement.size, verified, tuple(hashed),
                         hashlib.sha256(statement.message()).hexdigest()[:32])
