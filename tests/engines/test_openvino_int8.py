"""OpenVINO running a fast plan's int8 part as files baked before its own set
(test_openvino_own_int8) hold it (issue 32): its int8 products run u8 x i8 on the plugin,
every other op f32, within the guard against onnxruntime f32 on the original model and at
the numbers onnxruntime's int8 kernels give on the same graph; the engine runs the bf16
part where that covers more of the work, and files baked without the check. Needs a CPU
OpenVINO runs int8 on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import openvino as ov
import pytest
from onnx import TensorProto, helper, numpy_helper, save

import rlx
from rlx import BakeOptions, bake
from rlx.artifact import read_rlx, write_rlx
from rlx.artifact.openvino_form import OPENVINO
from rlx.artifact.planned import int8_products_graph
from rlx.artifact.precision import PrecisionPlan
from rlx.engines import openvino_engine
from rlx.engines.openvino_bf16 import has_bf16
from rlx.engines.openvino_engine import core
from rlx.engines.openvino_int8 import has_int8, runs_int8
from rlx.ir.graph import Graph
from rlx.ir.ops.linalg import MatMul
from rlx.ir.ops.quant import DequantizeLinear, QuantizeLinear
from rlx.ir.ops.windows import Conv
from rlx.onnx import import_onnx
from rlx.onnx.export import export_onnx
from rlx.runtime import Session
from tests.baking.fast_models import image_feeds, mlp, small_cnn, small_detector, vector_feeds

pytestmark = pytest.mark.skipif(not has_int8(core()), reason="OpenVINO runs no int8 here")

_PRODUCTS = ("Convolution", "GroupConvolution", "FullyConnected", "MatMul")


def _cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def _planned(path: Path, feeds, folder: Path) -> tuple[Path, PrecisionPlan]:
    file, report = bake(*import_onnx(path),
                        BakeOptions.from_profile("fast").replace(calibration=feeds))
    write_rlx(folder / f"{path.stem}.rlx", file)
    assert report.precision is not None
    return folder / f"{path.stem}.rlx", report.precision


def _as_baked_before(out: Path, passed: bool | None) -> Path:
    """The file at `out` as a bake before OpenVINO's own set wrote it: no set, and the
    check of onnxruntime's set in its products' form (`passed`; None: no check either)."""
    file = read_rlx(out)
    calibration = file.meta.precision_plan["calibration"]
    del calibration[OPENVINO]
    if passed is not None:
        calibration["int8_products"] = {"passed": passed, "outputs": []}
    write_rlx(out.with_name("old.rlx"), file)
    return out.with_name("old.rlx")


def _int8_products(graph: Graph) -> int:
    """The int8 Convs and MatMuls of `graph` the plugin runs u8: not a 1x1 Conv with a
    stride, which it rewrites out of the pattern and runs f32 on the dequantised codes (the
    same numbers, as slow as f32; measured on OpenVINO 2026.4)."""
    def strided_1x1(node) -> bool:
        kernel = graph.node(node.inputs[1]).tensor_shape.dims[2:]
        return isinstance(node.op, Conv) and all(k == 1 for k in kernel) \
            and any(s > 1 for s in node.op.strides)

    return sum(isinstance(n.op, (Conv, MatMul)) and len(n.inputs) > 1
               and isinstance(graph.node(n.inputs[1]).op, DequantizeLinear)
               and not strided_1x1(n) for n in graph.nodes())


def _product_precisions(compiled: ov.CompiledModel) -> list[str]:
    info = [op.get_rt_info() for op in compiled.get_runtime_model().get_ordered_ops()]
    return [i["runtimePrecision"].astype(str) for i in info
            if i["layerType"].astype(str) in _PRODUCTS]


def _ffn(folder: Path) -> Path:
    """x [32, 256] -> MatMul 512 + Add -> Relu -> MatMul 256 + Add, + x ("y"): a
    transformer's feed-forward block and its residual (the plugin runs a smaller MLP, 8 x
    64, as one f32 Subgraph)."""
    rng = np.random.default_rng(0)
    inits = {"w0": (rng.standard_normal((256, 512)) * (2 / 256) ** 0.5).astype(np.float32),
             "b0": (rng.standard_normal(512) * 0.1).astype(np.float32),
             "w1": (rng.standard_normal((512, 256)) * (2 / 512) ** 0.5).astype(np.float32),
             "b1": (rng.standard_normal(256) * 0.1).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["m0"]),
             helper.make_node("Add", ["m0", "b0"], ["a0"]),
             helper.make_node("Relu", ["a0"], ["h"]),
             helper.make_node("MatMul", ["h", "w1"], ["m1"]),
             helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Add", ["x", "a1"], ["y"])]
    return _save(nodes, inits, [32, 256], folder / "ffn.onnx")


def _ffn_feeds(seed: int, n: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((32, 256)).astype(np.float32)} for _ in range(n)]


def _save(nodes, inits: dict[str, np.ndarray], shape: list[int], path: Path) -> Path:
    graph = helper.make_graph(
        nodes, path.stem, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, n) for n, a in inits.items()])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


# the CNN's single images need 8 calibration feeds to hold held-out (test_openvino_bf16)
@pytest.mark.parametrize("model, feeds, n", [
    (_ffn, _ffn_feeds, 4), (small_cnn, image_feeds, 8), (small_detector, image_feeds, 8)])
def test_the_int8_products_of_a_file_baked_before_run_u8(tmp_path, model, feeds, n):
    path = model(tmp_path)
    out, plan = _planned(path, feeds(1, n), tmp_path)
    out = _as_baked_before(out, passed=True)
    fast = rlx.load(out, engine="openvino", precision="fast")
    assert fast.precision == "fast: int8, f32"
    products = int8_products_graph(read_rlx(out).into_runtime_graph(), plan)
    precisions = _product_precisions(fast.runner.compiled)
    assert plan.counts["int8"] >= 2
    assert sum(p in ("u8", "i8") for p in precisions) == _int8_products(products)
    assert all(p in ("u8", "i8", "f32") for p in precisions)
    original = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    same_graph = ort.InferenceSession(export_onnx(products).SerializeToString(),
                                      providers=["CPUExecutionProvider"])
    for feed in feeds(90, 4):
        got = fast.run(feed)[0]
        assert _cosine(original.run(None, feed)[0], got) >= 0.999
        assert 1 - _cosine(same_graph.run(None, feed)[0], got) <= 1e-5


def test_the_products_graph_keeps_pairs_only_before_int8_products(tmp_path):
    """The detector's 8-bit SiLU / Add / Concat chain computes f32 there; numpy runs the
    graph as onnxruntime does."""
    out, plan = _planned(small_detector(tmp_path), image_feeds(1, 8), tmp_path)
    graph = read_rlx(out).into_runtime_graph()
    products = int8_products_graph(graph, plan)
    users = products.users()
    pairs = [n for n in products.nodes() if isinstance(n.op, DequantizeLinear)
             and isinstance(products.node(n.inputs[0]).op, QuantizeLinear)]
    assert pairs and plan.counts["int8 chain"] > 0
    for pair in pairs:
        readers = [products.node(u) for u in users[pair.id]]
        assert readers and all(isinstance(r.op, (Conv, MatMul)) and r.inputs[0] == pair.id
                               for r in readers)
    quantizers = [n for g in (graph, products) for n in g.nodes()
                  if isinstance(n.op, QuantizeLinear)]
    assert len(pairs) < len(quantizers) - len(pairs)  # fewer than the plan's
    ours = Session().compile(products)
    onnxruntime = ort.InferenceSession(export_onnx(products).SerializeToString(),
                                       providers=["CPUExecutionProvider"])
    for feed in image_feeds(90, 2):
        assert 1 - _cosine(onnxruntime.run(None, feed)[0], ours.run(feed)[0]) <= 1e-6


def _separable(folder: Path) -> Path:
    """x [1, 64, 32, 32] -> depthwise Conv 7x7 (49 terms: stays f32 in int8) -> Relu ->
    Conv 1x1 64 -> Relu -> GlobalAveragePool -> Flatten -> Gemm 10 ("logits"): int8 covers
    57% of the multiply-adds, bf16 all of them."""
    rng = np.random.default_rng(0)
    inits = {"dw": (rng.standard_normal((64, 1, 7, 7)) * (2 / 49) ** 0.5).astype(np.float32),
             "pw": (rng.standard_normal((64, 64, 1, 1)) * (2 / 64) ** 0.5).astype(np.float32),
             "fc": (rng.standard_normal((10, 64)) * 0.5).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "dw"], ["d"], group=64, pads=[3] * 4),
             helper.make_node("Relu", ["d"], ["dr"]),
             helper.make_node("Conv", ["dr", "pw"], ["p"]),
             helper.make_node("Relu", ["p"], ["pr"]),
             helper.make_node("GlobalAveragePool", ["pr"], ["gap"]),
             helper.make_node("Flatten", ["gap"], ["flat"]),
             helper.make_node("Gemm", ["flat", "fc"], ["logits"], transB=1)]
    return _save(nodes, inits, [1, 64, 32, 32], folder / "separable.onnx")


def _separable_feeds(seed: int, n: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 64, 32, 32)).astype(np.float32)} for _ in range(n)]


@pytest.mark.skipif(not has_bf16(core()), reason="this CPU has no bf16")
def test_the_bf16_part_runs_where_it_covers_more_of_the_work(tmp_path, monkeypatch):
    path = _separable(tmp_path)
    out, plan = _planned(path, _separable_feeds(1, 4), tmp_path)
    out = _as_baked_before(out, passed=True)
    plan = read_rlx(out).precision_plan
    assert plan is not None
    graph = read_rlx(out).into_runtime_graph()
    assert plan.counts["int8"] >= 1 and plan.counts["bf16"] == 3
    assert not runs_int8(graph, plan, bf16=True) and runs_int8(graph, plan, bf16=False)
    assert rlx.load(out, engine="openvino", precision="fast").precision.startswith(
        "fast: bf16 ")
    monkeypatch.setattr(openvino_engine, "has_bf16", lambda core: False)
    fast = rlx.load(out, engine="openvino", precision="fast")
    assert fast.precision == "fast: int8, f32"
    assert "u8" in _product_precisions(fast.runner.compiled)
    original = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for feed in _separable_feeds(90, 2):
        assert _cosine(original.run(None, feed)[0], fast.run(feed)[0]) >= 0.999


def test_a_file_baked_without_the_check_runs_no_int8(tmp_path):
    out, plan = _planned(mlp(tmp_path), vector_feeds(1, 4), tmp_path)
    graph = read_rlx(out).into_runtime_graph()
    plan.calibration["int8_products"] = {"passed": True}
    assert runs_int8(graph, plan, bf16=False)
    del plan.calibration["int8_products"]
    assert not runs_int8(graph, plan, bf16=False)


def test_where_the_plugin_throws_on_the_int8_part_the_bf16_part_runs(tmp_path, monkeypatch,
                                                                     caplog):
    """As OpenVINO 2026.4 does on a Concat along axis 0 before an int8 MatMul (an unrolled
    CRNN's time steps): the plugin's failure is stood in for, the engine's answer is real."""
    out, _ = _planned(_ffn(tmp_path), _ffn_feeds(1, 4), tmp_path)
    build = openvino_engine.OpenVinoRunner._build

    def throwing(self, graph, threads, plan, bf16):
        if any(isinstance(n.op, QuantizeLinear) for n in graph.nodes()):
            raise RuntimeError("Exception from graph_rewrite.cpp:298:\n[MatMulTransformation]")
        build(self, graph, threads, plan, bf16)

    monkeypatch.setattr(openvino_engine.OpenVinoRunner, "_build", throwing)
    fast = rlx.load(out, engine="openvino", precision="fast")
    assert fast.precision.startswith("fast: bf16 " if has_bf16(core()) else "fast: f32")
    assert "cannot run the int8 set ([MatMulTransformation])" in caplog.text
