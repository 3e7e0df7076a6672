"""`rlx-bake run` and `rlx-bake verify` (against onnxruntime)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest

from rlx.cli import verify
from tests.baking.models import mlp_forward
from tests.cli.conftest import PASSWORD, assert_error, mlp_onnx


def test_run_npy_input_and_npz_output(cli, files, tmp_path):
    out = tmp_path / "out.npz"
    result = cli("run", files.rlx, "--input", f"x={files.x_npy}", "--output", out,
                 "--repeat", "3")
    assert result.code == 0, result.err
    assert "logits" in result.out and "median of the next 3" in result.out
    assert "first run" in result.out
    with np.load(out) as saved:
        assert saved.files == ["logits"]
        np.testing.assert_allclose(saved["logits"], files.expected(), rtol=1e-4, atol=1e-4)


def test_run_json_summary(cli, files, tmp_path):
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, x=files.x)
    d = cli("run", files.rlx, "--inputs", feeds, "--repeat", "2", "--json").json()
    (out,) = d["outputs"]
    expected = files.expected()
    assert out["name"] == "logits" and out["shape"] == [32, 10] and out["dtype"] == "f32"
    assert out["min"] == pytest.approx(expected.min(), rel=1e-4, abs=1e-4)
    assert out["max"] == pytest.approx(expected.max(), rel=1e-4, abs=1e-4)
    assert out["mean"] == pytest.approx(expected.mean(), rel=1e-3, abs=1e-4)
    timing = d["timing"]
    assert timing["repeat"] == 2 and 0 < timing["run_ms_min"] <= timing["run_ms_median"]
    assert timing["load_ms"] > 0 and timing["compile_ms"] > 0 and timing["first_run_ms"] > 0


def test_run_times_a_first_run_apart_and_ten_after_it_by_default(cli, files, tmp_path,
                                                                 monkeypatch):
    """One run's time is mostly one-time costs: the default warms up (the first run,
    reported on its own) and takes the median of ten more (counted, not timed here)."""
    import rlx.engines.model as engine_model

    calls = []
    run = engine_model.Model.run
    monkeypatch.setattr(engine_model.Model, "run",
                        lambda self, *a, **k: calls.append(1) or run(self, *a, **k))
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, x=files.x)
    timing = cli("run", files.rlx, "--inputs", feeds, "--json").json()["timing"]
    assert timing["repeat"] == 10 and "first_run_ms" in timing
    assert len(calls) == 11


def test_run_encrypted(cli, files, monkeypatch):
    monkeypatch.setenv("RLX_TEST_PASSWORD", PASSWORD)
    result = cli("run", files.encrypted, "--input", f"x={files.x_npy}", "--password-env",
                 "RLX_TEST_PASSWORD", "--quiet")
    assert result.code == 0 and result.out == ""


def test_threads_limit_blas_while_running(cli, files, monkeypatch):
    import threadpoolctl

    seen = []
    real = threadpoolctl.threadpool_limits
    monkeypatch.setattr(threadpoolctl, "threadpool_limits",
                        lambda limits: seen.append(limits) or real(limits=limits))
    result = cli("run", files.rlx, "--input", f"x={files.x_npy}", "--threads", "1", "--json")
    assert result.code == 0 and result.json()["threads"] == 1 and seen == [1]


def test_unknown_input_name(cli, files):
    assert_error(cli("run", files.rlx, "--input", f"y={files.x_npy}"),
                 r"unknown input\(s\) 'y'; graph inputs are \['x'\]")


def test_shape_mismatch(cli, files, tmp_path):
    bad = tmp_path / "bad.npy"
    np.save(bad, files.x[:3])
    assert_error(cli("run", files.rlx, "--input", f"x={bad}"),
                 r"input 'x': expected f32\[32, 784\], got f32\[3, 784\]")


def test_input_file_errors(cli, files, tmp_path):
    assert_error(cli("run", files.rlx, "--input", f"x={tmp_path / 'none.npy'}"),
                 r"none\.npy: No such file")
    assert_error(cli("run", files.rlx, "--input", f"x={files.graph_json}"),
                 r"mlp\.json is not a \.npy or \.npz file")
    assert_error(cli("run", files.rlx, "--input", "x"), r"expected NAME=PATH\.npy", code=2)
    assert_error(cli("run", files.rlx, "--repeat", "0"), r"expected a positive integer",
                 code=2)


def test_run_encrypted_without_password(cli, files):
    assert_error(cli("run", files.encrypted, "--input", f"x={files.x_npy}"),
                 r"is encrypted; pass a password")


def test_verify_within_tolerance(cli, files):
    result = cli("verify", files.rlx, "--onnx", files.onnx)
    assert result.code == 0, result.err
    assert "OK: every element within atol" in result.out
    d = cli("verify", files.rlx, "--onnx", files.onnx, "--seed", "3", "--json").json()
    (out,) = d["outputs"]
    assert d["ok"] and out["ok"] and out["name"] == out["reference_name"] == "logits"
    assert out["max_abs"] < 1e-3 and out["cosine"] == pytest.approx(1.0, abs=1e-6)
    assert d["inputs"] == "random (seed 3)"


def test_verify_keeps_onnxruntimes_warnings_to_itself(files, tmp_path):
    """onnxruntime warns on stderr (with colour codes, even into a pipe) about a model's
    unused initializers; verify's output is rlx's alone."""
    model = onnx.load(files.onnx)
    model.graph.initializer.append(onnx.numpy_helper.from_array(
        np.ones(3, np.float32), "unused"))
    path = tmp_path / "unused.onnx"
    onnx.save(model, path)
    result = subprocess.run([sys.executable, "-m", "rlx", "verify", str(files.rlx), "--onnx",
                             str(path)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "onnxruntime" not in result.stderr and "\x1b[" not in result.stderr, result.stderr


def test_verify_out_of_tolerance_exits_1(cli, files, tmp_path):
    other = tmp_path / "other.onnx"
    onnx.save(mlp_onnx({k: v * 1.01 for k, v in files.weights.items()}), other)
    result = cli("verify", files.rlx, "--onnx", other, "--json")
    assert result.code == 1
    d = result.json()
    assert not d["ok"] and d["outputs"][0]["max_abs"] > 1e-3
    loose = cli("verify", files.rlx, "--onnx", other, "--rtol", "0.05", "--atol", "0.05")
    assert loose.code == 0, loose.out


def test_verify_given_inputs(cli, files, tmp_path):
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, x=files.x)
    d = cli("verify", files.rlx, "--onnx", files.onnx, "--inputs", feeds, "--json").json()
    assert d["ok"] and d["inputs"] == str(feeds)


def test_verify_input_mismatch(cli, files, tmp_path):
    model = mlp_onnx(files.weights)
    model.graph.input[0].name = "pixels"
    for node in model.graph.node:
        node.input[:] = ["pixels" if i == "x" else i for i in node.input]
    other = tmp_path / "renamed.onnx"
    onnx.save(model, other)
    assert_error(cli("verify", files.rlx, "--onnx", other),
                 r"input\(s\) x are not inputs of .*renamed\.onnx \(its inputs: pixels\)")


def test_verify_bad_onnx_file(cli, files):
    assert_error(cli("verify", files.rlx, "--onnx", files.npz),
                 r"onnxruntime cannot load .*weights\.npz")


def test_verify_without_onnxruntime(cli, files, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if not installed
    assert_error(cli("verify", files.rlx, "--onnx", files.onnx),
                 r"verify needs onnxruntime .*pip install onnxruntime")


def test_run_profile_ops(cli, files):
    result = cli("run", files.rlx, "--input", f"x={files.x_npy}", "--profile-ops",
                 "--repeat", "3", "--top", "2")
    assert result.code == 0, result.err
    assert "time per op type" in result.out and "slowest 2 nodes" in result.out
    profile = cli("run", files.rlx, "--input", f"x={files.x_npy}", "--profile-ops",
                  "--top", "50", "--json").json()["profile"]
    # the baked MLP: its ternary first layer (K = 784, not whole TQ2_0 blocks) stored as
    # one TQ2_0 stream decoded by DecodeWeight, both layers MatMuls
    ops = {r["op"]: r["nodes"] for r in profile["op_types"]}
    assert ops == {"DecodeWeight": 1, "MatMul": 2, "Add": 2, "Relu": 1}  # ONNX op types
    assert len(profile["slowest"]) == 6 and profile["runs"] == 10  # the default --repeat
    assert abs(sum(r["share"] for r in profile["op_types"]) - 1) < 1e-9


def test_run_without_profile_has_none(cli, files):
    assert cli("run", files.rlx, "--input", f"x={files.x_npy}", "--json").json()["profile"] \
        is None


def test_verify_min_cosine_mismatches_and_argmax(cli, files, tmp_path):
    """Weights scaled by 1.01 scale the logits by 1.0201: every element is out of the default
    tolerance, yet the direction (cosine) and every row's argmax are the same."""
    import onnxruntime as ort

    other = tmp_path / "scaled.onnx"
    onnx.save(mlp_onnx({k: v * 1.01 for k, v in files.weights.items()}), other)
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, x=files.x)
    d = cli("verify", files.rlx, "--onnx", other, "--inputs", feeds, "--json").json()
    (out,) = d["outputs"]
    ref = ort.InferenceSession(str(other)).run(None, {"x": files.x})[0].astype(np.float64)
    ours = mlp_forward(files.x, files.weights).astype(np.float64)
    want = int(np.count_nonzero(np.abs(ours - ref) > 1e-5 + 1e-4 * np.abs(ref)))
    assert abs(out["mismatched"] - want) <= 2 and out["mismatched"] > ref.size // 2
    assert out["mismatched_share"] == pytest.approx(out["mismatched"] / ref.size)
    agree = float(np.mean(ours.argmax(-1) == ref.argmax(-1)))
    assert out["argmax_agree"] == pytest.approx(agree) and not d["ok"]
    passed = cli("verify", files.rlx, "--onnx", other, "--inputs", feeds, "--min-cosine",
                 "0.9999")
    assert passed.code == 0, passed.out
    assert "cosine >= 0.9999" in passed.out
    both = cli("verify", files.rlx, "--onnx", other, "--inputs", feeds, "--min-cosine",
               "0.9999", "--atol", "1e-5")
    assert both.code == 1  # a failed check: exit 1, not an error
    strict = cli("verify", files.rlx, "--onnx", files.onnx, "--inputs", feeds,
                 "--min-cosine", "1.5", "--json").json()
    assert not strict["ok"] and strict["outputs"][0]["cosine"] == pytest.approx(1, abs=1e-6)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_verify_of_a_size_file_says_why_it_differs_and_the_min_cosine_it_meets(cli, files,
                                                                              tmp_path):
    """The default tolerance fails on a file baked lossy: verify names the profile and the
    rounded weights, and suggests --min-cosine C with C the measured worst cosine rounded
    down; that C then passes."""
    import onnxruntime as ort

    from rlx import load
    from rlx.artifact import read_rlx

    small, feeds = tmp_path / "small.rlx", tmp_path / "feeds.npz"
    assert cli("bake", files.onnx, "-o", small, "--profile", "size").code == 0
    np.savez(feeds, x=files.x)
    result = cli("verify", small, "--onnx", files.onnx, "--inputs", feeds, "--json")
    assert result.code == 1
    d = result.json()
    rounded: dict[str, int] = {}
    for w in read_rlx(small).weights:
        if w.encoding in ("f16", "gguf_q8_0"):
            rounded[w.encoding] = rounded.get(w.encoding, 0) + 1
    assert rounded and d["baked"] == {"profile": "size", "rounded_weights": rounded,
                                      "source_quantized_ops": {}}
    cosine = _cosine(load(small).run({"x": files.x})[0],
                     ort.InferenceSession(str(files.onnx)).run(None, {"x": files.x})[0])
    advice = d["advice"]
    assert advice.startswith("the outputs are lossy by design (") and "profile size" in advice
    least = advice.rsplit("--min-cosine ", 1)[1]
    decimals = len(least.split(".")[1])
    assert float(least) <= cosine < float(least) + 10 ** -decimals
    text = cli("verify", small, "--onnx", files.onnx, "--inputs", feeds).out
    assert text.splitlines()[-1] == f"note: {advice}"
    passed = cli("verify", small, "--onnx", files.onnx, "--inputs", feeds, "--min-cosine",
                 least, "--json")
    assert passed.code == 0 and passed.json()["advice"] is None
    exact = cli("verify", files.rlx, "--onnx", files.onnx, "--json").json()
    assert exact["ok"] and exact["advice"] is None and exact["baked"]["rounded_weights"] == {}


def test_verify_names_the_quantising_ops_of_the_source_model(cli, tmp_path):
    from tests.int8_models import mlp, quantized

    path = quantized(mlp((64, 96, 32)), tmp_path, "q")
    baked = tmp_path / "q.rlx"
    assert cli("bake", path, "-o", baked).code == 0
    d = cli("verify", baked, "--onnx", path, "--json").json()
    ops: dict[str, int] = {}
    for node in onnx.load(path).graph.node:
        if node.op_type in ("DynamicQuantizeLinear", "MatMulInteger"):
            ops[node.op_type] = ops.get(node.op_type, 0) + 1
    assert ops and d["baked"]["source_quantized_ops"] == ops
    assert d["ok"] and d["advice"] is None  # rlx rounds as onnxruntime does here
    # where a real model's runtime rounding differs (cosine 0.9998-0.99997 seen): the note
    failed = [{"ok": False, "cosine": 0.99987}, {"ok": True, "cosine": 0.999999}]
    advice = verify._advice(failed, d["baked"], elementwise=True)
    assert advice.startswith("the outputs are quantised at run time (DynamicQuantizeLinear x")
    assert advice.endswith("worst output cosine 0.999870: check it with --min-cosine 0.9998")
    assert verify._advice(failed, d["baked"], elementwise=False) is None  # --min-cosine given


def test_verify_argmax_agreement_for_thousands_of_classes(cli, tmp_path):
    """An OCR head's 8,210 classes: argmax agreement is measured whatever the class count
    (it was blank above 1,000)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 8210)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["scores"])], "head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 16])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [3, 8210])],
        [numpy_helper.from_array(w, "w")])
    path, baked, feeds = tmp_path / "head.onnx", tmp_path / "head.rlx", tmp_path / "x.npz"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert cli("bake", path, "-o", baked).code == 0
    x = rng.standard_normal((3, 16)).astype(np.float32)
    np.savez(feeds, x=x)
    (out,) = cli("verify", baked, "--onnx", path, "--inputs", feeds, "--json").json()["outputs"]
    ref = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    ours = x.astype(np.float64) @ w.astype(np.float64)
    assert out["argmax_agree"] == float(np.mean(ours.argmax(-1) == ref.argmax(-1)))
