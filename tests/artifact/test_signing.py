"""Ed25519 signatures of artifacts (docs/format.md, "Signatures"): round trips of every kind,
refusals with the right reason, every byte of a small artifact and of its `.sig` flipped,
and a verifier written here from the documented layout with `cryptography`'s raw Ed25519
API (not rlx's message builder), so the page is checked to be true."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import struct
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

import rlx
from rlx import BakeOptions, bake
from rlx.artifact import crypto, open_artifact, write_rlx
from rlx.artifact.signing import (
    generate_keypair,
    key_id,
    load_private_key,
    load_public_key,
    read_signature,
    save_keypair,
    sign_artifact,
    signature_path,
    verify_signature,
)
from rlx.errors import ArtifactError, IntegrityError, SignatureError, SigningKeyError
from tests.artifact.kinds import KINDS, PASSWORD, small_model, write_every_kind
from tests.baking.models import mlp_forward
from tests.hardening import flips, mutate, seeds


@pytest.fixture(scope="module")
def model():
    return small_model()


@pytest.fixture(scope="module")
def keys():
    return generate_keypair(), generate_keypair()


@pytest.fixture
def signed(tmp_path, model, keys):
    """Every kind of artifact of the same model, each signed with the first key."""
    paths = write_every_kind(tmp_path, model[0])
    for path in paths.values():
        sign_artifact(path, keys[0])
    return paths


def public(key):
    return key.public_key()


def password_for(kind: str):
    return PASSWORD if kind == "rlx-encrypted" else None


def refused(path, keys, reason: str, **kwargs) -> SignatureError:
    with pytest.raises(SignatureError) as err:
        verify_signature(path, keys, **kwargs)
    assert err.value.reason == reason, err.value
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    return err.value


# -- round trips ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_round_trips_and_runs_like_the_unsigned_file(signed, keys, model, kind):
    path = signed[kind]
    info = verify_signature(path, [public(keys[0])])
    assert (info.kind, info.key_id, info.verified) == (kind, key_id(keys[0]).hex(), True)
    assert info.signature == signature_path(path) and info.signature.exists()
    x = np.random.default_rng(3).standard_normal((5, 32)).astype(np.float32)
    reference = mlp_forward(x, model[1])  # float64 numpy, not rlx
    outputs = []
    for trusted in (None, [public(keys[0])]):  # the unsigned reader, then the verifying one
        loaded = rlx.load(path, engine="numpy", password=password_for(kind),
                          trusted_keys=trusted)
        outputs.append(loaded.run({"x": x})[0])
    assert outputs[0].tobytes() == outputs[1].tobytes()
    np.testing.assert_allclose(outputs[1], reference, rtol=1e-5, atol=1e-5)


def test_onnxruntime_engine_loads_a_verified_file(signed, keys, model):
    x = np.random.default_rng(4).standard_normal((2, 32)).astype(np.float32)
    loaded = rlx.load(signed["rlx"], engine="onnxruntime", trusted_keys=[public(keys[0])])
    np.testing.assert_allclose(loaded.run({"x": x})[0], mlp_forward(x, model[1]),
                               rtol=1e-5, atol=1e-5)


def test_signing_changes_no_byte_of_the_artifact(tmp_path, model, keys):
    write_rlx(tmp_path / "a.rlx", model[0])
    before = (tmp_path / "a.rlx").read_bytes()
    sign_artifact(tmp_path / "a.rlx", keys[0])
    assert (tmp_path / "a.rlx").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.rlx", "a.rlx.sig"]


def test_trusted_keys_may_be_objects_pem_bytes_or_paths_and_several(tmp_path, signed, keys):
    private, pub = save_keypair(keys[0], tmp_path / "k")
    assert private.name == "k" and pub.name == "k.pub"
    other = public(keys[1])
    for trusted in ([other, public(keys[0])], [other, pub.read_bytes()], [str(pub)], [pub],
                    pub):
        assert verify_signature(signed["rlx"], trusted).verified


def test_signing_again_replaces_the_signature(signed, keys):
    sign_artifact(signed["rlx"], keys[1])
    assert verify_signature(signed["rlx"], [public(keys[1])]).key_id == key_id(keys[1]).hex()
    refused(signed["rlx"], [public(keys[0])], "untrusted")


def test_a_signature_elsewhere(signed, keys, tmp_path):
    elsewhere = tmp_path / "sigs" / "model.sig"
    elsewhere.parent.mkdir()
    sign_artifact(signed["rlxp-flat"], keys[1], signature=elsewhere)
    assert verify_signature(signed["rlxp-flat"], [public(keys[1])], signature=elsewhere)
    open_artifact(signed["rlxp-flat"], trusted_keys=[public(keys[1])], signature=elsewhere)


def test_read_signature_names_the_key_without_checking_it(signed, keys, tmp_path):
    info = read_signature(signed["rlxp-zip"])
    assert info is not None and not info.verified and info.key_id == key_id(keys[0]).hex()
    assert read_signature(tmp_path / "nothing.rlx") is None


# -- refusals ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_unsigned_is_refused_and_unchanged_without_trusted_keys(signed, keys, kind):
    signature_path(signed[kind]).unlink()
    refused(signed[kind], [public(keys[0])], "unsigned")
    with pytest.raises(SignatureError, match="not signed"):
        rlx.load(signed[kind], engine="numpy", password=password_for(kind),
                 trusted_keys=[public(keys[0])])
    rlx.load(signed[kind], engine="numpy", password=password_for(kind))  # as before


def test_wrong_key_and_no_key_are_untrusted(signed, keys):
    error = refused(signed["rlx"], [public(keys[1])], "untrusted")
    assert key_id(keys[0]).hex() in str(error) and key_id(keys[1]).hex() in str(error)
    refused(signed["rlx"], [], "untrusted")  # an empty list trusts nothing


def test_a_signature_moved_to_another_kind_is_a_mismatch(signed, keys):
    shutil.copy(signature_path(signed["rlx"]), signature_path(signed["rlxp-flat"]))
    assert "the signature covers" in str(refused(signed["rlxp-flat"], [public(keys[0])],
                                                 "mismatch"))
    shutil.copy(signature_path(signed["rlx"]), signature_path(signed["rlxp-dir"]))
    assert "for a rlx artifact, this is a folder" in str(
        refused(signed["rlxp-dir"], [public(keys[0])], "mismatch"))


def test_a_signature_of_another_file_of_the_same_kind_is_a_mismatch(signed, keys, tmp_path):
    other = tmp_path / "other.rlx"
    graph, weights = seeds._mlp()
    write_rlx(other, bake(graph, {k: v + 1 for k, v in weights.items()}, BakeOptions())[0])
    shutil.copy(signature_path(signed["rlx"]), signature_path(other))
    refused(other, [public(keys[0])], "mismatch")


def test_every_byte_of_a_small_rlx_flipped_is_refused_naming_its_part(signed, keys):
    """The whole file: preamble, header, padding and every blob."""
    path = signed["rlx"]
    original = path.read_bytes()
    parts = _documented_parts(path, "rlx")
    owner = [name for name, length in parts for _ in range(length)]
    trusted = [public(keys[0])]
    for at in range(len(original)):
        data = bytearray(original)
        data[at] ^= 0x01
        path.write_bytes(data)
        error = refused(path, trusted, "mismatch")
        assert f"{owner[at]} (bytes" in str(error), (at, str(error))
    path.write_bytes(original)
    assert verify_signature(path, trusted).verified


@pytest.mark.parametrize("kind", ["rlx-encrypted", "rlxp-flat", "rlxp-zip"])
def test_bytes_of_every_part_flipped_are_refused(signed, keys, kind):
    path = signed[kind]
    original = path.read_bytes()
    start = 0
    for name, length in _documented_parts(path, kind):
        for at in {start, start + length // 2, start + length - 1}:
            data = bytearray(original)
            data[at] ^= 0x80
            path.write_bytes(data)
            assert f"{name} (bytes" in str(refused(path, [public(keys[0])], "mismatch"))
        start += length
    path.write_bytes(original)


@pytest.mark.parametrize("change", ["truncate", "extend"])
def test_a_shorter_or_longer_file_is_a_mismatch(signed, keys, change):
    path = signed["rlxp-flat"]
    data = path.read_bytes()
    path.write_bytes(data[:-1] if change == "truncate" else data + b"\0")
    assert "the signature covers" in str(refused(path, [public(keys[0])], "mismatch"))


def test_every_byte_of_the_signature_file_flipped_is_refused(signed, keys):
    sig = signature_path(signed["rlx"])
    original = sig.read_bytes()
    trusted = [public(keys[0])]
    reasons = set()
    for at in range(len(original)):
        data = bytearray(original)
        data[at] ^= 0x01
        sig.write_bytes(data)
        with pytest.raises(SignatureError) as err:
            verify_signature(signed["rlx"], trusted)
        expected = "malformed" if at < 16 or 88 <= at < 96 else \
            "untrusted" if at < 24 else "invalid"  # magic..flags, length | key id | the rest
        assert err.value.reason == expected, (at, err.value)
        reasons.add(err.value.reason)
    assert reasons == {"malformed", "untrusted", "invalid"}
    for cut in (0, 50, 95, len(original) - 1):
        sig.write_bytes(original[:cut])
        refused(signed["rlx"], trusted, "malformed")
    sig.write_bytes(original + b"\0")
    refused(signed["rlx"], trusted, "malformed")


def test_a_signature_claiming_another_kind_is_a_mismatch(signed, keys):
    """The parts are right, the kind is not (a lying signer): the magic decides."""
    path, key = signed["rlx"], keys[0]
    kid = key_id(key)
    message = _documented_message(path, "rlx", kid).replace(b"\x03rlx", b"\x09rlxp-flat", 1)
    _write_sig(signature_path(path), kid, key.sign(message), message)
    assert "for a rlxp-flat artifact, this is a rlx one" in str(
        refused(path, [public(key)], "mismatch"))


def test_a_signed_corrupt_file_still_fails_its_checksums(signed, keys):
    """A signer that skipped the checks (not rlx's) signed a blob that does not match its
    header's XXH3: the signature verifies, the reader's checksum does not."""
    path = signed["rlx"]
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # the last blob
    path.write_bytes(data)
    with pytest.raises(IntegrityError):
        sign_artifact(path, keys[0])  # rlx never signs it
    _sign_documented(path, "rlx", keys[0])
    assert verify_signature(path, [public(keys[0])]).verified
    with pytest.raises(IntegrityError, match="checksum mismatch"):
        rlx.load(path, engine="numpy", trusted_keys=[public(keys[0])])


def test_hostile_messages_signed_by_a_trusted_key_are_malformed_or_mismatched(signed, keys):
    """What a compromised signer could write: refused before any artifact byte is hashed."""
    path, key = signed["rlx"], keys[0]
    kid = key_id(key)
    head = b"rlx-signature-v1\0" + bytes([3]) + b"rlx" + kid
    part = struct.pack("<Q32sH", 1 << 62, bytes(32), 1) + b"a"
    cases = {
        head + struct.pack("<I", (1 << 20) + 1): "malformed",  # too many parts
        head + struct.pack("<I", 2) + part: "malformed",  # ends inside part 1
        head + struct.pack("<I", 1) + part[:-1] + b"\xff": "malformed",  # name not UTF-8
        head + struct.pack("<I", 2) + part + part: "malformed",  # duplicate name
        head + struct.pack("<I", 1) + part + b"x": "malformed",  # bytes after the last part
        head.replace(b"rlx" + kid, b"xyz" + kid) + struct.pack("<I", 0): "malformed",
        head[:-1] + b"\0" + struct.pack("<I", 1) + part: "malformed",  # another key id
        head + struct.pack("<I", 1) + part: "mismatch",  # 4 EiB claimed: refused by size
    }
    for message, reason in cases.items():
        _write_sig(signature_path(path), kid, key.sign(message), message)
        refused(path, [public(key)], reason)


# -- encrypted files: verified before decrypting ---------------------------------------------
def test_a_tampered_encrypted_file_is_refused_before_any_key_derivation(signed, keys,
                                                                       monkeypatch):
    path = signed["rlx-encrypted"]
    data = bytearray(path.read_bytes())
    data[200] ^= 1  # inside chunk 0
    path.write_bytes(data)

    def no_kdf(*args, **kwargs):
        raise AssertionError("the KDF ran before the signature was checked")

    monkeypatch.setattr(crypto.argon2_ll, "hash_secret_raw", no_kdf)
    with pytest.raises(SignatureError, match="chunk 0"):
        open_artifact(path, password=PASSWORD, trusted_keys=[public(keys[0])])


def test_an_encrypted_file_is_signed_and_verified_without_its_password(signed, keys,
                                                                      monkeypatch):
    monkeypatch.setattr(crypto.argon2_ll, "hash_secret_raw", None)  # never called
    sign_artifact(signed["rlx-encrypted"], keys[1])
    assert verify_signature(signed["rlx-encrypted"], [public(keys[1])]).kind == "rlx-encrypted"


# -- dir packages -----------------------------------------------------------------------------
def _open_refused(path, keys, reason: str) -> SignatureError:
    """`refused`, by the reader: `open_artifact` verifies the members it mapped."""
    with pytest.raises(SignatureError) as err:
        open_artifact(path, trusted_keys=keys)
    assert err.value.reason == reason, err.value
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    return err.value


@pytest.mark.parametrize("check", [refused, _open_refused], ids=["verify", "open"])
def test_dir_package_extra_missing_or_symlinked_members_are_refused(signed, keys, check):
    folder, trusted = signed["rlxp-dir"], [public(keys[0])]
    (folder / "notes.txt").write_text("unsigned")
    assert "notes.txt is not covered" in str(check(folder, trusted, "mismatch"))
    (folder / "notes.txt").unlink()
    (io_json,) = (folder / "graph").glob("io.*.json")  # named by its content's digest
    saved = io_json.read_bytes()
    io_json.unlink()
    assert f"graph/{io_json.name} is missing" in str(check(folder, trusted, "mismatch"))
    io_json.write_bytes(saved[:-1] + b" ")
    assert f"member graph/{io_json.name} differs" in str(check(folder, trusted, "mismatch"))
    outside = folder.parent / "io.json"
    outside.write_bytes(saved)
    io_json.unlink()
    io_json.symlink_to(outside)
    assert "not a regular file" in str(check(folder, trusted, "mismatch"))
    with pytest.raises(ArtifactError, match="not a regular file"):
        sign_artifact(folder, keys[0])


def test_a_dir_package_with_a_trailing_slash_has_its_signature_beside_it(signed):
    assert signature_path(f"{signed['rlxp-dir']}/") == signed["rlxp-dir"].with_name("pkg.sig")


# -- changes after verification, memory ------------------------------------------------------
def test_a_file_rewritten_after_verification_is_refused(signed, keys):
    info = verify_signature(signed["rlx"], [public(keys[0])])
    info.check_unchanged()
    data = signed["rlx"].read_bytes()
    signed["rlx"].unlink()
    signed["rlx"].write_bytes(data)  # same bytes, another inode
    with pytest.raises(SignatureError, match="changed after its signature was verified") as e:
        info.check_unchanged()
    assert e.value.reason == "changed"


def test_verifying_streams_a_large_file_through_a_small_buffer(tmp_path, keys):
    path = tmp_path / "large.rlx"
    path.write_bytes(flips.large_artifact(8))
    sign_artifact(path, keys[0])
    tracemalloc.start()
    try:
        verify_signature(path, [public(keys[0])])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < (1 << 20) + (256 << 10), peak  # the 1 MiB buffer, not the 8 MiB file


def test_signature_errors_pickle_with_their_reason():
    error = pickle.loads(pickle.dumps(SignatureError("x.rlx: not signed", "unsigned")))
    assert (str(error), error.reason) == ("x.rlx: not signed", "unsigned")
    assert isinstance(error, ArtifactError)


# -- keys -------------------------------------------------------------------------------------
def test_key_files_are_pem_private_0600_and_never_replaced_silently(tmp_path, keys):
    private, pub = save_keypair(keys[0], tmp_path / "k")
    assert private.stat().st_mode & 0o777 == 0o600
    assert private.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert pub.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    loaded = serialization.load_pem_private_key(private.read_bytes(), None)
    assert key_id(loaded) == key_id(keys[0])
    with pytest.raises(SigningKeyError, match="already exist"):
        save_keypair(keys[1], tmp_path / "k")
    save_keypair(keys[1], tmp_path / "k", overwrite=True)
    assert key_id(load_private_key(private)) == key_id(keys[1])


def test_an_encrypted_private_key_needs_its_password(tmp_path, keys, signed):
    private, _ = save_keypair(keys[0], tmp_path / "k", password="s3cret")
    assert private.read_bytes().startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    with pytest.raises(SigningKeyError, match="is encrypted; pass its password"):
        sign_artifact(signed["rlx"], private)
    with pytest.raises(SigningKeyError, match="wrong password"):
        load_private_key(private, "wrong")
    assert key_id(load_private_key(private, "s3cret")) == key_id(keys[0])
    plain, _ = save_keypair(keys[0], tmp_path / "plain")
    with pytest.raises(SigningKeyError, match="not encrypted"):
        load_private_key(plain, "s3cret")


def test_wrong_kinds_of_keys_are_refused(tmp_path, keys):
    private, pub = save_keypair(keys[0], tmp_path / "k")
    with pytest.raises(SigningKeyError, match="is a private key"):
        load_public_key(private)
    with pytest.raises(SigningKeyError, match="that is a public key"):
        load_private_key(pub)
    with pytest.raises(SigningKeyError, match="where a public key is wanted"):
        load_public_key(keys[0])
    # P-256 keys verify model-signing bundles (test_model_signing.py); other curves nothing
    k1_pem = ec.generate_private_key(ec.SECP256K1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(SigningKeyError, match="ECDSA secp256k1; rlx verifies Ed25519"):
        load_public_key(k1_pem)
    with pytest.raises(SigningKeyError, match="not a PEM public key"):
        load_public_key(b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    with pytest.raises(SigningKeyError, match="cannot read"):
        load_public_key(tmp_path / "missing.pub")


def test_the_key_id_is_the_documented_hash():
    key = generate_keypair().public_key()
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert key_id(key) == hashlib.sha256(raw).digest()[:8]


# -- an independent verifier, from docs/format.md alone --------------------------------------
def _align64(n: int) -> int:
    return (n + 63) // 64 * 64


def _documented_parts(path: Path, kind: str) -> list[tuple[str, int]]:
    """(name, length) of every part, as the docs' table says to cut each kind."""
    if kind == "rlxp-dir":
        files = sorted(p for p in path.rglob("*") if p.is_file())
        return [(p.relative_to(path).as_posix(), p.stat().st_size) for p in files]
    data = path.read_bytes()
    if kind == "rlx":
        (h,) = struct.unpack_from("<Q", data, 16)
        blobs = mutate.split_rlx(data)[0]["blobs"]
        cuts = [(0, "header")] + [(_align64(40 + h) + b["offset"], f"blob {i}")
                                  for i, b in enumerate(blobs)]
    elif kind == "rlx-encrypted":
        chunk, length = struct.unpack_from("<IQ", data, 44)
        count = max(1, -(-length // chunk))
        cuts = [(0, "encryption header")] + [(63 + i * (chunk + 16), f"chunk {i}")
                                             for i in range(count)]
    elif kind == "rlxp-flat":
        (t,) = struct.unpack_from("<Q", data, 16)
        toc = json.loads(data[24:24 + t])
        start = _align64(40 + t)
        rows = [(toc["graph"], "graph"), (toc["placement"], "placement")]
        rows += [(r, f"tensor {r['name']}") for r in toc["tensors"]]
        rows += [(r, f"sidecar {r['id']}") for r in toc["sidecars"]]
        cuts = [(0, "header")] + [(start + r["offset"], n) for r, n in rows if r is not None]
    else:
        with zipfile.ZipFile(path) as archive:
            cuts = [(i.header_offset, f"member {i.filename}") for i in archive.infolist()]
            cuts.append((archive.start_dir, "central directory"))
    cuts.sort()
    assert cuts[0][0] == 0 and len({c for c, _ in cuts}) == len(cuts)  # no empty parts here
    ends = [c for c, _ in cuts[1:]] + [len(data)]
    return [(name, end - start) for (start, name), end in zip(cuts, ends)]


def _documented_message(path: Path, kind: str, kid: bytes) -> bytes:
    files = {}
    if kind == "rlxp-dir":
        files = {name: (path / name).read_bytes() for name, _ in _documented_parts(path, kind)}
    data = b"" if kind == "rlxp-dir" else path.read_bytes()
    out = [b"rlx-signature-v1\x00", bytes([len(kind)]), kind.encode(), kid]
    parts = _documented_parts(path, kind)
    out.append(struct.pack("<I", len(parts)))
    start = 0
    for name, length in parts:
        chunk = files[name] if kind == "rlxp-dir" else data[start:start + length]
        start += length
        encoded = name.encode("utf-8")
        out += [struct.pack("<Q", length), hashlib.sha256(chunk).digest(),
                struct.pack("<H", len(encoded)), encoded]
    return b"".join(out)


def _write_sig(path: Path, kid: bytes, signature: bytes, message: bytes) -> None:
    path.write_bytes(b"RLXSIG01" + struct.pack("<II", 1, 0) + kid + signature
                     + struct.pack("<Q", len(message)) + message)


def _sign_documented(path: Path, kind: str, key) -> None:
    kid = hashlib.sha256(key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)).digest()[:8]
    message = _documented_message(path, kind, kid)
    _write_sig(signature_path(path), kid, key.sign(message), message)


@pytest.mark.parametrize("kind", KINDS)
def test_the_documented_layout_verifies_with_raw_ed25519(signed, keys, kind):
    path = signed[kind]
    sig = (path.parent / (path.name + ".sig")).read_bytes()
    magic, version, flags = struct.unpack_from("<8sII", sig)
    assert (magic, version, flags) == (b"RLXSIG01", 1, 0)
    raw = keys[0].public_key().public_bytes(serialization.Encoding.Raw,
                                           serialization.PublicFormat.Raw)
    kid = hashlib.sha256(raw).digest()[:8]
    assert sig[16:24] == kid
    (length,) = struct.unpack_from("<Q", sig, 88)
    assert len(sig) == 96 + length
    message = _documented_message(path, kind, kid)
    Ed25519PublicKey.from_public_bytes(raw).verify(sig[24:88], message)  # raises if not
    assert sig[96:] == message
    # and the other way: a signature written from the docs verifies with rlx
    _sign_documented(path, kind, keys[1])
    assert verify_signature(path, [public(keys[1])]).verified


def test_parts_tile_the_file_as_documented(signed):
    for kind, path in signed.items():
        parts = _documented_parts(path, kind)
        total = sum(n for _, n in parts)
        expected = sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) \
            if kind == "rlxp-dir" else os.path.getsize(path)
        assert total == expected, kind


def test_an_oversized_signature_file_is_refused_before_it_is_read(signed, keys):
    sig = signature_path(signed["rlx"])
    header = sig.read_bytes()[:88]
    sig.write_bytes(header + (1 << 62).to_bytes(8, "little"))  # claims a 4 EiB message
    assert "does not fit" in str(refused(signed["rlx"], [public(keys[0])], "malformed"))
    with sig.open("r+b") as f:
        f.truncate((64 << 20) + 97)  # sparse: past the cap, nothing to read
    tracemalloc.start()
    try:
        refused(signed["rlx"], [public(keys[0])], "malformed")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak
