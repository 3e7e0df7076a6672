"""Passwords are `str` or `bytes`, nothing else: an int was once turned into that many NUL
bytes (`bytes(1234)`) and a lone surrogate escaped as `UnicodeEncodeError`. Every entry
point (`write_rlx`, `read_rlx`, `rlx.load`) refuses both with a one-line ArtifactError,
(the CLI's `--password-file`: tests/cli/test_password_file.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import rlx
from rlx.artifact import RlxFile, read_rlx, write_rlx
from rlx.artifact.crypto import KdfParams
from rlx.errors import ArtifactError
from rlx.ir import DType, Graph, Shape

FAST = KdfParams(m_cost=64, t_cost=1, p_cost=1)
NOT_A_PASSWORD = [1234, 12.5, ["pw"], object()]
SURROGATE = "pass\udc80word"


def tiny_file() -> RlxFile:
    g = Graph("tiny")
    x = g.input("x", Shape((1, 2), DType.F32))
    g.set_outputs([g.matmul(x, g.constant(np.ones((2, 2), np.float32)))])
    return RlxFile.from_baked(g, [])


@pytest.fixture(scope="module")
def sealed(tmp_path_factory):
    path = tmp_path_factory.mktemp("pw") / "sealed.rlx"
    write_rlx(path, tiny_file(), password="pw", kdf=FAST)
    return path


@pytest.mark.parametrize("password", NOT_A_PASSWORD, ids=lambda p: type(p).__name__)
def test_write_refuses_a_password_that_is_not_str_or_bytes(tmp_path, password):
    path = tmp_path / "x.rlx"
    with pytest.raises(ArtifactError, match=r"^encryption password must be str or bytes, "
                                            rf"not {type(password).__name__}$"):
        write_rlx(path, tiny_file(), password=password, kdf=FAST)
    assert not path.exists()
    assert os.listdir(tmp_path) == []  # no temporary file left either


@pytest.mark.parametrize("password", NOT_A_PASSWORD, ids=lambda p: type(p).__name__)
def test_read_and_load_refuse_a_password_that_is_not_str_or_bytes(sealed, password):
    for read in (lambda: read_rlx(sealed, password=password),
                 lambda: rlx.load(sealed, engine="numpy", password=password)):
        with pytest.raises(ArtifactError, match=r"^decryption password must be str or bytes"):
            read()


def test_a_lone_surrogate_is_a_typed_error_everywhere(tmp_path, sealed):
    surrogate = r"password is not valid Unicode text \(a lone surrogate at index 4\)"
    with pytest.raises(ArtifactError, match="^encryption " + surrogate):
        write_rlx(tmp_path / "x.rlx", tiny_file(), password=SURROGATE, kdf=FAST)
    with pytest.raises(ArtifactError, match="^decryption " + surrogate):
        read_rlx(sealed, password=SURROGATE)
    with pytest.raises(ArtifactError, match="^decryption " + surrogate):
        rlx.load(sealed, engine="numpy", password=SURROGATE)


def test_bytes_like_passwords_still_open_the_file(sealed):
    for password in ("pw", b"pw", bytearray(b"pw"), memoryview(b"pw")):
        assert read_rlx(sealed, password=password).graph is not None


@pytest.mark.parametrize("password", [*NOT_A_PASSWORD, SURROGATE],
                         ids=lambda p: type(p).__name__)
def test_a_plain_file_refuses_a_wrong_kind_of_password_too(tmp_path, password):
    """A plain file needs no password, but one of the wrong kind is a caller's mistake
    (it would fail on the encrypted copy of the same file): the same one-line error."""
    plain = tmp_path / "plain.rlx"
    write_rlx(plain, tiny_file())
    for read in (lambda: read_rlx(plain, password=password),
                 lambda: rlx.load(plain, engine="numpy", password=password)):
        with pytest.raises(ArtifactError, match=r"plain\.rlx: password (must be str or "
                                                r"bytes|is not valid Unicode)"):
            read()
    assert read_rlx(plain, password="unused").graph is not None  # a right kind: ignored
