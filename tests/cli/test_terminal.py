"""What a person at a terminal sees, in a real pseudo-terminal (the `pty` module), against
what a pipe gets: progress and colour only on the terminal, names never cut, no trailing
spaces in piped tables."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.cli.conftest import mlp_onnx

ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")
LONG = "encoder.layer.0.attention.self.query.weight.of.a.model.whose.names.never.fit.in.60.columns"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("NO_COLOR", "FORCE_COLOR", "TERM", "COLUMNS", "LINES")}
    return {**env, "TERM": "xterm-256color", **extra}


def in_pty(argv: list, columns: int = 100, timeout: float = 120) -> tuple[int, bytes]:
    """Run `python -m rlx ARGV` with stdin, stdout and stderr on a pseudo-terminal."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "rlx", *map(str, argv)], stdin=slave,
                            stdout=slave, stderr=slave, env=_env(), close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return proc.wait(timeout=timeout), b"".join(chunks)


def piped(argv: list) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlx", *map(str, argv)], capture_output=True,
                          env=_env(), timeout=120)


@pytest.fixture(scope="module")
def long_named(tmp_path_factory) -> Path:
    """The reference MLP with w1 under a name longer than a narrow terminal."""
    folder = tmp_path_factory.mktemp("terminal")
    rng = np.random.default_rng(0)
    weights = {"w1": rng.standard_normal((784, 64)).astype(np.float32),
               "b1": np.zeros(64, np.float32),
               "w2": rng.standard_normal((64, 10)).astype(np.float32),
               "b2": np.zeros(10, np.float32)}
    model = mlp_onnx(weights)
    for init in model.graph.initializer:
        if init.name == "w1":
            init.name = LONG
    for node in model.graph.node:
        node.input[:] = [LONG if i == "w1" else i for i in node.input]
    path = folder / "long.onnx"
    onnx.save(model, path)
    return path


def test_bake_on_a_terminal_shows_progress_and_colour(long_named, tmp_path):
    code, out = in_pty(["bake", long_named, "-o", tmp_path / "m.rlx", "--profile", "size"],
                       columns=400)  # the status line is one line: wide enough for a name
    assert code == 0, out.decode(errors="replace")
    assert ANSI.search(out)  # styles: bold headers and titles
    text = ANSI.sub(b"", out).decode()
    for step in ("pass 1 of", "specialize", "encode_weights", "as gguf_q8_0", "bytes written"):
        assert step in text, step
    # the counted work has a bar with its percentage and the time left (h:mm:ss)
    assert re.search(r"pass \d+ of \d+: \w+ .*\d+% .*\d:\d\d:\d\d", text), text[-2000:]


def test_calibration_is_one_progress_line_on_a_terminal(long_named, tmp_path):
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, x=np.random.default_rng(0).standard_normal((32, 784)).astype(np.float32))
    code, out = in_pty(["bake", long_named, "-o", tmp_path / "m.rlx", "--profile", "size",
                        "--calibrate", feeds], columns=400)
    assert code == 0, out.decode(errors="replace")
    text = ANSI.sub(b"", out).decode()
    assert "measuring accuracy on the calibration inputs: every weight encoded" in text
    assert "(1 of 1 tensors)" not in text  # no per-weight "encoding" line while measuring


def test_bake_piped_has_no_progress_colour_or_trailing_spaces(long_named, tmp_path):
    done = piped(["bake", long_named, "-o", tmp_path / "m.rlx", "--profile", "size"])
    assert done.returncode == 0, done.stderr
    assert b"\x1b" not in done.stdout + done.stderr
    # only the size profile's one warning that its accuracy is unchecked (no calibration)
    assert b"pass 1" not in done.stderr
    assert [line for line in done.stderr.decode().splitlines()
            if not line.startswith("warning: size profile: accuracy unchecked")] == []
    lines = done.stdout.decode().splitlines()
    assert lines and not [line for line in lines if line != line.rstrip()]


def test_inspect_never_cuts_a_name(long_named, tmp_path):
    baked = tmp_path / "m.rlx"
    assert piped(["bake", long_named, "-o", baked]).returncode == 0
    code, out = in_pty(["inspect", baked], columns=100)
    assert code == 0
    text = ANSI.sub(b"", out).decode()
    assert "…" not in text  # rich's ellipsis: nothing truncated
    table = text[text.index("\nweight table"):]
    first_cells = [line.split()[0] for line in table.splitlines()[5:] if line.strip()]
    assert first_cells[0] != LONG and LONG.startswith(first_cells[0])  # folded, not cut
    assert LONG in "".join(first_cells)  # the folded pieces, in order, make the whole name
    done = piped(["inspect", baked])
    assert any(line.split()[:1] == [LONG] for line in done.stdout.decode().splitlines())


def test_error_on_a_terminal_is_red_and_piped_is_plain(tmp_path):
    code, out = in_pty(["inspect", tmp_path / "missing.rlx"])
    assert code == 3 and ANSI.search(out) and b"error:" in out
    done = piped(["inspect", tmp_path / "missing.rlx"])
    assert done.returncode == 3 and done.stderr.startswith(b"error: ") and b"\x1b" not in \
        done.stderr
