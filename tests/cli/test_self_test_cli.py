"""The bundled self-test on the command line: `bake --self-test`, `verify FILE` without
`--onnx` (one engine or all), `inspect` (text and --json)."""

from __future__ import annotations

import numpy as np
import pytest

from rlx.artifact.header import read_header
from rlx.engines import numpy_engine
from rlx.errors import ArtifactError
from tests.cli.conftest import PASSWORD, assert_error
from tests.real_models import fetch, silero_feeds


def _raise(message, error=ArtifactError):
    raise error(message)


@pytest.fixture
def baked(cli, files, tmp_path):
    """The MLP (graph JSON + weights) baked with a self-test on x.npz, and the feeds file."""
    feeds = tmp_path / "x.npz"
    np.savez(feeds, x=files.x)
    out = tmp_path / "st.rlx"
    result = cli("bake", files.graph_json, "-w", files.npz, "-o", out, "--self-test", feeds)
    assert result.code == 0, result.err
    assert "bundled self-test: 1 sample(s)" in result.out
    return out


def test_bake_stores_the_given_feeds(baked, files):
    body = read_header(memoryview(baked.read_bytes()), str(baked), _raise).body
    assert body["self_test"]["samples"] == 1
    assert body["self_test"]["note"].startswith("1 of 1 feed set(s) given")


def test_bake_report_json_says_what_was_stored(cli, files, tmp_path):
    d = cli("bake", files.graph_json, "-w", files.npz, "-o", tmp_path / "s.rlx",
            "--self-test", "--json").json()
    assert d["options"]["self_test"] is True
    assert d["self_test"]["samples"] == 1 and "seeded" in d["self_test"]["note"]
    assert d["self_test"]["outputs"][0]["name"] == "logits"


def test_verify_runs_it_on_every_engine(cli, baked):
    result = cli("verify", baked, "--engine", "all")
    assert result.code == 0, result.err
    assert "OK: every output within its stored tolerance on numpy, onnxruntime, openvino" \
        in result.out
    d = cli("verify", baked, "--engine", "onnxruntime", "--json").json()
    assert d["ok"] and d["reference"] == "bundled self-test"
    (run,) = d["engines"]
    assert run["engine"] == "onnxruntime" and run["outputs"][0]["name"] == "logits"
    assert run["outputs"][0]["max_abs"] <= run["outputs"][0]["tolerance"]


def test_verify_exits_1_on_a_miss(cli, baked, monkeypatch):
    run = numpy_engine.NumpyRunner.run

    def broken(self, feeds, outputs):
        outs = [np.array(o) for o in run(self, feeds, outputs)]
        outs[0][0, 0] += 1.0
        return outs

    monkeypatch.setattr(numpy_engine.NumpyRunner, "run", broken)
    result = cli("verify", baked)
    assert result.code == 1
    assert "FAILED on numpy" in result.out and "NO" in result.out


def test_verify_without_a_self_test_or_onnx_says_so(cli, files):
    assert_error(cli("verify", files.rlx), r"has no bundled self-test: bake it with "
                                           r"--self-test, or compare it with its model")


def test_verify_options_of_the_onnx_comparison_need_onnx(cli, baked):
    assert_error(cli("verify", baked, "--rtol", "0.1"), r"--rtol apply with --onnx")


def test_verify_all_engines_needs_no_onnx(cli, files):
    assert_error(cli("verify", files.rlx, "--onnx", files.onnx, "--engine", "all"),
                 "--engine all runs the bundled self-test")


def test_a_tampered_section_fails_verify(cli, baked):
    data = bytearray(baked.read_bytes())
    data[-10] ^= 0x01  # the self-test is the last blob
    baked.write_bytes(bytes(data))
    assert_error(cli("verify", baked), "checksum mismatch in the self-test blob")


def test_inspect_shows_it(cli, baked, files):
    result = cli("inspect", baked)
    assert result.code == 0, result.err
    assert "self-test" in result.out and "1 sample(s)" in result.out
    d = cli("inspect", baked, "--json").json()
    assert d["self_test"]["samples"] == 1 and d["self_test"]["bytes"] > files.x.nbytes
    assert cli("inspect", files.rlx, "--json").json()["self_test"] is None


def test_inspect_checks_its_checksum(cli, baked):
    data = bytearray(baked.read_bytes())
    data[-10] ^= 0x01
    baked.write_bytes(bytes(data))
    d = cli("inspect", baked, "--json").json()
    assert not d["checksums"]["ok"] and "self-test blob" in d["checksums"]["error"]


def test_encrypted(cli, files, tmp_path, monkeypatch):
    monkeypatch.setenv("RLX_PW", PASSWORD)
    out = tmp_path / "enc.rlx"
    assert cli("bake", files.graph_json, "-w", files.npz, "-o", out, "--self-test",
               "--password-env", "RLX_PW").code == 0
    result = cli("verify", out, "--password-env", "RLX_PW", "--engine", "all")
    assert result.code == 0, result.err


def test_rlxp_output_is_refused(cli, files, tmp_path):
    assert_error(cli("bake", files.graph_json, "-w", files.npz, "-o", tmp_path / "p.rlxp",
                     "--self-test"), r"--self-test is stored in \.rlx files only")


def test_a_model_that_cannot_run_on_a_seeded_sample_asks_for_real_inputs(cli, tmp_path):
    """silero-vad selects its branch by the sample rate it is fed: a seeded (zero) rate
    runs no branch, so the bake stops with one line asking for samples."""
    path = fetch("silero-vad")
    result = cli("bake", path, "--input-shapes", "input:1,576", "-o", tmp_path / "v.rlx",
                 "--self-test")
    assert_error(result, r"self-test: the model does not run on a seeded sample .*"
                         r"give samples of real inputs \(--self-test FEEDS\.npz\)")
    assert not (tmp_path / "v.rlx").exists()
    feeds = tmp_path / "vad.npz"
    np.savez(feeds, **silero_feeds(0))
    result = cli("bake", path, "--input-shapes", "input:1,576", "-o", tmp_path / "v.rlx",
                 "--self-test", feeds)
    assert result.code == 0, result.err
    assert cli("verify", tmp_path / "v.rlx", "--engine", "all").code == 0
