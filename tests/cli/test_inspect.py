"""`rlx-bake inspect`: what a file holds, checksum verification, encrypted files."""

from __future__ import annotations

import shutil

from rlx.artifact import read_rlx
from tests.cli.conftest import PASSWORD, assert_error


def test_inspect_tables(cli, files):
    result = cli("inspect", files.rlx)
    assert result.code == 0, result.err
    for text in ("mnist_mlp", "checksums", "OK", "inputs and outputs", "logits",
                 "weight table", "gguf_tq2_0", "[784, 64]", "computing nodes by op type",
                 "MatMul", "compact"):
        assert text in result.out


def test_inspect_json(cli, files):
    d = cli("inspect", files.rlx, "--json").json()
    assert d["checksums"] == {"ok": True, "error": None}
    assert d["file_bytes"] == files.rlx.stat().st_size and not d["encrypted"]
    assert d["meta"]["inputs"] == [{"name": "x", "shape": [32, 784], "dtype": "f32"}]
    assert d["meta"]["outputs"][0]["name"] == "logits"
    rows = {w["name"]: w for w in d["weights"]}
    assert rows["w1"]["encoding"] == "gguf_tq2_0" and rows["w1"]["shape"] == [784, 64]
    assert rows["w1"]["bytes"] == 196 * 66 and rows["w1"]["in_table"]
    assert not rows["w1"]["in_graph"]  # compact: bytes only in the table
    assert d["memory"]["mode"] == "compact" and d["memory"]["needs_materialize"]
    # ONNX op types, computing nodes only: 2 matmuls (w1, K = 784, is stored as one TQ2_0
    # stream that DecodeWeight decodes: a stored weight, not a computing node), 2 Adds, a Relu
    assert d["ops"] == {"MatMul": 2, "Add": 2, "Relu": 1}
    assert d["computing_nodes"]["count"] == 5 and "graph inputs" in d["computing_nodes"][
        "counted"]


def test_inspect_reports_the_blob_that_fails(cli, files, tmp_path):
    damaged = tmp_path / "damaged.rlx"
    shutil.copy(files.rlx, damaged)
    content = bytearray(damaged.read_bytes())
    w1 = bytes(read_rlx(files.rlx).weight("w1").data)
    at = content.find(w1)
    assert at > 0
    content[at + 100] ^= 0xFF
    damaged.write_bytes(bytes(content))
    result = cli("inspect", damaged, "--json")
    assert result.code == 1
    checksums = result.json()["checksums"]
    assert not checksums["ok"] and "checksum mismatch in blob" in checksums["error"]
    assert "'w1'" in checksums["error"]
    human = cli("inspect", damaged)
    assert human.code == 1 and "FAILED: " in human.out


def test_inspect_encrypted_without_password(cli, files):
    d = cli("inspect", files.encrypted, "--json").json()
    assert d["encrypted"] and d["locked"]
    enc = d["encryption"]
    assert enc["container"] == "RLXENC01" and enc["kdf"]["algorithm"] == "argon2id"
    assert enc["kdf"]["m_cost_kib"] > 0 and enc["chunks"] >= 1
    assert enc["file_bytes"] == files.encrypted.stat().st_size
    assert enc["plaintext_bytes"] == files.rlx.stat().st_size
    assert "key derivation" in cli("inspect", files.encrypted).out


def test_inspect_encrypted_with_password_file(cli, files, tmp_path):
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    d = cli("inspect", files.encrypted, "--password-file", secret, "--json").json()
    assert not d["locked"] and d["checksums"]["ok"] and d["meta"]["name"] == "mnist_mlp"


def test_wrong_password(cli, files, tmp_path):
    secret = tmp_path / "password"
    secret.write_text("not it")
    assert_error(cli("inspect", files.encrypted, "--password-file", secret),
                 r"decrypt failed \(wrong password or corrupt file\)")


def test_missing_file(cli, tmp_path):
    assert_error(cli("inspect", tmp_path / "none.rlx"), r"none\.rlx: No such file")


def test_not_an_rlx_file(cli, files):
    assert_error(cli("inspect", files.npz), r"bad magic \(expected RLXBAKE1")
