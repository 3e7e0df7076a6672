"""OpenVINO's own int8 set (issue 32): planned and guarded in the form OpenVINO runs (a pair
in front of each chosen product, the plan's bf16 part elsewhere), run by the plugin as the
bake's emulation says, within the guard against onnxruntime f32 on the original model;
chosen by the guard on a graph with one product int8 wrecks; files baked before the set
existed run as they did. Needs a CPU OpenVINO runs int8 on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import rlx
from rlx.artifact import read_rlx, write_rlx
from rlx.artifact.openvino_form import OPENVINO, openvino_int8_graph, openvino_int8_set
from rlx.artifact.precision import PrecisionPlan
from rlx.baking.bf16 import emulate_bf16, units
from rlx.baking.bf16_region import label
from rlx.engines import openvino_engine
from rlx.engines.openvino_bf16 import has_bf16
from rlx.engines.openvino_engine import core
from rlx.engines.openvino_int8 import bf16_beside, has_int8
from rlx.ir.graph import Graph
from rlx.ir.ops.linalg import MatMul
from rlx.ir.ops.windows import Conv
from rlx.onnx.export import export_onnx
from rlx.runtime import Session
from tests.baking.fast_models import image_feeds, small_cnn, small_detector
from tests.engines.test_openvino_int8 import (
    _as_baked_before,
    _cosine,
    _ffn,
    _ffn_feeds,
    _int8_products,
    _planned,
    _product_precisions,
    _save,
    _separable,
    _separable_feeds,
)

pytestmark = pytest.mark.skipif(not has_int8(core()), reason="OpenVINO runs no int8 here")


def _emulated(graph: Graph, plan: PrecisionPlan, bf16: bool) -> Graph:
    """OpenVINO's form as the engine runs it, emulated (bf16 beside the set where the CPU
    has it and the set leaves enough products to bf16: `bf16_beside`)."""
    form = openvino_int8_graph(graph, plan)
    beside = set(bf16_beside(form, plan)) if bf16 else set()
    chosen = openvino_int8_set(plan)
    int8 = {n.id for n in form.nodes() if label(n) in chosen and isinstance(n.op, (Conv, MatMul))}
    return emulate_bf16(form, [u for u in units(form) if label(form.node(u.node)) in beside
                               and label(form.node(u.node)) not in chosen],
                        int8 if beside else ())


@pytest.mark.parametrize("model, feeds, n", [
    (_ffn, _ffn_feeds, 4), (small_cnn, image_feeds, 8), (small_detector, image_feeds, 8)])
def test_the_set_runs_u8_as_its_emulation_says(tmp_path, model, feeds, n):
    path = model(tmp_path)
    out, plan = _planned(path, feeds(1, n), tmp_path)
    assert len(openvino_int8_set(plan)) >= 2
    fast = rlx.load(out, engine="openvino", precision="fast")
    assert fast.precision.startswith(f"fast: int8 {len(openvino_int8_set(plan))} nodes, ")
    graph = read_rlx(out).into_runtime_graph()
    form = openvino_int8_graph(graph, plan)
    precisions = _product_precisions(fast.runner.compiled)
    assert sum(p in ("u8", "i8") for p in precisions) == _int8_products(form)
    original = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    emulated = Session().compile(_emulated(graph, plan, has_bf16(core())))
    exact = Session().compile(openvino_int8_graph(graph, plan, {}))
    for feed in feeds(90, 4):
        got, want = fast.run(feed)[0], emulated.run(feed)[0]
        assert _cosine(original.run(None, feed)[0], got) >= 0.999
        # these run the set with f32 beside it (`bf16_beside`): the emulation is the run
        # (measured 1e-13 apart), f32 on the same weights 1e-8 to 2e-4 away
        assert 1 - _cosine(want, got) <= 1e-9 + 0.01 * (1 - _cosine(exact.run(feed)[0], got))


def _reorders(compiled) -> list[tuple[str, str]]:
    """The compiled model's Reorders (layout and precision conversions): the layer type of
    each one's source and the element type it writes."""
    found = []
    for op in compiled.get_runtime_model().get_ordered_ops():
        if op.get_rt_info()["layerType"].astype(str) == "Reorder":
            source = op.input_value(0).get_node().get_rt_info()["layerType"].astype(str)
            found.append((source, op.output(0).get_element_type().get_type_name()))
    return found


def test_the_conv_reading_the_image_runs_u8_and_saves_its_reorders(tmp_path):
    """The detector's stem (3 channels, 27 terms: too few for the int8 part) joins
    OpenVINO's set: the plugin's conversion of the image to its Convs' layout moves u8, and
    the stem writes u8 into the int8 Conv after it; run f32, the image is reordered f32 and
    the stem's output converted to u8 (accuracy against the emulation: the test above)."""
    out, plan = _planned(small_detector(tmp_path), image_feeds(1, 8), tmp_path)
    assert "stem" in openvino_int8_set(plan)
    fast = rlx.load(out, engine="openvino", precision="fast")
    ours = _reorders(fast.runner.compiled)
    # the image quantised in its own layout (a Subgraph reading the input), then reordered
    assert ("Subgraph", "u8") in ours and not any(s == "Input" for s, _ in ours)
    file = read_rlx(out)
    del file.meta.precision_plan["calibration"][OPENVINO]["int8"]["stem"]
    write_rlx(tmp_path / "f32_stem.rlx", file)
    f32_stem = rlx.load(tmp_path / "f32_stem.rlx", engine="openvino", precision="fast")
    theirs = _reorders(f32_stem.runner.compiled)
    assert ("Input", "f32") in theirs and len(ours) < len(theirs)
    original = ort.InferenceSession(str(tmp_path / "small_detector.onnx"),
                                    providers=["CPUExecutionProvider"])
    for feed in image_feeds(90, 4):
        assert _cosine(original.run(None, feed)[0], fast.run(feed)[0]) >= 0.999


def _outlier_cnn(folder: Path, layers: int = 3) -> Path:
    """x [1, 16, 16, 16] -> Conv 64 -> Relu -> Conv 64 -> Relu -> Conv 64 ("y"), all 3x3
    (`layers` 1: up to the first Relu, "r0"): the first Conv's channel 0 is 1000x the rest,
    its part in the second Conv 1/1000th, so f32 is unmoved but a u8 scale over the second
    Conv's activation rounds every other channel to a few codes: that Conv is the one int8
    wrecks."""
    rng = np.random.default_rng(0)

    def weight(cin: int) -> np.ndarray:
        return (rng.standard_normal((64, cin, 3, 3)) * (2 / (9 * cin)) ** 0.5).astype(
            np.float32)

    inits = {"w0": weight(16), "w1": weight(64), "w2": weight(64)}
    inits["w0"][0] *= 1000
    inits["w1"][:, 0] /= 1000
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1] * 4),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1"], ["c1"], pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["y"], pads=[1] * 4)]
    if layers == 1:
        nodes, inits = nodes[:2], {"w0": inits["w0"]}
    return _save(nodes, inits, [1, 16, 16, 16], folder / f"outlier_cnn{layers}.onnx")


def _outlier_feeds(seed: int, n: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 16, 16, 16)).astype(np.float32)} for _ in range(n)]


def test_the_guard_leaves_the_product_int8_wrecks_out(tmp_path):
    path = _outlier_cnn(tmp_path)
    out, plan = _planned(path, _outlier_feeds(1, 4), tmp_path)
    graph = read_rlx(out).into_runtime_graph()
    convs = [label(n) for n in graph.nodes() if isinstance(n.op, Conv)]  # in graph order
    assert len(convs) == 3
    assert {convs.index(k) for k in openvino_int8_set(plan)} == {0, 2}
    # onnxruntime on the form, every other op f32: what a CPU without bf16 runs
    form = export_onnx(openvino_int8_graph(graph, plan)).SerializeToString()
    ours = ort.InferenceSession(form, providers=["CPUExecutionProvider"])
    original = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for feed in _outlier_feeds(1, 4):
        assert _cosine(original.run(None, feed)[0], ours.run(None, feed)[0]) >= 0.999
    # the second Conv int8 too, its activation's u8 range as onnxruntime measures it
    prefix = ort.InferenceSession(str(_outlier_cnn(tmp_path, 1)),
                                  providers=["CPUExecutionProvider"])
    high = max(float(prefix.run(None, f)[0].max()) for f in _outlier_feeds(1, 4))
    with_it = {**openvino_int8_set(plan), convs[1]: (high / 255, 0)}
    form = export_onnx(openvino_int8_graph(graph, plan, with_it)).SerializeToString()
    run = ort.InferenceSession(form, providers=["CPUExecutionProvider"])
    feed = _outlier_feeds(1, 1)[0]
    with np.errstate(invalid="ignore"):  # every value rounded to zero: no cosine at all
        assert not _cosine(original.run(None, feed)[0], run.run(None, feed)[0]) >= 0.999


@pytest.mark.skipif(not has_bf16(core()), reason="this CPU has no bf16")
def test_the_set_runs_where_onnxruntimes_products_lost_to_bf16(tmp_path, monkeypatch):
    """The separable model: int8 covers 57% of the multiply-adds, so onnxruntime's set with
    f32 beside it was estimated behind the bf16 part (test_openvino_int8); with bf16 beside
    it (the depthwise Conv), the set is ahead."""
    path = _separable(tmp_path)
    out, plan = _planned(path, _separable_feeds(1, 4), tmp_path)
    fast = rlx.load(out, engine="openvino", precision="fast")
    assert len(openvino_int8_set(plan)) == 2  # the pointwise Conv and the Gemm
    assert fast.precision.startswith("fast: int8 2 nodes, bf16 ")
    assert "u8" in _product_precisions(fast.runner.compiled)
    original = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for feed in _separable_feeds(90, 2):
        assert _cosine(original.run(None, feed)[0], fast.run(feed)[0]) >= 0.999
    monkeypatch.setattr(openvino_engine, "has_bf16", lambda core: False)
    f32 = rlx.load(out, engine="openvino", precision="fast")  # a CPU without bf16
    assert f32.precision == "fast: int8 2 nodes, f32"
    assert "bf16" not in _product_precisions(f32.runner.compiled)
    for feed in _separable_feeds(90, 2):
        assert _cosine(original.run(None, feed)[0], f32.run(feed)[0]) >= 0.999


def test_files_baked_before_the_set_run_as_they_did(tmp_path, monkeypatch):
    out, _ = _planned(_ffn(tmp_path), _ffn_feeds(1, 4), tmp_path)
    monkeypatch.setattr(openvino_engine, "has_bf16", lambda core: False)
    checked = rlx.load(_as_baked_before(out, True), engine="openvino", precision="fast")
    assert checked.precision == "fast: int8, f32"
    assert "u8" in _product_precisions(checked.runner.compiled)
    unchecked = rlx.load(_as_baked_before(out, None), engine="openvino", precision="fast")
    assert unchecked.precision.startswith("fast: f32")
    feed = _ffn_feeds(90, 1)[0]
    original = ort.InferenceSession(str(tmp_path / "ffn.onnx"),
                                    providers=["CPUExecutionProvider"])
    assert _cosine(original.run(None, feed)[0], checked.run(feed)[0]) >= 0.999
