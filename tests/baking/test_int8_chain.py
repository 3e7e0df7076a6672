"""The int8 plan's chains (`rlx.baking.int8_chain`): SiLU, residual Add, Concat, MaxPool,
nearest Resize and Split between int8 nodes stay in 8 bits, and narrow and depthwise Convs
between int8 nodes run int8. On a YOLO-style detector in miniature, against independent
references: onnxruntime's optimised model (which kernels it runs), onnxruntime f32 on the
original and onnx.reference on the same model in float64. Held-out feeds (seeds 90..) are
never the calibration ones."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

import rlx
from rlx import BakeOptions, bake
from rlx.artifact import write_rlx
from rlx.baking.int8 import (
    COPIED_SPAN,
    ActivationRange,
    candidates,
    copied_ranges,
    plan_int8,
)
from rlx.baking.int8_chain import Chain
from rlx.ir.naming import node_title
from rlx.ir.ops.quant import QuantizeLinear
from rlx.onnx import import_onnx
from rlx.passes.channel_scale_folding import fold_channel_scales
from tests.baking.fast_models import image_feeds, onnxruntime_kernels, small_detector


@pytest.fixture(scope="module")
def baked(tmp_path_factory):
    """(the ONNX file, its float64 twin, the fast file, the bake's report)."""
    folder = tmp_path_factory.mktemp("detector")
    path = small_detector(folder)
    file, report = bake(*import_onnx(path), BakeOptions.from_profile("fast").replace(
        calibration=image_feeds(1, 4)))
    write_rlx(folder / "detector.rlx", file)
    return path, small_detector(folder, dtype=np.float64), folder / "detector.rlx", report


def _cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_onnxruntime_runs_the_chain_on_u8(baked, tmp_path):
    _, _, out, report = baked
    assert report.precision.counts["int8"] == 6 and report.precision.counts["int8 chain"] > 0
    kinds = onnxruntime_kernels(out, tmp_path)
    # every Conv but the image's (its input is f32) and the output's: the 1x1 convs of 16
    # and 48 terms and the depthwise one too, their input and output quantised anyway
    assert kinds["QLinearConv"] == 6 and kinds["Conv"] == 2
    # the SiLUs between int8 Convs (the one before the output Conv stays f32), the residual
    # Add (its Relu dropped), the three Concats, the MaxPool on u8
    assert kinds["QLinearSigmoid"] == kinds["QLinearMul"] == 5
    assert kinds["QLinearAdd"] == 1 and "Relu" not in kinds and kinds["QLinearConcat"] == 3
    assert "MaxPool" not in kinds and kinds["NhwcMaxPool"] == 1
    assert kinds["QuantizeLinear"] == 1  # only the image Conv's SiLU output is quantised in f32


def test_concats_copy_codes_where_their_sources_share_a_sign(baked, tmp_path):
    """onnxruntime's QLinearConcat copies an input whose scale and zero point are its
    output's, else looks it up in a table (`rlx.baking.int8.copied_ranges`): the MaxPool's
    Concat and the neck's (two SiLUs' outputs) copy; the one holding the residual block's
    Relu output (range [0, high], so that onnxruntime drops the Relu) beside two SiLUs'
    keeps its tables."""
    _, _, out, _ = baked
    onnxruntime_kernels(out, tmp_path)  # writes onnxruntime's optimised model
    model = onnx.load(tmp_path / "optimized.onnx", load_external_data=False)
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    copies = []
    for node in (n for n in model.graph.node if n.op_type == "QLinearConcat"):
        params = [(float(values[s]), int(values[z]))
                  for s, z in zip(node.input[0::3], node.input[1::3])]
        copies.append(all(p == params[0] for p in params[1:]))
    assert sorted(copies) == [False, True, True]


def test_held_out_outputs_meet_the_guard(baked):
    path, path64, out, report = baked
    assert report.precision.calibration["outputs"][0]["cosine"] >= 0.999
    f32 = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    f64 = ReferenceEvaluator(str(path64))
    models = {e: rlx.load(out, engine=e, precision="fast") for e in ("numpy", "onnxruntime")}
    for feed in image_feeds(90, 4):
        exact = f64.run(None, {"x": feed["x"].astype(np.float64)})[0]
        assert _cosine(f32.run(None, feed)[0], exact) > 0.999999
        planned = models["numpy"].run(feed)[0]
        fused = models["onnxruntime"].run(feed)[0]
        assert _cosine(planned, exact) >= 0.999 and _cosine(fused, exact) >= 0.999
        # onnxruntime's u8 kernels requantise a step apart at rounding boundaries, and a
        # chain of eight carries such steps on: still far closer to the plan's numerics
        # (the numpy runtime's) than the plan is to the exact outputs
        assert _cosine(planned, fused) >= 0.9999
        assert np.linalg.norm(planned - fused) < 0.5 * np.linalg.norm(planned - exact)


def _plan(path):
    exact, _ = bake(*import_onnx(path), BakeOptions.from_profile("exact"))
    graph, _ = fold_channel_scales(exact.into_runtime_graph())
    found = {c.label(graph): c for c in candidates(graph)}
    return graph, found


def test_narrow_convs_run_int8_only_between_int8_nodes(tmp_path):
    graph, found = _plan(small_detector(tmp_path))
    assert {n for n, c in found.items() if c.narrow} == {"stem", "m", "c2", "dw", "maps"}
    running, links = plan_int8(graph, list(found.values()))
    assert {c.label(graph) for c in running} == {"c1", "m", "c2", "dw", "pw", "c3"}
    # without the 1x1 Conv after it, the depthwise Conv's output has no int8 reader: it
    # stays f32, and with it, one by one back to the 3x3 Conv, the narrow Convs and chain
    # nodes whose outputs then reach only f32 readers
    without = [c for n, c in found.items() if n != "pw"]
    running, fewer = plan_int8(graph, without)
    assert {c.label(graph) for c in running} == {"c1", "c3"}
    assert fewer.nodes < links.nodes
    narrow_only = [c for c in found.values() if c.narrow]
    assert plan_int8(graph, narrow_only) == ([], Chain())


def test_a_plan_without_int8_nodes_has_no_chain(tmp_path):
    _, report = bake(*import_onnx(small_detector(tmp_path)), BakeOptions.from_profile(
        "fast").replace(calibration=image_feeds(1, 2), min_cosine=1.0))  # 1: no int8
    assert report.precision.counts["int8"] == report.precision.counts["int8 chain"] == 0


def test_exact_on_a_chained_file_takes_every_quantiser_out(baked):
    """The chain's quantisers (a SiLU's gate, a MaxPool's shared scale) are the plan's too:
    `precision="exact"` runs the file's f32 graph, on the int8 weights as stored."""
    _, path64, out, _ = baked
    model = rlx.load(out, engine="numpy", precision="exact")
    graph = model.runner.compiled.graph
    assert not any(isinstance(n.op, QuantizeLinear) for n in graph.nodes())
    f64 = ReferenceEvaluator(str(path64))
    fast = rlx.load(out, engine="numpy", precision="fast")
    for feed in image_feeds(94, 2):
        exact = f64.run(None, {"x": feed["x"].astype(np.float64)})[0]
        # the stored int8 weights' error alone: smaller than the plan's
        assert 1 - _cosine(model.run(feed)[0], exact) < 0.5 * (
            1 - _cosine(fast.run(feed)[0], exact))


@pytest.mark.parametrize(("narrow", "copied"), [(0.5, True), (0.1, False)])
def test_a_concat_copies_only_where_its_range_grows_at_most_copied_span(tmp_path, narrow,
                                                                       copied):
    """The neck's Concat reads two SiLUs' outputs: with one of range [-1, 1] and the other
    `narrow` times as wide, their union is 2 (copied) or 10 (> COPIED_SPAN: tables kept)
    times the narrower one."""
    graph, found = _plan(small_detector(tmp_path))
    _, links = plan_int8(graph, list(found.values()))
    neck, stem = (next(n for n in graph.nodes() if node_title(n) == title)
                  for title in ("neck", "c1.silu"))
    wide = ActivationRange(-1.0, 1.0)
    ranges = {n.id: wide for n in graph.nodes()}
    ranges[stem.id] = ActivationRange(-narrow, narrow)
    joined = copied_ranges(graph, links, ranges)
    assert (neck.id in joined) == copied and (2 / (2 * narrow) <= COPIED_SPAN) == copied
    if copied:
        assert joined[neck.id] == joined[stem.id] == wide
