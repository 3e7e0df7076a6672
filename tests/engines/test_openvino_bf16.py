"""OpenVINO running a fast plan's bf16 part (issue 32): the per-node mark really keeps a
node f32 while the rest runs bf16, the planned file runs within the guard against
onnxruntime f32 on the original model, the numpy emulation predicts OpenVINO's bf16
numbers, and a CPU without bf16 runs the file's exact graph in f32 and says so. Needs a
CPU whose OPTIMIZATION_CAPABILITIES list BF16 (AVX512-BF16 or AMX)."""

from __future__ import annotations

from functools import partial

import numpy as np
import onnxruntime as ort
import openvino as ov
import pytest
from onnx import TensorProto, helper, numpy_helper, save
from openvino import opset13 as ops

import rlx
from rlx import BakeOptions, bake
from rlx.artifact import read_rlx, write_rlx
from rlx.artifact.planned import exact_graph
from rlx.artifact.precision import PrecisionPlan
from rlx.baking.bf16 import emulate_bf16, units
from rlx.engines import openvino_engine
from rlx.engines.openvino_bf16 import has_bf16, keep_f32, share_transposed
from rlx.engines.openvino_engine import core
from rlx.onnx import import_onnx
from rlx.runtime import Session
from tests.baking.bf16_models import offset_mlp, region_cnn
from tests.baking.fast_models import image_feeds, mlp, small_cnn, vector_feeds

pytestmark = pytest.mark.skipif(not has_bf16(core()), reason="this CPU has no bf16")


@pytest.fixture(autouse=True)
def _bf16_part(monkeypatch):
    """These files' int8 set or int8 part would run instead where estimated faster
    (`rlx.engines.openvino_int8`, tests/engines/test_openvino_own_int8.py): here the bf16
    part runs."""
    monkeypatch.setattr(openvino_engine, "runs_int8", lambda graph, plan, bf16: False)
    monkeypatch.setattr(openvino_engine, "runs_own_int8", lambda graph, form, plan, bf16: False)


def _bf16(x: np.ndarray) -> np.ndarray:
    """Round to nearest even bf16 by integer arithmetic on the float32 bits."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32)
            .view(np.float32))


def _cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def _two_matmuls(mark_bf16: set[str], precision: str):
    """x [16, 256] -> A (@ w1 [256, 256]) -> B (@ w2 [256, 64]); both outputs returned.
    Every op but those named in `mark_bf16` is marked to keep f32."""
    rng = np.random.default_rng(0)
    w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((256, 256), (256, 64)))
    x = rng.standard_normal((16, 256)).astype(np.float32)
    p = ops.parameter([16, 256], np.float32, name="x")
    a = ops.matmul(p, ops.constant(w1), False, False)
    b = ops.matmul(a, ops.constant(w2), False, False)
    for node, name in ((a, "A"), (b, "B")):
        node.set_friendly_name(name)
        node.output(0).get_tensor().set_names({name})
    model, _ = keep_f32(core(), ov.Model([a.output(0), b.output(0)], [p]), mark_bf16)
    compiled = core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": precision})
    outs = list(compiled.create_infer_request().infer({"x": x}).values())
    return [np.array(o) for o in outs], x, w1, w2


def test_a_marked_node_stays_f32_and_the_others_run_bf16():
    (a32, b32), x, w1, w2 = _two_matmuls(set(), "f32")
    (a, b), *_ = _two_matmuls({"B"}, "bf16")  # A marked f32, B bf16
    np.testing.assert_array_equal(a, a32)  # bit-equal: A ran f32
    want = _bf16((_bf16(a32).astype(np.float64) @ _bf16(w2)).astype(np.float32))
    assert not np.array_equal(b, b32)
    assert np.abs(b - want).max() <= np.abs(want).max() * 2.0 ** -7  # bf16, as emulated
    (a, b), *_ = _two_matmuls({"A"}, "bf16")  # A bf16, B marked f32
    # A's result feeds f32 consumers only, so it is not stored as bf16: exact products of
    # bf16 operands, summed in f32
    want = _bf16(x).astype(np.float64) @ _bf16(w1)
    assert np.abs(a - want).max() <= np.abs(want).max() * 1e-5
    assert np.abs(a - a32).max() > 100 * np.abs(a - want).max()  # bf16's error, not f32's
    np.testing.assert_allclose(b, a.astype(np.float64) @ w2, rtol=1e-4, atol=1e-2)


def _planned(path, feeds, folder):
    file, report = bake(*import_onnx(path),
                        BakeOptions.from_profile("fast").replace(calibration=feeds))
    write_rlx(folder / f"{path.stem}.rlx", file)
    return folder / f"{path.stem}.rlx", report.precision


# calibration feeds: the CNN's single images need 8 for its int8 weights (stored as int8,
# run by OpenVINO as their f32 values) to hold held-out; the MLPs' 8 rows of random logits
# have argmax near-ties, which a 4-feed calibration has fewer of
@pytest.mark.parametrize("model, feeds, n", [
    (mlp, vector_feeds, 4), (small_cnn, image_feeds, 8), (offset_mlp, vector_feeds, 4),
    (partial(offset_mlp, stored=True), vector_feeds, 4), (region_cnn, image_feeds, 8)])
def test_fast_runs_the_bf16_plan_within_the_guard(tmp_path, model, feeds, n):
    path = model(tmp_path)
    out, plan = _planned(path, feeds(1, n), tmp_path)
    assert plan.counts["bf16"] >= 1
    fast = rlx.load(out, engine="openvino", precision="fast")
    assert fast.precision.startswith("fast: bf16 ")
    reference = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for feed in feeds(90, 4):
        assert _cosine(reference.run(None, feed)[0], fast.run(feed)[0]) >= 0.999


@pytest.mark.parametrize("model, feeds", [(mlp, vector_feeds), (offset_mlp, vector_feeds),
                                         (region_cnn, image_feeds)])
def test_the_numpy_emulation_predicts_openvino(tmp_path, model, feeds):
    out, plan = _planned(model(tmp_path), feeds(1, 4), tmp_path)
    file = read_rlx(out)
    graph = exact_graph(file.into_runtime_graph(), plan)
    chosen = [u for u in units(graph) if u.names(graph)[0] in plan.bf16]
    emulated, exact = (Session().compile(g) for g in (emulate_bf16(graph, chosen), graph))
    fast = rlx.load(out, engine="openvino", precision="fast")
    for feed in feeds(90, 4):
        got = fast.run(feed)[0]
        bf16_error = 1 - _cosine(exact.run(feed)[0], got)
        assert bf16_error > 0  # OpenVINO ran bf16 ...
        assert 1 - _cosine(emulated.run(feed)[0], got) <= 0.1 * bf16_error  # ... as emulated


def _runtime_ops(compiled: ov.CompiledModel) -> list[tuple[str, str, str]]:
    """(layer type, runtime precision, original layer names) of each executed op."""
    info = [op.get_rt_info() for op in compiled.get_runtime_model().get_ordered_ops()]
    return [(i["layerType"].astype(str), i["runtimePrecision"].astype(str),
             i["originalLayersNames"].astype(str)) for i in info]


def test_the_cheap_ops_between_products_run_bf16_with_few_reorders(tmp_path):
    """OpenVINO's own default (bf16 everywhere) is the reference for how few precision
    switches a bf16 run of the model needs."""
    path = region_cnn(tmp_path)
    out, plan = _planned(path, image_feeds(1, 8), tmp_path)
    ours = _runtime_ops(rlx.load(out, engine="openvino", precision="fast").runner.compiled)
    theirs = _runtime_ops(core().compile_model(str(path), "CPU"))
    cheap = [op for op in ours if op[0] in ("Pooling", "Concatenation", "Eltwise")]
    assert cheap and all(precision == "bf16" for _, precision, _ in cheap)
    assert sum(t == "Reorder" for t, _, _ in ours) <= sum(t == "Reorder" for t, _, _ in theirs)


def test_a_node_the_guard_keeps_runs_f32_on_openvino(tmp_path):
    """With its bias Add after it (which the plugin fuses into a product with a constant
    weight, dropping the f32 mark: `openvino_bf16.unfolded_operands`)."""
    out, plan = _planned(offset_mlp(tmp_path, stored=True), vector_feeds(1, 4), tmp_path)
    assert "m0" not in plan.bf16 and "m1" in plan.bf16
    ops_run = _runtime_ops(rlx.load(out, engine="openvino", precision="fast").runner.compiled)
    products = [precision for kind, precision, _ in ops_run
                if kind in ("FullyConnected", "MatMul")]
    assert products == ["f32", "bf16"]  # m0, m1 in graph order


_TAILS = {  # ONNX nodes after the product "p", ending in "t"; float64 reference
    "none": ([("Identity", ["p"])], lambda p, b, s: p),
    "add": ([("Add", ["p", "b"])], lambda p, b, s: p + b),
    "mul": ([("Mul", ["p", "s"])], lambda p, b, s: p * s),
    "scalar_mul": ([("Mul", ["p", "half"])], lambda p, b, s: p * 0.75),
    "add_mul": ([("Add", ["p", "b"]), ("Mul", ["t0", "s"])], lambda p, b, s: (p + b) * s),
    "batchnorm": ([("Mul", ["p", "s"]), ("Add", ["t0", "b"])], lambda p, b, s: p * s + b),
    "relu": ([("Relu", ["p"])], lambda p, b, s: np.maximum(p, 0)),
    "clamp": ([("Clip", ["p", "lo", "hi"])], lambda p, b, s: np.clip(p, -1, 1)),
    "sigmoid": ([("Sigmoid", ["p"])], lambda p, b, s: 1 / (1 + np.exp(-p))),
    "swish": ([("Sigmoid", ["p"]), ("Mul", ["p", "t0"])], lambda p, b, s: p / (1 + np.exp(-p))),
}


def _conv3x3(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A 3x3 convolution, padding 1, in float64: the sum of nine shifted products."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    padded, (h, width) = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), x.shape[2:]
    return sum(np.einsum("nchw,oc->nohw", padded[:, :, i:i + h, j:j + width], w[:, :, i, j])
               for i in range(3) for j in range(3))


def _product_then(folder, product: str, tail: str):
    """x -> product "p" (MatMul, Gemm with transB, Conv, or a Conv with two outputs per
    input channel: groups, constant weight) -> `tail` ("t",
    an output) -> Reshape -> MatMul "z" (the only bf16 node of the plan); the file, x, and
    t in float64 from x and the weight rounded as given (bf16 operands: what a bf16 run
    computes before its output is rounded)."""
    rng = np.random.default_rng(0)
    conv, groups = product in ("Conv", "GroupConv"), 16 if product == "GroupConv" else 1
    shape, channels = ([1, 16, 16, 16], (1, 32, 1, 1)) if conv else ([16, 256], (256,))
    w_shape = (32, 16 // groups, 3, 3) if conv else (256, 256)
    w = (rng.standard_normal(w_shape) / 16).astype(np.float32)
    width = 32 * 16 * 16 if conv else 256
    inits = {"w": w, "s": (rng.standard_normal(channels) * 0.5 + 1).astype(np.float32),
             "b": (rng.standard_normal(channels) * 0.5).astype(np.float32),
             "lo": np.float32(-1), "hi": np.float32(1), "half": np.float32(0.75),
             "flat": np.array([shape[0], width]),
             "w2": (rng.standard_normal((width, 64)) / 16).astype(np.float32)}
    attrs = {"Conv": {"pads": [1, 1, 1, 1]}, "Gemm": {"transB": 1},
             "GroupConv": {"pads": [1, 1, 1, 1], "group": groups}}.get(product, {})
    steps, reference = _TAILS[tail]
    kind = "Conv" if conv else product
    nodes = [helper.make_node(kind, ["x", "w"], ["p"], name="p", **attrs)]
    nodes += [helper.make_node(op, ins, [f"t{k}" if k < len(steps) - 1 else "t"])
              for k, (op, ins) in enumerate(steps)]
    nodes += [helper.make_node("Reshape", ["t", "flat"], ["f"]),
              helper.make_node("MatMul", ["f", "w2"], ["z"], name="z")]
    graph = helper.make_graph(
        nodes, "product_then", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("t", "z")],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()])
    path = folder / f"{product}_{tail}.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    file, _ = bake(*import_onnx(path), BakeOptions())
    file.meta.precision_plan = PrecisionPlan({"bf16": 1, "f32": 1}, bf16=["z"]).to_json()
    write_rlx(folder / "planned.rlx", file)
    x = rng.standard_normal(shape).astype(np.float32)

    def expected(round_operands) -> np.ndarray:
        a, b = round_operands(x), round_operands(w)
        if groups > 1:  # output channel o reads input channel o // 2 only
            dense = np.zeros((32, 16, 3, 3), np.float32)
            dense[np.arange(32), np.arange(32) // 2] = b[:, 0]
            b = dense
        p = _conv3x3(a, b) if conv else a.astype(np.float64) @ (b.T if product == "Gemm" else b)
        return reference(p, inits["b"].astype(np.float64), inits["s"].astype(np.float64))

    return folder / "planned.rlx", x, expected


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("tail", list(_TAILS))
@pytest.mark.parametrize("product", ["MatMul", "Gemm", "Conv", "GroupConv"])
def test_a_kept_product_runs_f32_whatever_follows_it(tmp_path, product, tail, threads):
    """The plugin folds a constant Multiply after a product into its weight and a MatMul
    with its bias into a FullyConnected, new ops without the f32 mark (`unfolded_operands`);
    the kept product must still compute in f32, to within f32 rounding of the float64
    result, where the same product of bf16 operands is off by far more."""
    path, x, expected = _product_then(tmp_path, product, tail)
    fast = rlx.load(path, engine="openvino", precision="fast", threads=threads)
    got = fast.run({"x": x})[0]
    exact, as_bf16 = expected(lambda a: a), expected(_bf16)
    tolerance = 1e-5 * np.abs(exact).max()
    assert np.abs(as_bf16 - exact).max() > 30 * tolerance  # bf16 operands would show
    assert np.abs(got - exact).max() <= tolerance
    ops_run = _runtime_ops(fast.runner.compiled)
    kinds = ("MatMul", "FullyConnected", "Convolution", "GroupConvolution")
    products = {names: precision for kind, precision, names in ops_run if kind in kinds}
    assert [p for names, p in products.items() if "z" not in names.split(",")] == ["f32"]
    assert [p for names, p in products.items() if "z" in names.split(",")] == ["bf16"]


def test_without_bf16_the_plan_runs_f32_and_says_so(tmp_path, monkeypatch):
    out, _ = _planned(mlp(tmp_path), vector_feeds(1, 4), tmp_path)
    monkeypatch.setattr(openvino_engine, "has_bf16", lambda core: False)
    fast = rlx.load(out, engine="openvino", precision="fast")
    assert fast.precision == "fast: f32 (no bf16 on this CPU)"
    exact = rlx.load(out, engine="openvino", precision="exact")
    for feed in vector_feeds(90, 2):
        np.testing.assert_array_equal(fast.run(feed)[0], exact.run(feed)[0])


def _shared_weight_model() -> tuple[ov.Model, np.ndarray, np.ndarray]:
    """Three MatMuls (an unrolled RNN's steps) reading one [256, 128] weight."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((256, 128)).astype(np.float32)
    x = rng.standard_normal((3, 4, 256)).astype(np.float32)
    p = ops.parameter(list(x.shape), np.float32, name="x")
    weight = ops.constant(w)
    steps = [ops.matmul(ops.gather(p, ops.constant(np.int64(k)), ops.constant(np.int64(0))),
                        weight, False, False) for k in range(3)]
    return ov.Model([s.output(0) for s in steps], [p]), x, w


def test_matmuls_sharing_a_weight_read_one_transposed_copy():
    model, x, w = _shared_weight_model()
    assert share_transposed(model) == 1
    products = [op for op in model.get_ordered_ops() if op.get_type_name() == "MatMul"]
    assert len({op.input_value(1).get_node().get_friendly_name() for op in products}) == 1
    assert all(op.get_attributes()["transpose_b"] for op in products)
    compiled = core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    got = [np.array(v) for v in compiled.create_infer_request().infer({"x": x}).values()]
    for k in range(3):  # float64 reference
        np.testing.assert_allclose(got[k], x[k].astype(np.float64) @ w, rtol=1e-4, atol=1e-4)
    # unshared, the plugin transposes the weight once per reader: 3 Transposes, 3 copies
    kinds = [op.get_rt_info()["layerType"].astype(str)
             for op in compiled.get_runtime_model().get_ordered_ops()]
    assert kinds.count("FullyConnected") == 3 and "Transpose" not in kinds
