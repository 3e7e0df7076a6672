"""The real entry points (`python -m rlx`, the `rlx-bake` console script), help, and the demo."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

RLX_BAKE = Path(sys.executable).with_name("rlx-bake")  # installed next to this interpreter

COMMANDS = ["bake", "inspect", "tensors", "run", "verify", "relayout", "encrypt", "decrypt",
            "demo"]


# subprocess timeouts below are hang guards, generous for a loaded 2-core machine, not budgets
def test_python_m_rlx_help():
    done = subprocess.run([sys.executable, "-m", "rlx", "--help"], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "examples:" in done.stdout
    for command in COMMANDS:
        assert command in done.stdout


def test_console_script(files):
    done = subprocess.run([str(RLX_BAKE), "inspect", str(files.rlx), "--json"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["meta"]["name"] == "mnist_mlp"
    missing = subprocess.run([str(RLX_BAKE), "inspect", "no-such-file.rlx"],
                             capture_output=True, text=True, timeout=600)
    assert missing.returncode == 3 and missing.stdout == ""  # an error (RlxError, OSError)
    assert missing.stderr == "error: no-such-file.rlx: No such file or directory\n"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(cli, command):
    result = cli(command, "--help")
    assert result.code == 0
    assert "example" in result.out and "--json" in result.out and "--quiet" in result.out


def test_usage_errors_exit_2_on_one_line(cli):
    for argv in ([], ["frobnicate"], ["inspect"], ["inspect", "a.rlx", "--bogus"]):
        result = cli(*argv)
        assert result.code == 2 and result.out == ""
        assert result.err.count("\n") == 1 and result.err.startswith("error: "), result.err


def test_version(cli):
    result = cli("--version")
    assert result.code == 0 and result.out.startswith("rlx-bake ")


@pytest.mark.slow
def test_demo(cli, tmp_path):
    out = tmp_path / "demo"
    d = cli("demo", "--out", out, "--json").json()
    assert d["out_dir"] == str(out)
    assert d["float_accuracy"] > 0.95 and d["ternary_accuracy"] > 0.9
    rows = d["rows"]
    assert len(rows) == 5 * 3 + 1 and sum(r["encrypted"] for r in rows) == 1
    assert {(r["profile"], r["memory"]) for r in rows if not r["encrypted"]} == {
        (p, m) for p in ("merge", "fold", "exact", "size", "fast")
        for m in ("duplex", "runtime", "compact")}
    for r in rows:
        assert Path(r["path"]).stat().st_size == r["file_bytes"]
        assert r["accuracy"] > 0.9 and r["load_ms"] > 0
        assert r["ratio"] == pytest.approx(d["raw_f32_bytes"] / r["file_bytes"])
    lossless = {r["accuracy"] for r in rows if r["profile"] != "size"}
    assert lossless == {d["ternary_accuracy"]}  # every lossless bake scores as numpy did
    smallest = min(rows, key=lambda r: r["file_bytes"])
    assert smallest["profile"] == "size" and smallest["ratio"] > 5
    human = subprocess.run([str(RLX_BAKE), "demo", "--out", str(out)], capture_output=True,
                           text=True, timeout=600)
    assert human.returncode == 0, human.stderr
    assert "f32 / file" in human.stdout and "accuracy before baking" in human.stdout
    # no warning: the size profile's bakes are checked on calibration images, not unchecked
    assert human.stderr == ""
