"""OpenSSF model-signing bundles, read and checked by rlx (docs/format.md, "model-signing
bundles").

Such a signature is a Sigstore bundle (JSON, media type v0.3) holding a DSSE envelope whose
payload is an in-toto statement: one subject (the model's name, and SHA-256 over its
resources' digests in order) and a predicate listing every file, or every shard of a file,
with its digest. The private-key method signs the envelope's pre-authentication encoding
(PAE) with ECDSA and names its key by a hint: SHA-256 of the SubjectPublicKeyInfo PEM.

The `model_signing` package writes these (`bundle_sign`) but rlx checks them itself, by that
package's rules and in its order, for two reasons. Its verifier hashes the model again by
path, while rlx must hash the very bytes it has mapped and goes on to run (DESIGN.md 2b).
And loading a signed model should not need an optional dependency of 20 MB whose import
takes 0.6 s. tests/artifact/test_model_signing.py holds this reader to that package's signer,
verifier and command line, both ways.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, NoReturn

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from rlx.artifact.signing.keys import PublicKey, public_pem
from rlx.errors import ArtifactError, SignatureError
from rlx.safeio import load_json

__all__ = ["FILE", "MEDIA_TYPE", "Envelope", "Manifest", "Resource", "authenticate",
           "check_members", "is_bundle", "key_hint"]

MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"
FILE = "."  # the one resource of a single-file model: its path relative to itself
_HASHES: dict[str, Callable[..., Any]] = {"sha256": hashlib.sha256,
                                          "blake2b": hashlib.blake2b}
_CURVE_HASHES = {256: hashes.SHA256(), 384: hashes.SHA384(), 521: hashes.SHA512()}


def is_bundle(data: bytes) -> bool:
    """Whether a signature file is a bundle (JSON) rather than an rlx `.sig` (RLXSIG01)."""
    return data.lstrip()[:1] == b"{"


def key_hint(key: PublicKey) -> str:
    """The hint a bundle names its key by: SHA-256 of the public key's PEM, hex."""
    return hashlib.sha256(public_pem(key)).hexdigest()


@dataclass(frozen=True)
class Envelope:
    """The signed payload of a bundle, its signature, and the hint of the key that made it
    (None in bundles of model-signing before 1.0)."""

    hint: str | None
    payload: bytes
    signature: bytes

    @classmethod
    def parse(cls, data: bytes, where: str) -> Envelope:
        bundle = _object(_json(data, where, "bundle"), where, "the bundle")
        _expect(where, "media type", bundle.get("mediaType"), MEDIA_TYPE)
        material = _object(bundle.get("verificationMaterial"), where, "verificationMaterial")
        if "publicKey" not in material:
            raise SignatureError(f"{where}: the bundle is signed with a certificate or a "
                                 "Sigstore identity; rlx verifies private-key bundles only "
                                 "(check it with model_signing verify)", "untrusted")
        hint = _object(material["publicKey"], where, "publicKey").get("hint") or None
        envelope = _object(bundle.get("dsseEnvelope"), where, "dsseEnvelope")
        _expect(where, "payload type", envelope.get("payloadType"), PAYLOAD_TYPE)
        signatures = envelope.get("signatures")
        if not isinstance(signatures, list) or len(signatures) != 1:
            _malformed(where, "a DSSE envelope with exactly one signature is expected")
        signature = _object(signatures[0], where, "the signature").get("sig")
        return cls(hint if isinstance(hint, str) else None,
                   _base64(envelope.get("payload"), where, "payload"),
                   _base64(signature, where, "signature"))

    @property
    def key_id(self) -> str:
        """The hint as rlx prints key ids (16 hex digits), or "unnamed"."""
        return self.hint[:16] if self.hint else "unnamed"

    def pae(self) -> bytes:
        """DSSE's pre-authentication encoding: the bytes that are signed."""
        return b"DSSEv1 %d %s %d %s" % (len(PAYLOAD_TYPE), PAYLOAD_TYPE.encode(),
                                          len(self.payload), self.payload)


@dataclass(frozen=True)
class Resource:
    """One signed file, or shard of a file (`start`..`end`), and its digest."""

    path: str
    algorithm: str
    digest: bytes
    start: int | None = None
    end: int | None = None


@dataclass(frozen=True)
class Manifest:
    """What an authenticated statement vouches for: every resource, and the statement's
    SHA-256 (which keys caches by what was signed)."""

    resources: tuple[Resource, ...]
    digest: str

    @property
    def paths(self) -> set[str]:
        return {r.path for r in self.resources}

    @classmethod
    def parse(cls, payload: bytes, where: str) -> Manifest:
        statement = _object(_json(payload, where, "statement"), where, "the statement")
        _expect(where, "statement type", statement.get("_type"), STATEMENT_TYPE)
        _expect(where, "predicate type", statement.get("predicateType"), PREDICATE_TYPE)
        subjects = statement.get("subject")
        if not isinstance(subjects, list) or len(subjects) != 1:
            _malformed(where, "a statement with exactly one subject is expected")
        subject = _object(_object(subjects[0], where, "the subject").get("digest"), where,
                          "the subject's digest")
        predicate = _object(statement.get("predicate"), where, "the predicate")
        method = _object(predicate.get("serialization"), where, "serialization").get("method")
        if method not in ("files", "shards"):
            _malformed(where, f"serialization method {str(method)[:40]!r}, expected files or "
                              "shards")
        listed = predicate.get("resources")
        if not isinstance(listed, list) or not listed:
            _malformed(where, "the predicate lists no resources")
        resources = tuple(_resource(r, method == "shards", where) for r in listed)
        root = hashlib.sha256(b"".join(r.digest for r in resources)).hexdigest()
        if subject.get("sha256") != root:
            _malformed(where, "the subject's digest is not that of its resources")
        names = [(r.path, r.start) for r in resources]
        if len(set(names)) != len(names):
            _malformed(where, "a resource is listed twice")
        return cls(resources, hashlib.sha256(payload).hexdigest()[:32])


def authenticate(envelope: Envelope, keys: Iterable[PublicKey], artifact: Path,
                 where: str) -> Manifest:
    """The manifest of a bundle signed by one of `keys` (only ECDSA keys can have signed
    it); `SignatureError` "untrusted" or "invalid" when none did."""
    keys = list(keys)
    ecdsa = [k for k in keys if isinstance(k, ec.EllipticCurvePublicKey)]
    candidates = [k for k in ecdsa if envelope.hint in (None, key_hint(k))]
    if not candidates:
        trusted = ", ".join(key_hint(k)[:16] for k in ecdsa) or "none"
        why = "" if ecdsa else "; an Ed25519 key verifies rlx .sig files only, a " \
                               "model-signing bundle needs the signer's ECDSA public key"
        raise SignatureError(f"{artifact}: signed (model-signing bundle) by ECDSA key "
                             f"{envelope.key_id}, which is not trusted (trusted ECDSA keys: "
                             f"{trusted}){why}", "untrusted")
    if not any(_valid(k, envelope) for k in candidates):
        raise SignatureError(f"{artifact}: the signature in {where} is not valid for key "
                             f"{envelope.key_id} (the bundle or its statement was altered)",
                             "invalid")
    return Manifest.parse(envelope.payload, where)


def check_members(artifact: Path, manifest: Manifest, members: Mapping[str, memoryview]
                  ) -> int:
    """Check that `members` (a single file as {FILE: its bytes}, a folder's files by
    relative POSIX path) are exactly the signed files and each hashes to its signed digests,
    shards tiling the whole file; `SignatureError` "mismatch" when not. Returns the bytes
    hashed."""
    single = set(members) == {FILE}
    if (manifest.paths == {FILE}) != single:
        signed, this = ("folder", "file") if single else ("file", "folder")
        raise _mismatch(artifact, f"the signature is for a {signed}, this is a {this}")
    missing = sorted(manifest.paths - set(members))
    extra = sorted(set(members) - manifest.paths)
    if missing:
        raise _mismatch(artifact, f"the signed member {missing[0]} is missing")
    if extra:
        raise _mismatch(artifact, f"{extra[0]} is not covered by the signature")
    for name, data in sorted(members.items()):
        _check_one(artifact, name, data, [r for r in manifest.resources if r.path == name])
    return sum(len(data) for data in members.values())


def _check_one(artifact: Path, name: str, data: memoryview, resources: list[Resource]) -> None:
    what = "it" if name == FILE else f"member {name}"
    shards = sorted(resources, key=lambda r: r.start or 0)
    at = 0
    for shard in shards:
        start = 0 if shard.start is None else shard.start
        end = len(data) if shard.end is None else shard.end
        if start != at or end > len(data):
            raise _mismatch(artifact, f"{what} is {len(data):,} bytes, which the signed "
                                      "shards do not tile")
        if _HASHES[shard.algorithm](data[start:end]).digest() != shard.digest:
            where = "" if shard.start is None else f" (bytes {start}..{end})"
            raise _mismatch(artifact, f"{what}{where} differs from the signed bytes")
        at = end
    if at != len(data):
        raise _mismatch(artifact, f"{what} is {len(data):,} bytes, {at:,} signed")


def _resource(entry: Any, sharded: bool, where: str) -> Resource:
    entry = _object(entry, where, "a resource")
    name, algorithm = entry.get("name"), entry.get("algorithm")
    if not isinstance(name, str) or not isinstance(algorithm, str):
        _malformed(where, "a resource without a name or an algorithm")
    start = end = None
    if sharded:
        path, _, span = name.partition(":")
        first, _, last = span.partition(":")
        if not all(n.isascii() and n.isdigit() for n in (first, last)) \
                or int(first) >= int(last):
            _malformed(where, f"shard {name[:80]!r} is not PATH:START:END")
        name, start, end = path, int(first), int(last)
        algorithm = algorithm.partition("-sharded-")[0]
    if algorithm not in _HASHES:
        _malformed(where, f"hash {algorithm[:40]!r} of {name[:80]!r}; rlx checks "
                          f"{' and '.join(_HASHES)}")
    digest = entry.get("digest")
    try:
        digest = bytes.fromhex(digest if isinstance(digest, str) else "-")
    except ValueError:
        _malformed(where, f"the digest of {name[:80]!r} is not hex")
    return Resource(str(PurePosixPath(name)), algorithm, digest, start, end)


def _valid(key: ec.EllipticCurvePublicKey, envelope: Envelope) -> bool:
    try:
        key.verify(envelope.signature, envelope.pae(),
                   ec.ECDSA(_CURVE_HASHES[key.curve.key_size]))
    except InvalidSignature:
        return False
    return True


def _json(data: bytes, where: str, what: str) -> Any:
    try:
        return load_json(data, ArtifactError, f"the {what}")  # bounded: depth, size, UTF-8
    except ArtifactError as err:
        _malformed(where, str(err))


def _object(value: Any, where: str, what: str) -> dict:
    if not isinstance(value, dict):
        _malformed(where, f"{what} is not a JSON object")
    return value


def _base64(value: Any, where: str, what: str) -> bytes:
    try:
        if isinstance(value, str):
            return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        pass
    _malformed(where, f"the {what} is not a base64 string")


def _expect(where: str, what: str, value: Any, expected: str) -> None:
    """A bundle field that must be one constant (its value cut short in the message)."""
    if value != expected:
        _malformed(where, f"{what} {str(value)[:80]!r}, expected {expected}")


def _malformed(where: str, what: str) -> NoReturn:
    raise SignatureError(f"{where}: not a valid model-signing bundle ({what})", "malformed")


def _mismatch(artifact: Path, what: str) -> SignatureError:
    return SignatureError(f"{artifact}: {what}: it was changed after it was signed", "mismatch")
