"""OpenSSF model-signing bundles (docs/format.md, "model-signing bundles"), checked against the
`model_signing` package itself, both ways: what rlx signs verifies with that package's
Python API and its command line, what the package signs (API and command line) verifies in
rlx and runs, and tampering or a wrong key is refused by both (by rlx typed, in one line)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import model_signing.hashing
import model_signing.signing
import model_signing.verifying
import numpy as np
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec

import rlx
from rlx.artifact import open_artifact
from rlx.artifact.signing import (
    generate_keypair,
    key_id,
    load_public_key,
    read_signature,
    save_keypair,
    sign_artifact,
    signature_path,
    verify_signature,
)
from rlx.errors import SignatureError, SigningKeyError
from tests.artifact.kinds import KINDS, PASSWORD, small_model, write_every_kind
from tests.baking.models import mlp_forward


@pytest.fixture(scope="module")
def model():
    return small_model()


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """PEM files: an ECDSA P-256 pair (rlx keygen's), a second one, an encrypted P-384 pair
    and an Ed25519 pair, by name; each private key at NAME, its public key at NAME.pub."""
    folder = tmp_path_factory.mktemp("keys")
    made = {"p256": generate_keypair("ecdsa-p256"), "other": generate_keypair("ecdsa-p256"),
            "p384": ec.generate_private_key(ec.SECP384R1()), "ed25519": generate_keypair()}
    for name, key in made.items():
        save_keypair(key, folder / name, password=PASSWORD if name == "p384" else None)
    return {name: (folder / name, folder / f"{name}.pub") for name in made}


@pytest.fixture
def artifacts(tmp_path, model):
    """The same model as every kind of artifact, unsigned."""
    return write_every_kind(tmp_path, model[0])


def package_verifies(path: Path, public: Path, signature: Path | None = None) -> None:
    """model_signing's own verifier (raises ValueError on any failure)."""
    model_signing.verifying.Config().use_elliptic_key_verifier(public_key=public).verify(
        path, signature or signature_path(path))


def package_signs(path: Path, private: Path, **hashing) -> Path:
    config = model_signing.signing.Config().use_elliptic_key_signer(private_key=private)
    if hashing:
        config.set_hashing_config(model_signing.hashing.Config().use_shard_serialization(
            **hashing))
    config.sign(path, signature_path(path))
    return signature_path(path)


def package_cli(*argv) -> tuple[int, str]:
    """model_signing's command line: its exit code and what it printed (either stream)."""
    done = subprocess.run([sys.executable, "-m", "model_signing", *map(str, argv)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)
    return done.returncode, done.stdout


def runs_like_the_model(path: Path, kind: str, model, public: Path) -> None:
    x = np.random.default_rng(3).standard_normal((5, 32)).astype(np.float32)
    password = PASSWORD if kind == "rlx-encrypted" else None
    loaded = rlx.load(path, engine="numpy", password=password, trusted_keys=[public])
    np.testing.assert_allclose(loaded.run({"x": x})[0], mlp_forward(x, model[1]),
                               rtol=1e-5, atol=1e-5)  # float64 numpy, not rlx


def refused(path: Path, public: Path, reason: str, match: str = "") -> SignatureError:
    """rlx refuses by path and as the loader opens it, with `reason`, in one line."""
    for check in (lambda: verify_signature(path, [public]),
                  lambda: open_artifact(path, trusted_keys=[public])):
        with pytest.raises(SignatureError, match=match) as err:
            check()
        assert err.value.reason == reason, err.value
        assert str(path) in str(err.value) and "\n" not in str(err.value)
    return err.value


# -- rlx signs, model_signing verifies ---------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_what_rlx_signs_the_package_verifies_and_rlx_runs(artifacts, keys, model, kind):
    path, (private, public) = artifacts[kind], keys["p256"]
    info = sign_artifact(path, private, format="model-signing")
    assert (info.format, info.kind, info.signature) == ("model-signing", kind,
                                                         signature_path(path))
    package_verifies(path, public)
    checked = verify_signature(path, [public])
    assert (checked.format, checked.kind, checked.verified) == ("model-signing", kind, True)
    assert checked.key_id == key_id(load_public_key(public)).hex()
    runs_like_the_model(path, kind, model, public)


def test_the_package_command_line_verifies_what_rlx_signs_and_refuses_a_change(
        artifacts, keys):
    path, (private, public) = artifacts["rlx"], keys["p384"]
    sign_artifact(path, private, password=PASSWORD, format="model-signing")
    argv = ("verify", "key", path, "--signature", signature_path(path))
    code, said = package_cli(*argv, "--public_key", public)
    assert code == 0 and "Verification succeeded" in said, said
    code, said = package_cli(*argv, "--public_key", keys["other"][1])
    assert code != 0 and "Key mismatch" in said, said
    _flip(path, path.stat().st_size // 2)
    code, said = package_cli(*argv, "--public_key", public)
    assert code != 0 and "Hash mismatch" in said, said


# -- model_signing signs, rlx verifies ---------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_what_the_package_signs_rlx_verifies_and_runs(artifacts, keys, model, kind):
    path, (private, public) = artifacts[kind], keys["p256"]
    package_signs(path, private)
    info = verify_signature(path, [public])
    assert (info.format, info.kind, info.verified) == ("model-signing", kind, True)
    runs_like_the_model(path, kind, model, public)


def test_what_the_package_command_line_signs_rlx_verifies(artifacts, keys, model):
    path, (private, public) = artifacts["rlxp-dir"], keys["p256"]
    code, said = package_cli("sign", "key", path, "--private_key", private, "--signature",
                             signature_path(path))
    assert code == 0, said
    assert verify_signature(path, [public]).parts == sum(1 for p in path.rglob("*")
                                                         if p.is_file())
    runs_like_the_model(path, "rlxp-dir", model, public)


def test_a_bundle_of_shards_verifies_and_names_the_changed_range(artifacts, keys):
    path, (private, public) = artifacts["rlx"], keys["p256"]
    package_signs(path, private, shard_size=256)
    info = verify_signature(path, [public])
    assert info.parts == -(-path.stat().st_size // 256)
    _flip(path, 700)
    refused(path, public, "mismatch", r"\(bytes 512\.\.768\) differs from the signed bytes")


# -- refusals, by both --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["rlx", "rlxp-zip", "rlxp-dir"])
def test_a_changed_artifact_is_refused_by_both(artifacts, keys, kind):
    path, (private, public) = artifacts[kind], keys["p256"]
    sign_artifact(path, private, format="model-signing")
    member = path / "rlx.json" if path.is_dir() else path
    _flip(member, member.stat().st_size - 3)
    with pytest.raises(ValueError, match="Hash mismatch"):
        package_verifies(path, public)
    refused(path, public, "mismatch", "differs from the signed bytes")


def test_a_file_added_to_a_signed_folder_is_refused_by_both(artifacts, keys):
    path, (private, public) = artifacts["rlxp-dir"], keys["p256"]
    sign_artifact(path, private, format="model-signing")
    (path / "extra.bin").write_bytes(b"x")
    with pytest.raises(ValueError, match="Extra files"):
        package_verifies(path, public)
    refused(path, public, "mismatch", "extra.bin is not covered by the signature")


def test_another_key_is_refused_by_both(artifacts, keys):
    path = artifacts["rlx"]
    sign_artifact(path, keys["p256"][0], format="model-signing")
    with pytest.raises(ValueError, match="Key mismatch"):
        package_verifies(path, keys["other"][1])
    refused(path, keys["other"][1], "untrusted", "not trusted")
    err = refused(path, keys["ed25519"][1], "untrusted", "not trusted")
    assert "Ed25519 key verifies rlx .sig files only" in str(err)


def test_a_forged_signature_or_statement_is_refused_by_both(artifacts, keys):
    path, (private, public) = artifacts["rlx"], keys["p256"]
    sign_artifact(path, private, format="model-signing")
    sig = signature_path(path)
    bundle = json.loads(sig.read_text())
    envelope = bundle["dsseEnvelope"]
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["subject"][0]["name"] = "renamed"  # any change to what was signed
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    sig.write_text(json.dumps(bundle))
    with pytest.raises(InvalidSignature):  # what the package lets through
        package_verifies(path, public)
    refused(path, public, "invalid", "is not valid for key")
    sig.write_text(json.dumps(bundle)[:-3])
    refused(path, public, "malformed", "not a valid model-signing bundle")


def test_a_certificate_bundle_is_named_for_what_it_is(artifacts, keys):
    path, (private, public) = artifacts["rlx"], keys["p256"]
    sign_artifact(path, private, format="model-signing")
    bundle = json.loads(signature_path(path).read_text())
    bundle["verificationMaterial"] = {"certificate": {"rawBytes": "AAAA"}, "tlogEntries": []}
    signature_path(path).write_text(json.dumps(bundle))
    refused(path, public, "untrusted", "signed with a certificate")


# -- which key for which format -------------------------------------------------------------
def test_each_format_refuses_the_other_kind_of_key_in_one_line(artifacts, keys):
    path = artifacts["rlx"]
    with pytest.raises(SigningKeyError, match="is an Ed25519 key; model-signing bundles are "
                                              "signed with ECDSA P-256, P-384 or P-521"):
        sign_artifact(path, keys["ed25519"][0], format="model-signing")
    with pytest.raises(SigningKeyError, match="is an ECDSA P-256 key; the rlx .sig format "
                                              "signs with Ed25519"):
        sign_artifact(path, keys["p256"][0])
    with pytest.raises(SigningKeyError, match="signs with a PEM key file"):
        sign_artifact(path, generate_keypair("ecdsa-p256"), format="model-signing")
    sign_artifact(path, keys["ed25519"][0])  # an rlx .sig: an ECDSA key is not its signer
    err = refused(path, keys["p256"][1], "untrusted", "not trusted")
    assert "ECDSA key verifies model-signing bundles only" in str(err)
    assert verify_signature(path, [keys["p256"][1], keys["ed25519"][1]]).format == "rlx"


def test_the_signature_file_is_told_by_its_content_not_its_name(artifacts, keys, tmp_path):
    path, (private, public) = artifacts["rlxp-flat"], keys["p256"]
    elsewhere = tmp_path / "model.sigstore.json"
    sign_artifact(path, private, signature=elsewhere, format="model-signing")
    assert not signature_path(path).exists()
    package_verifies(path, public, elsewhere)
    shown = read_signature(path, elsewhere)
    assert shown is not None and (shown.format, shown.verified) == ("model-signing", False)
    info = verify_signature(path, [public], signature=elsewhere)
    assert info.key_id == shown.key_id and info.verified
    loaded = rlx.load(path, engine="numpy", trusted_keys=[public], signature=elsewhere)
    assert loaded is not None


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_bundle_without_a_key_hint_is_tried_with_every_trusted_key(artifacts, keys):
    path, (private, public) = artifacts["rlx"], keys["p256"]
    sign_artifact(path, private, format="model-signing")
    bundle = json.loads(signature_path(path).read_text())
    del bundle["verificationMaterial"]["publicKey"]["hint"]  # as before model-signing 1.0
    signature_path(path).write_text(json.dumps(bundle))
    package_verifies(path, public)
    assert verify_signature(path, [keys["other"][1], public]).key_id == "unnamed"
    refused(path, keys["other"][1], "invalid", "is not valid for key unnamed")


def test_without_the_package_bundles_verify_and_signing_names_the_extra(
        artifacts, keys, model, monkeypatch):
    path, (private, public) = artifacts["rlxp-zip"], keys["p256"]
    package_signs(path, private)
    for name in [m for m in sys.modules if m.split(".")[0] == "model_signing"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "model_signing", None)  # as if not installed
    runs_like_the_model(path, "rlxp-zip", model, public)
    with pytest.raises(SigningKeyError, match=r"pip install 'rlx\[signing\]'"):
        sign_artifact(path, private, format="model-signing")


def test_every_byte_of_a_bundle_flipped_is_refused_typed_or_vouches_for_the_same(
        artifacts, keys):
    """A bundle's unsigned fields (its tlog list, a signature's keyid) may change freely;
    anything else changed is a `SignatureError`, and nothing ever makes other content pass."""
    path, (private, public) = artifacts["rlx"], keys["p256"]
    signed = sign_artifact(path, private, format="model-signing")
    original = signature_path(path).read_bytes()
    passed = 0
    for at in range(len(original)):
        flipped = bytearray(original)
        flipped[at] ^= 0x04
        signature_path(path).write_bytes(bytes(flipped))
        try:
            info = verify_signature(path, [public])
        except SignatureError as err:
            assert "\n" not in str(err) and err.reason in SignatureError.REASONS
            continue
        assert info.digest == signed.digest  # the same statement, so the same bytes
        passed += 1
    assert passed < len(original) // 10, passed


def test_a_bundle_of_a_file_does_not_pass_for_a_folder_nor_the_reverse(artifacts, keys):
    (private, public), tmp = keys["p256"], artifacts["rlx"].parent
    for signed, other in (("rlxp-flat", "rlxp-dir"), ("rlxp-dir", "rlxp-flat")):
        bundle = tmp / f"{signed}.bundle"
        sign_artifact(artifacts[signed], private, signature=bundle, format="model-signing")
        with pytest.raises(SignatureError, match="the signature is for a") as err:
            verify_signature(artifacts[other], [public], signature=bundle)
        assert err.value.reason == "mismatch"
