"""`rlx-bake keygen`, `sign`, `verify-signature` and `--trusted-key` on run, verify and
inspect: exit codes (0 valid, 1 a failed check, 3 an error), one-line reasons, JSON."""

from __future__ import annotations

import hashlib
import shutil

import numpy as np
import pytest
from cryptography.hazmat.primitives import serialization

from tests.cli.conftest import PASSWORD, assert_error


@pytest.fixture
def signing(cli, files, tmp_path):
    """A key pair, a second public key, and a copy of the MLP signed with the first key."""
    for name in ("k", "other"):
        assert cli("keygen", "-o", tmp_path / name, "-q").code == 0
    model = tmp_path / "mlp.rlx"
    shutil.copy(files.rlx, model)
    assert cli("sign", model, "--key", tmp_path / "k", "-q").code == 0
    return tmp_path, model


def test_keygen_writes_a_private_key_0600_and_its_public_key(cli, tmp_path):
    result = cli("keygen", "-o", tmp_path / "release.key", "--json")
    assert result.code == 0, result.err
    d = result.json()
    private, public = tmp_path / "release.key", tmp_path / "release.key.pub"
    assert (d["private_key"], d["public_key"]) == (str(private), str(public))
    assert private.stat().st_mode & 0o777 == 0o600 and not d["encrypted"]
    key = serialization.load_pem_public_key(public.read_bytes())
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert d["key_id"] == hashlib.sha256(raw).digest()[:8].hex()
    assert_error(cli("keygen", "-o", private), "already exist.*--force")
    assert cli("keygen", "-o", private, "--force", "-q").code == 0
    assert cli("keygen", "-o", tmp_path / "none" / "k").code == 3  # no such folder


def test_keygen_and_sign_with_an_encrypted_key(cli, files, tmp_path, monkeypatch):
    monkeypatch.setenv("KEY_PW", "key secret")
    assert cli("keygen", "-o", tmp_path / "k", "--password-env", "KEY_PW", "-q").code == 0
    assert (tmp_path / "k").read_bytes().startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY")
    model = tmp_path / "m.rlx"
    shutil.copy(files.rlx, model)
    assert_error(cli("sign", model, "--key", tmp_path / "k"), "is encrypted; pass its password")
    result = cli("sign", model, "--key", tmp_path / "k", "--password-env", "KEY_PW", "--json")
    assert result.code == 0, result.err
    assert result.json()["signature"] == str(tmp_path / "m.rlx.sig")


def test_verify_signature_exit_codes_and_reasons(cli, signing):
    folder, model = signing
    ok = cli("verify-signature", model, "--pubkey", folder / "k.pub")
    assert ok.code == 0 and ok.out.startswith(f"OK: {model} is signed by key ")
    d = cli("verify-signature", model, "--pubkey", folder / "other.pub", "--pubkey",
            folder / "k.pub", "--json").json()
    assert d["valid"] and d["kind"] == "rlx" and d["bytes"] == model.stat().st_size
    untrusted = cli("verify-signature", model, "--pubkey", folder / "other.pub")
    assert untrusted.code == 1 and "not trusted" in untrusted.out
    assert len(untrusted.out.strip().splitlines()) == 1
    data = bytearray(model.read_bytes())
    data[-1] ^= 1
    model.write_bytes(data)
    changed = cli("verify-signature", model, "--pubkey", folder / "k.pub", "--json")
    assert changed.code == 1 and changed.json()["reason"] == "mismatch"
    (folder / "mlp.rlx.sig").unlink()
    unsigned = cli("verify-signature", model, "--pubkey", folder / "k.pub")
    assert unsigned.code == 1 and "is not signed" in unsigned.out
    assert_error(cli("verify-signature", model, "--pubkey", folder / "k"), "is a private key")
    assert_error(cli("verify-signature", folder / "missing.rlx", "--pubkey", folder / "k.pub"),
                 "does not exist")


def test_sign_to_another_path_and_verify_it(cli, signing):
    folder, model = signing
    elsewhere = folder / "release.sig"
    assert cli("sign", model, "--key", folder / "other", "-o", elsewhere, "-q").code == 0
    assert cli("verify-signature", model, "--pubkey", folder / "other.pub",
               "--signature", elsewhere).code == 0
    assert cli("verify-signature", model, "--pubkey", folder / "other.pub").code == 1


def test_run_with_trusted_key(cli, files, signing):
    folder, model = signing
    result = cli("run", model, "--input", f"x={files.x_npy}", "--trusted-key", folder / "k.pub",
                 "--json")
    assert result.code == 0, result.err
    out = folder / "out.npz"
    assert cli("run", model, "--input", f"x={files.x_npy}", "--trusted-key", folder / "k.pub",
               "--engine", "onnxruntime", "--output", out, "-q").code == 0
    np.testing.assert_allclose(np.load(out)["logits"], files.expected(), rtol=1e-4, atol=1e-4)
    assert_error(cli("run", model, "--input", f"x={files.x_npy}", "--trusted-key",
                     folder / "other.pub"), "signed by key .* not trusted")
    assert_error(cli("run", files.rlx, "--input", f"x={files.x_npy}", "--trusted-key",
                     folder / "k.pub"), "is not signed")


@pytest.mark.parametrize("command", ["tensors", "export"])
def test_tensors_and_export_with_trusted_key(cli, files, signing, command):
    folder, model = signing
    out = folder / ("w.npz" if command == "tensors" else "m.onnx")
    assert cli(command, model, "-o", out, "--trusted-key", folder / "k.pub", "-q").code == 0
    assert out.exists()
    out.unlink()
    assert_error(cli(command, model, "-o", out, "--trusted-key", folder / "other.pub"),
                 "signed by key .* not trusted")
    assert_error(cli(command, files.rlx, "-o", out, "--trusted-key", folder / "k.pub"),
                 "is not signed")
    assert not out.exists()


def test_verify_command_with_trusted_key(cli, files, signing):
    folder, model = signing
    assert cli("verify", model, "--onnx", files.onnx, "--trusted-key", folder / "k.pub",
               "-q").code == 0
    assert_error(cli("verify", model, "--onnx", files.onnx, "--trusted-key",
                     folder / "other.pub"), "not trusted")


def test_inspect_shows_the_signature(cli, files, signing):
    folder, model = signing
    d = cli("inspect", model, "--json").json()
    assert d["signature"]["signed"] and not d["signature"]["checked"]
    key = cli("verify-signature", model, "--pubkey", folder / "k.pub", "--json").json()
    assert d["signature"]["key_id"] == key["key_id"]
    human = cli("inspect", model)
    assert human.code == 0 and "(not checked: pass --trusted-key PUB)" in human.out
    checked = cli("inspect", model, "--trusted-key", folder / "k.pub")
    assert checked.code == 0 and "OK: valid, by trusted key" in checked.out
    wrong = cli("inspect", model, "--trusted-key", folder / "other.pub", "--json")
    assert wrong.code == 1 and wrong.json()["signature"]["reason"] == "untrusted"
    assert cli("inspect", files.rlx, "--json").json()["signature"]["signed"] is False


def test_an_encrypted_file_is_signed_and_checked_without_its_password(cli, files, tmp_path):
    assert cli("keygen", "-o", tmp_path / "k", "-q").code == 0
    model = tmp_path / "secret.rlx"
    shutil.copy(files.encrypted, model)
    assert cli("sign", model, "--key", tmp_path / "k", "-q").code == 0
    locked = cli("inspect", model, "--trusted-key", tmp_path / "k.pub", "--json")
    assert locked.code == 0 and locked.json()["locked"]
    assert locked.json()["signature"]["valid"] is True
    assert cli("run", model, "--input", f"x={files.x_npy}", "--password", PASSWORD,
               "--trusted-key", tmp_path / "k.pub", "-q").code == 0


def test_help_has_examples(cli):
    for command in ("keygen", "sign", "verify-signature"):
        result = cli(command, "--help")
        assert result.code == 0 and "examples:" in result.out and "exit codes" in result.out
    assert "--trusted-key" in cli("run", "--help").out
    assert "verify-signature" in cli("--help").out


# -- the model-signing format ---------------------------------------------------------------
def test_model_signing_keygen_sign_verify_run_and_inspect(cli, files, tmp_path):
    """An ECDSA key from keygen signs a bundle that verify-signature, run and inspect check
    (model_signing's own verifier: tests/artifact/test_model_signing.py)."""
    made = cli("keygen", "-o", tmp_path / "ms", "--format", "model-signing", "--json").json()
    pem = (tmp_path / "ms.pub").read_bytes()
    assert made["key_type"] == "ECDSA P-256" and b"BEGIN PUBLIC KEY" in pem
    assert made["key_id"] == hashlib.sha256(pem).hexdigest()[:16]  # model-signing's hint
    model = tmp_path / "m.rlx"
    shutil.copy(files.rlx, model)
    signed = cli("sign", model, "--key", tmp_path / "ms", "--format", "model-signing")
    assert signed.code == 0 and "(model-signing format)" in signed.out, signed.err
    bundle = (tmp_path / "m.rlx.sig").read_text()
    assert bundle.startswith('{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json"')
    ok = cli("verify-signature", model, "--pubkey", tmp_path / "ms.pub", "--json")
    assert ok.code == 0 and (ok.json()["format"], ok.json()["key_id"]) == ("model-signing",
                                                                           made["key_id"])
    out = tmp_path / "out.npz"
    assert cli("run", model, "--input", f"x={files.x_npy}", "--trusted-key", tmp_path / "ms.pub",
               "--output", out, "-q").code == 0
    np.testing.assert_allclose(np.load(out)["logits"], files.expected(), rtol=1e-4, atol=1e-4)
    shown = cli("inspect", model, "--trusted-key", tmp_path / "ms.pub", "--json").json()
    assert shown["signature"]["valid"] and shown["signature"]["format"] == "model-signing"


def test_model_signing_refuses_the_wrong_kind_of_key_in_one_line(cli, files, tmp_path):
    assert cli("keygen", "-o", tmp_path / "ed", "-q").code == 0
    assert cli("keygen", "-o", tmp_path / "ms", "--format", "model-signing", "-q").code == 0
    model = tmp_path / "m.rlx"
    shutil.copy(files.rlx, model)
    assert_error(cli("sign", model, "--key", tmp_path / "ed", "--format", "model-signing"),
                 "is an Ed25519 key; model-signing bundles are signed with ECDSA")
    assert_error(cli("sign", model, "--key", tmp_path / "ms"),
                 "is an ECDSA P-256 key; the rlx .sig format signs with Ed25519")
    assert cli("sign", model, "--key", tmp_path / "ms", "--format", "model-signing",
               "-q").code == 0
    wrong = cli("verify-signature", model, "--pubkey", tmp_path / "ed.pub")
    assert wrong.code == 1 and len(wrong.out.strip().splitlines()) == 1
    assert "FAILED: " in wrong.out and "Ed25519 key verifies rlx .sig files only" in wrong.out
    data = bytearray(model.read_bytes())
    data[100] ^= 1
    model.write_bytes(data)
    changed = cli("verify-signature", model, "--pubkey", tmp_path / "ms.pub", "--json")
    assert changed.code == 1 and changed.json()["reason"] == "mismatch"
