"""The fast profile: an int8 precision plan checked on calibration feeds (issue 32).

References are independent of rlx: onnxruntime on the original f32 ONNX model, and a float64
numpy forward pass of the MLP. Held-out feeds (seeds 90..) are never the calibration ones."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import rlx
from rlx import BakeOptions, bake
from rlx.artifact import read_rlx, write_rlx
from rlx.artifact.openvino_form import openvino_int8_graph, openvino_int8_set
from rlx.baking.fast import SEEDED
from rlx.baking.int8 import apply_int8, candidates
from rlx.baking.sensitivity import calibrate
from rlx.engines.openvino_bf16 import has_bf16
from rlx.engines.openvino_engine import core
from rlx.engines.openvino_int8 import has_int8, runs_int8, runs_own_int8
from rlx.ir.dtype import DType
from rlx.ir.ops.quant import QuantizeLinear
from rlx.ir.ops.sources import Constant
from rlx.onnx import import_onnx
from rlx.runtime import Session
from tests.baking.fast_models import (
    image_feeds,
    mlp,
    onnxruntime_kernels,
    small_cnn,
    vector_feeds,
)


def _cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def _fast(path, feeds, tmp_path, **changes):
    graph, bindings = import_onnx(path)
    opts = BakeOptions.from_profile("fast").replace(calibration=feeds, **changes)
    file, report = bake(graph, bindings, opts)
    out = tmp_path / f"{path.stem}.rlx"
    write_rlx(out, file)
    return out, report


def _openvino_fast(plan, out) -> str:
    """How OpenVINO's Model.precision starts on a fast file: its own int8 set where it
    runs that (tests/engines/test_openvino_own_int8.py), the int8 part of a file baked
    before it (tests/engines/test_openvino_int8.py), else its bf16 part where the CPU has
    bf16 (tests/engines/test_openvino_bf16.py), else the file's exact graph in f32."""
    bf16 = bool(plan.bf16) and has_bf16(core())
    graph = read_rlx(out).into_runtime_graph()
    own = openvino_int8_set(plan)
    if own and has_int8(core()) and runs_own_int8(
            graph, openvino_int8_graph(graph, plan), plan, has_bf16(core())):
        return f"fast: int8 {len(own)} nodes, "
    if has_int8(core()) and runs_int8(graph, plan, bf16):
        return "fast: int8, f32"
    return "fast: bf16 " if bf16 else "fast: f32"


def _mlp_forward(path, x, weight=lambda w: w):
    """float64 forward of `mlp`, each weight passed through `weight` first."""
    inits = {t.name: numpy_helper.to_array(t).astype(np.float64)
             for t in onnx.load(path).graph.initializer}
    h = x.astype(np.float64)
    for i in range(3):
        h = h @ weight(inits[f"w{i}"]) + inits[f"b{i}"]
        h = np.maximum(h, 0) if i < 2 else h
    return h


@pytest.mark.parametrize("model, feeds", [(small_cnn, image_feeds), (mlp, vector_feeds)])
def test_the_plan_meets_its_targets_on_held_out_feeds(tmp_path, model, feeds):
    path = model(tmp_path)
    out, report = _fast(path, feeds(1, 8), tmp_path)
    plan = report.precision
    assert plan is not None and plan.counts["int8"] >= 2 and plan.quantizers
    reference = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for engine in ("numpy", "onnxruntime", "openvino"):
        model_ = rlx.load(out, engine=engine, precision="fast")
        assert model_.precision.startswith(_openvino_fast(plan, out)) if engine == "openvino" \
            else model_.precision == "fast: int8, f32"
        same = []
        for feed in feeds(90, 4):
            want, got = reference.run(None, feed)[0], model_.run(feed)[0]
            assert _cosine(want, got) >= 0.999
            same.append(np.argmax(want, -1) == np.argmax(got, -1))
            top2 = np.sort(want, -1)[..., -2:]
            clear = top2[..., 1] - top2[..., 0] > 0.05 * np.abs(want).max()
            assert same[-1][clear].all()  # only near-ties of the reference may flip
        assert np.mean(same) >= 0.9  # random logits: near-ties are common


def test_a_sensitive_node_falls_back_to_f32(tmp_path):
    path = mlp(tmp_path, outlier=True)
    x = vector_feeds(91)[0]["x"]
    exact, _ = bake(*import_onnx(path), BakeOptions.from_profile("exact"))
    graph = exact.into_runtime_graph()
    found = candidates(graph)
    _, ranges = calibrate(graph, found, vector_feeds(1, 4))
    everywhere, _ = apply_int8(graph, found, ranges)  # no guard: every candidate int8
    int8_everywhere = Session().compile(everywhere).run({"x": x})[0]
    assert _cosine(int8_everywhere, _mlp_forward(path, x)) < 0.999  # the outlier hurts
    out, report = _fast(path, vector_feeds(1, 4), tmp_path)
    kept = {row["node"]: row for row in report.precision.kept}
    assert "m1" in kept and kept["m1"]["op"] == "MatMul"  # reads the outlier's tensor
    assert "most sensitive" in kept["m1"]["reason"]
    assert report.precision.counts["int8"] >= 1
    got = rlx.load(out, engine="numpy", precision="fast").run({"x": x})[0]
    assert _cosine(got, _mlp_forward(path, x)) >= 0.999


def test_onnxruntime_fuses_the_qdq_export_and_matches_numpy(tmp_path):
    path = small_cnn(tmp_path)
    out, _ = _fast(path, image_feeds(1, 4), tmp_path)
    kinds = onnxruntime_kernels(out, tmp_path)
    assert kinds["QLinearConv"] == 2  # the two int8 Convs run int8 kernels
    # the classifier (13k multiply-adds, the most error per one saved) stays f32 here; an
    # int8 MatMul + bias runs as QGemm (tests/baking/test_fast_crnn.py)
    numpy_model = rlx.load(out, engine="numpy", precision="fast")
    ort_model = rlx.load(out, engine="onnxruntime", precision="fast")
    reference = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for feed in image_feeds(92, 3):
        planned, fused = numpy_model.run(feed)[0], ort_model.run(feed)[0]
        # the int8 kernels requantise in integers: a step apart at rounding boundaries,
        # far closer to the plan's numerics than the plan is to f32
        f32 = reference.run(None, feed)[0]
        assert _cosine(planned, fused) >= 0.9999
        assert np.abs(planned - fused).max() < 0.5 * np.abs(planned - f32).max()


def test_the_artifact_round_trips_the_plan(tmp_path):
    path = mlp(tmp_path, outlier=True)
    out, report = _fast(path, vector_feeds(1, 2), tmp_path)
    stored = read_rlx(out).precision_plan
    assert stored == report.precision
    assert stored.kept and stored.calibration["samples"] == 2
    assert stored.calibration["outputs"][0]["argmax"] == 1.0  # logits: class scores
    graph = read_rlx(out).into_runtime_graph()
    codes = [n for n in graph.nodes() if isinstance(n.op, Constant)
             and n.tensor_shape.dtype is DType.I8 and n.tensor_shape.rank == 2]
    assert codes  # int8 nodes' weights are stored as int8 codes


def test_exact_on_a_fast_file_runs_f32_on_the_stored_weights(tmp_path):
    path = mlp(tmp_path)
    out, _ = _fast(path, vector_feeds(1, 4), tmp_path)

    def int8_round_trip(w):  # symmetric, one scale per output column, as stored
        scale = np.abs(w).max(axis=0) / 127
        return np.clip(np.rint(w / scale), -127, 127) * scale

    for engine in ("numpy", "onnxruntime", "openvino"):
        model = rlx.load(out, engine=engine, precision="exact")
        assert model.precision == "exact"
        for feed in vector_feeds(93, 2):
            want = _mlp_forward(path, feed["x"], int8_round_trip)
            np.testing.assert_allclose(model.run(feed)[0], want, rtol=1e-4, atol=1e-4)
    graph = rlx.load(out, engine="numpy", precision="exact").runner.compiled.graph
    assert not any(isinstance(n.op, QuantizeLinear) for n in graph.nodes())


def test_without_calibration_the_plan_is_checked_on_seeded_inputs_and_says_so(
        tmp_path, caplog):
    graph, bindings = import_onnx(mlp(tmp_path))
    with caplog.at_level(logging.WARNING, logger="rlx.baking.fast"):
        _, report = bake(graph, bindings, BakeOptions.from_profile("fast"))
    assert [r.message for r in caplog.records] == [SEEDED]
    calibration = report.precision.calibration
    assert calibration["seeded"] and calibration["samples"] == 2


def test_a_weight_read_by_several_int8_nodes_is_stored_once(tmp_path):
    """x -> MatMul(W) -> Relu -> MatMul(W) -> MatMul(V): W read twice (an unrolled RNN's
    weight is read at every step) is one constant of int8 codes when both readers are
    int8, one f32 constant when neither is."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((64, 64)) / 8).astype(np.float32)
    v = (rng.standard_normal((64, 10)) / 8).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("MatMul", ["r", "w"], ["b"]),
             helper.make_node("MatMul", ["b", "v"], ["y"])]
    graph = helper.make_graph(
        nodes, "shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(v, "v")])
    path = tmp_path / "shared.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    for target, int8, stored in ((0.999, 3, DType.I8), (1.0, 0, DType.F32)):  # 1: no int8
        out, report = _fast(path, vector_feeds(1, 4), tmp_path, min_cosine=target)
        kinds = [n.tensor_shape.dtype for n in read_rlx(out).into_runtime_graph().nodes()
                 if isinstance(n.op, Constant) and n.tensor_shape.dims == (64, 64)]
        assert kinds == [stored] and report.precision.counts["int8"] == int8


def test_only_a_planned_file_carries_a_plan_in_its_header(tmp_path):
    """The other profiles' files keep the bytes they had before the fast profile existed."""
    graph, bindings = import_onnx(mlp(tmp_path))
    file, _ = bake(graph, bindings, BakeOptions.from_profile("exact"))
    assert "precision_plan" not in file.meta.to_json()
    out, _ = _fast(mlp(tmp_path), vector_feeds(1, 4), tmp_path)
    assert read_rlx(out).meta.to_json()["precision_plan"]["counts"]["int8"] >= 1
