"""`--password-file` refuses devices, FIFOs and files over `SMALL_FILE_BYTES` before reading
a byte (`/dev/zero` was read until memory ran out), with one line naming the file."""

from __future__ import annotations

import os

import pytest

from rlx.artifact import write_rlx
from rlx.safeio import SMALL_FILE_BYTES
from tests.artifact.test_passwords import FAST, tiny_file
from tests.cli.conftest import assert_error


@pytest.fixture(scope="module")
def sealed(tmp_path_factory):
    path = tmp_path_factory.mktemp("pw") / "sealed.rlx"
    write_rlx(path, tiny_file(), password="pw", kdf=FAST)
    return path



def test_password_file_refuses_a_device_unread(cli, sealed):
    """`/dev/zero` was read until memory ran out."""
    assert_error(cli("inspect", sealed, "--password-file", "/dev/zero"),
                 r"^error: password file: /dev/zero is a character device, not a regular file$")


def test_password_file_refuses_a_fifo_without_waiting(cli, sealed, tmp_path):
    fifo = tmp_path / "pw.fifo"
    os.mkfifo(fifo)  # no writer: an open() without O_NONBLOCK would hang here
    assert_error(cli("inspect", sealed, "--password-file", fifo),
                 rf"^error: password file: {fifo} is a FIFO, not a regular file$")


def test_password_file_refuses_a_big_file(cli, sealed, tmp_path):
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate(SMALL_FILE_BYTES + 1)
    assert_error(cli("inspect", sealed, "--password-file", big),
                 rf"^error: password file: {big} is {SMALL_FILE_BYTES + 1} bytes, more than "
                 rf"the {SMALL_FILE_BYTES}-byte limit$")


def test_password_file_still_reads_a_password(cli, sealed, tmp_path):
    good = tmp_path / "pw.txt"
    good.write_text("pw\n")
    result = cli("inspect", sealed, "--password-file", good, "--json")
    assert result.code == 0, result.err
