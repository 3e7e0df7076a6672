"""Array files the commands read (`run --input/--inputs/--stream`, `verify --inputs`, `bake
--calibrate`) are checked through the descriptor they are read from: a device or a FIFO
is refused in one line before any read (a FIFO with no writer hung `run`, `/dev/zero` was
read until memory ran out), and a regular file still loads."""

from __future__ import annotations

import os

import numpy as np
import pytest

from rlx.artifact import write_rlx
from tests.artifact.test_passwords import tiny_file
from tests.cli.conftest import assert_error


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("arrays") / "tiny.rlx"
    write_rlx(path, tiny_file())
    return path


@pytest.mark.parametrize("option", ["--input", "--inputs", "--stream"])
def test_a_fifo_is_refused_without_waiting(cli, model, tmp_path, option):
    fifo = tmp_path / "x.fifo"
    os.mkfifo(fifo)  # no writer: an open() without O_NONBLOCK would hang here
    value = f"x={fifo}" if option == "--input" else str(fifo)
    assert_error(cli("run", model, option, value), rf"^error: {fifo} is a FIFO, not a "
                                                   r"regular file$")


def test_a_device_is_refused_unread(cli, model, tmp_path):
    assert_error(cli("verify", model, "--onnx", tmp_path / "none.onnx", "--inputs",
                     "/dev/zero"),
                 r"^error: /dev/zero is a character device, not a regular file$")
    assert_error(cli("run", model, "--input", "x=/dev/zero"),
                 r"^error: /dev/zero is a character device, not a regular file$")


def test_regular_files_still_load_and_wrong_kinds_are_named(cli, model, tmp_path):
    x = np.ones((1, 2), np.float32)
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "feeds.npz", x=x)
    for args in (("--input", f"x={tmp_path / 'x.npy'}"), ("--inputs", tmp_path / "feeds.npz")):
        result = cli("run", model, *args, "--repeat", "1", "--json")
        assert result.code == 0, result.err
        assert result.json()["outputs"][0]["shape"] == [1, 2]
    assert_error(cli("run", model, "--input", f"x={tmp_path / 'feeds.npz'}"),
                 r"feeds\.npz is an \.npz archive; expected one array \(\.npy\)$")
    assert_error(cli("run", model, "--inputs", tmp_path / "x.npy"),
                 r"x\.npy: it holds one array; expected an \.npz archive of arrays by name$")
