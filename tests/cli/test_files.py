"""`rlx-bake relayout`, `encrypt` and `decrypt`."""

from __future__ import annotations

import numpy as np
import pytest

from rlx.artifact import read_rlx
from rlx.runtime import Session
from tests.cli.conftest import PASSWORD, assert_error


@pytest.fixture
def password_file(tmp_path):
    path = tmp_path / "password"
    path.write_text(PASSWORD + "\n")
    return path


def outputs(path, x, password=None):
    file = read_rlx(path, password=password)
    return Session().compile(file.into_runtime_graph()).run({"x": x})[0]


@pytest.mark.parametrize("mode, stored", [("duplex", "table+graph"), ("runtime", "graph"),
                                          ("table", "table")])
def test_relayout(cli, files, tmp_path, mode, stored):
    out = tmp_path / "out.rlx"
    d = cli("relayout", files.rlx, "-o", out, "--memory", mode, "--json").json()
    assert d["memory_before"] == "compact" and d["bytes_after"] == out.stat().st_size
    info = cli("inspect", out, "--json").json()
    assert info["memory"]["mode"] == d["memory_after"]
    w1 = next(w for w in info["weights"] if w["name"] == "w1")
    assert "+".join(p for p in ("table", "graph") if w1[f"in_{p}"]) == stored
    np.testing.assert_array_equal(outputs(out, files.x), outputs(files.rlx, files.x))


def test_relayout_keeps_encryption(cli, files, tmp_path, password_file):
    out = tmp_path / "out.rlx"
    d = cli("relayout", files.encrypted, "-o", out, "--memory", "duplex", "--password-file",
            password_file, "--json").json()
    assert d["encrypted"] and out.read_bytes()[:8] == b"RLXENC01"
    assert read_rlx(out, password=PASSWORD).meta.memory_mode == "duplex"


def test_encrypt_then_decrypt(cli, files, tmp_path, password_file):
    sealed, opened = tmp_path / "sealed.rlx", tmp_path / "opened.rlx"
    d = cli("encrypt", files.rlx, "-o", sealed, "--password-file", password_file,
            "--json").json()
    assert d["encryption"]["file_bytes"] == sealed.stat().st_size
    assert sealed.read_bytes()[:8] == b"RLXENC01"
    result = cli("decrypt", sealed, "-o", opened, "--password-file", password_file)
    assert result.code == 0 and "decrypted" in result.out
    assert opened.read_bytes() == files.rlx.read_bytes()


def test_bare_password_works_but_warns(cli, files, tmp_path):
    out = tmp_path / "plain.rlx"
    result = cli("decrypt", files.encrypted, "-o", out, "--password", PASSWORD)
    assert result.code == 0
    assert "warning: --password is visible to other users" in result.err
    assert out.read_bytes() == files.rlx.read_bytes()


def test_decrypt_wrong_password_writes_nothing(cli, files, tmp_path):
    out = tmp_path / "plain.rlx"
    assert_error(cli("decrypt", files.encrypted, "-o", out, "--password", "nope"),
                 r"decrypt failed \(wrong password or corrupt file\)")
    assert list(tmp_path.iterdir()) == []  # no output, no temp file left behind


def test_encrypt_needs_a_password(cli, files, tmp_path):
    assert_error(cli("encrypt", files.rlx, "-o", tmp_path / "x.rlx"),
                 r"one of the arguments --password-env --password-file --password is required",
                 code=2)


def test_encrypt_refuses_encrypted_and_foreign_files(cli, files, tmp_path, password_file):
    assert_error(cli("encrypt", files.encrypted, "-o", tmp_path / "x.rlx", "--password-file",
                     password_file), r"is already encrypted")
    assert_error(cli("encrypt", files.npz, "-o", tmp_path / "x.rlx", "--password-file",
                     password_file), r"bad magic")
    assert_error(cli("decrypt", files.rlx, "-o", tmp_path / "x.rlx", "--password-file",
                     password_file), r"not an encrypted \*\.rlx file")


def test_empty_password_file(cli, files, tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    assert_error(cli("encrypt", files.rlx, "-o", tmp_path / "x.rlx", "--password-file", empty),
                 r"password file .*empty is empty")
