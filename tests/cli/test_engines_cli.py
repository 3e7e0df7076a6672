"""rlx-bake export, and --engine / --precision on run and verify."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.cli.conftest import PASSWORD, assert_error


@pytest.mark.parametrize("engine", ["onnxruntime", "openvino"])
def test_run_on_another_engine(cli, files, tmp_path, engine):
    out = tmp_path / "out.npz"
    result = cli("run", files.rlx, "--input", f"x={files.x_npy}", "--output", out,
                 "--engine", engine, "--repeat", "2", "--threads", "1")
    assert result.code == 0, result.err
    with np.load(out) as saved:
        np.testing.assert_allclose(saved["logits"], files.expected(), rtol=1e-4, atol=1e-4)
    d = cli("run", files.rlx, "--input", f"x={files.x_npy}", "--engine", engine,
            "--precision", "fast", "--json").json()
    assert d["timing"]["engine"] == engine


def test_run_auto_logs_its_choice(cli, files, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    result = cli("run", files.rlx, "--input", f"x={files.x_npy}", "--engine", "auto", "-v")
    assert result.code == 0, result.err
    assert "auto: chose" in result.err and (tmp_path / "rlx" / "engines.json").exists()


def test_verify_on_onnxruntime_encrypted(cli, files, monkeypatch):
    monkeypatch.setenv("RLX_PW", PASSWORD)
    result = cli("verify", files.encrypted, "--onnx", files.onnx, "--engine", "onnxruntime",
                 "--password-env", "RLX_PW")
    assert result.code == 0, result.err and "OK: tolerance" in result.out


def test_profile_ops_needs_the_numpy_engine(cli, files):
    """A usage error (exit 2), like every clash of options."""
    assert_error(cli("run", files.rlx, "--input", f"x={files.x_npy}", "--engine",
                     "onnxruntime", "--profile-ops"),
                 r"--profile-ops .* \(see 'rlx-bake run --help'\)", code=2)


def test_bad_engine_is_a_usage_error(cli, files):
    assert cli("run", files.rlx, "--engine", "tvm").code == 2


def test_export_writes_standard_onnx(cli, files, tmp_path):
    out = tmp_path / "mlp.onnx"
    d = cli("export", files.rlx, "-o", out, "--json").json()
    assert d["opset"] >= 17 and d["weights"] > 0
    assert (tmp_path / "mlp.onnx.data").exists()  # weights beside the model
    onnx.checker.check_model(str(out), full_check=True)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"x": files.x})
    np.testing.assert_allclose(got, files.expected(), rtol=1e-4, atol=1e-4)
    model = onnx.load(str(out), load_external_data=False)
    assert [i.name for i in model.graph.input] == ["x"]
    assert [o.name for o in model.graph.output] == ["logits"]


def test_export_errors_are_one_line(cli, files, tmp_path):
    assert_error(cli("export", files.rlx, "-o", tmp_path / "nope" / "m.onnx"), "does not exist")
    assert_error(cli("export", files.encrypted, "-o", tmp_path / "m.onnx"), "encrypted")


@pytest.mark.parametrize("standard", [False, True])
def test_export_keeps_or_expands_the_microsoft_int8_ops(cli, tmp_path, standard):
    """A QOperator model's com.microsoft ops are written back as they were, or with
    --standard-ops as standard ONNX ops; either file gives onnxruntime's bits."""
    from rlx import BakeOptions, BakeProfile, bake, write_rlx
    from rlx.onnx import import_onnx
    from tests.int8_models import qoperator_cnn, quantized_static

    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(4)]
    source = quantized_static(qoperator_cnn(), tmp_path, "qop", feeds, qdq=False)
    graph, bindings = import_onnx(source)
    write_rlx(tmp_path / "qop.rlx", bake(graph, bindings,
                                         BakeOptions.from_profile(BakeProfile.EXACT))[0])
    out = tmp_path / "out.onnx"
    flags = ["--standard-ops"] if standard else []
    assert cli("export", tmp_path / "qop.rlx", "-o", out, *flags).code == 0
    domains = {n.domain for n in onnx.load(str(out)).graph.node}
    assert ("com.microsoft" in domains) is not standard
    run = [ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, feeds[0])
           for p in (out, source)]
    np.testing.assert_array_equal(run[0][0], run[1][0])
