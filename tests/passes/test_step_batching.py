"""`batch_step_products`: the per-step input projections of an unrolled recurrent export
(Gather / Split / Slice over time, a shared weight, a bias Add) become one MatMul and one Add
over all steps, and the baked model computes what onnxruntime computes on the original;
look-alikes (other weights, slices on the contracted axis, one step) are left alone."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import rlx
from rlx import BakeOptions, bake
from rlx.artifact import write_rlx
from rlx.ir import DType, Graph, Shape
from rlx.ir.ops.elementwise import BinaryOp
from rlx.ir.ops.shaping import Gather
from rlx.ir.ops.slicing import Slice
from rlx.onnx import import_onnx
from rlx.passes import batch_step_products
from tests.passes.common import checked

T, B, K, H = 6, 3, 64, 16  # steps, batch, input width, hidden width
RNG = np.random.default_rng(7)
W_IH = (RNG.standard_normal((K, H)) / 8).astype(np.float32)
W_HH = (RNG.standard_normal((H, H)) / 4).astype(np.float32)
BIAS = RNG.standard_normal(H).astype(np.float32)
FEEDS = {"x": RNG.standard_normal((T, B, K)).astype(np.float32),
         "h0": RNG.standard_normal((B, H)).astype(np.float32)}


def _step_input(nodes: list, form: str, t: int) -> str:
    """x's time step t as [B, K], cut the way `form` says."""
    out = f"x{t}"
    if form == "gather":
        nodes.append(helper.make_node("Gather", ["x", f"t{t}"], [out], axis=0))
    elif form == "split":  # one Split for all steps, each piece squeezed
        if t == 0:
            nodes.append(helper.make_node("Split", ["x"], [f"piece{s}" for s in range(T)],
                                          axis=0, num_outputs=T))
        nodes.append(helper.make_node("Squeeze", [f"piece{t}", "axis0"], [out]))
    else:
        nodes.append(helper.make_node("Slice", ["x", f"t{t}", f"t{t + 1}", "axis0"], [f"s{t}"]))
        nodes.append(helper.make_node("Squeeze", [f"s{t}", "axis0"], [out]))
    return out


def _unrolled_rnn(form: str, product: str) -> onnx.ModelProto:
    """h_t = tanh(x_t W_ih + b + h_{t-1} W_hh) for t < T; outputs the last h and all hs.
    `product` "gemm" writes Gemm(x_t, W_ih^T, b, transB=1), as torch exports nn.RNNCell."""
    nodes: list = []
    h = "h0"
    for t in range(T):
        x_t = _step_input(nodes, form, t)
        if product == "gemm":
            nodes.append(helper.make_node("Gemm", [x_t, "w_ih_t", "b"], [f"p{t}"], transB=1))
        else:
            nodes.append(helper.make_node("MatMul", [x_t, "w_ih"], [f"m{t}"]))
            nodes.append(helper.make_node("Add", [f"m{t}", "b"], [f"p{t}"]))
        nodes.append(helper.make_node("MatMul", [h, "w_hh"], [f"r{t}"]))
        nodes.append(helper.make_node("Add", [f"p{t}", f"r{t}"], [f"a{t}"]))
        nodes.append(helper.make_node("Tanh", [f"a{t}"], [f"h{t + 1}"]))
        nodes.append(helper.make_node("Unsqueeze", [f"h{t + 1}", "axis0"], [f"u{t}"]))
        h = f"h{t + 1}"
    nodes.append(helper.make_node("Concat", [f"u{t}" for t in range(T)], ["hs"], axis=0))
    nodes.append(helper.make_node("Identity", [h], ["last"]))
    inits = [numpy_helper.from_array(a, n) for n, a in (
        ("w_ih", W_IH), ("w_ih_t", np.ascontiguousarray(W_IH.T)), ("w_hh", W_HH), ("b", BIAS),
        ("axis0", np.array([0], np.int64)))]
    index = (lambda t: np.int64(t)) if form == "gather" else (lambda t: np.array([t], np.int64))
    inits += [numpy_helper.from_array(index(t), f"t{t}") for t in range(T + 1)]
    graph = helper.make_graph(
        nodes, "unrolled_rnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, B, K]),
         helper.make_tensor_value_info("h0", TensorProto.FLOAT, [B, H])],
        [helper.make_tensor_value_info("last", TensorProto.FLOAT, [B, H]),
         helper.make_tensor_value_info("hs", TensorProto.FLOAT, [T, B, H])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _op_counts(graph: Graph) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in graph.nodes():
        name = getattr(node.op, "op", None)
        kind = f"{type(node.op).__name__}.{name.value}" if isinstance(name, BinaryOp) \
            else type(node.op).__name__
        counts[kind] = counts.get(kind, 0) + 1
    return counts


@pytest.mark.parametrize("product", ["matmul", "gemm"])
@pytest.mark.parametrize("form", ["gather", "split", "slice"])
def test_baked_unrolled_rnn_batches_and_matches_onnxruntime(tmp_path, form, product):
    model = _unrolled_rnn(form, product)
    onnx_path = tmp_path / "rnn.onnx"
    onnx.save(model, onnx_path)
    want = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).run(
        None, FEEDS)
    file, _ = bake(*import_onnx(onnx_path), BakeOptions.from_profile("exact"))
    counts = _op_counts(file.graph)
    # one input projection for all steps, T recurrent ones; one bias Add, T recurrent Adds
    assert counts["MatMul"] == 1 + T
    assert counts["Binary.add"] == 1 + T
    write_rlx(tmp_path / "rnn.rlx", file)
    got = rlx.load(tmp_path / "rnn.rlx", engine="numpy").run(FEEDS)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-6)


def _steps_graph(cut, weights: list[np.ndarray], x_dims=(T, B, K)) -> Graph:
    """One MatMul per weight, each on `cut(g, x, step)`; outputs every product."""
    g = Graph("steps")
    x = g.input("x", Shape(x_dims, DType.F32))
    g.set_outputs([g.matmul(cut(g, x, s), g.constant(w)) for s, w in enumerate(weights)])
    return g


def _gather(g: Graph, x: int, step: int) -> int:
    return g.add_node(Gather(axis=0), [x, g.constant(np.int64(step))])


def test_pass_output_is_a_slice_of_one_product():
    graph = _steps_graph(_gather, [W_IH.copy() for _ in range(T)])  # equal copies merge
    new, count = checked(batch_step_products, graph)
    assert count == T
    x = FEEDS["x"]
    got = rlx.runtime.Session().compile(new).run({"x": x})
    want = np.matmul(x.astype(np.float64), W_IH.astype(np.float64))
    for step, out in enumerate(got):
        np.testing.assert_allclose(out, want[step], rtol=0, atol=1e-5)
    assert sum(type(n.op).__name__ == "MatMul" for n in new.nodes()) == 1


def _contracted_slice(g: Graph, x: int, step: int) -> int:
    """x [B, T*K] cut along its LAST axis: step's K columns (a sum over them, not rows)."""
    return g.add_node(Slice(starts=(step * K,), ends=((step + 1) * K,), axes=(1,)), [x])


@pytest.mark.parametrize("case", ["other weights", "contracted axis", "one step",
                                  "too little of the tensor"])
def test_pass_leaves_look_alikes_alone(case):
    if case == "other weights":
        graph = _steps_graph(_gather, [W_IH + s for s in range(T)])
    elif case == "contracted axis":
        graph = _steps_graph(_contracted_slice, [W_IH] * T, (B, T * K))
    elif case == "one step":
        graph = _steps_graph(_gather, [W_IH])
    else:  # two of 6 steps: batching would multiply three times the rows it needs
        graph = _steps_graph(_gather, [W_IH, W_IH])
    new, count = checked(batch_step_products, graph)
    assert count == 0 and new is graph


def test_fast_plan_quantises_one_batched_projection(tmp_path):
    """The int8 plan sees one input projection of K = 64 terms (an int8 candidate) where it
    saw T; the recurrent products (16 terms) stay float."""
    onnx_path = tmp_path / "rnn.onnx"
    onnx.save(_unrolled_rnn("gather", "gemm"), onnx_path)
    calibration = [{name: np.random.default_rng(seed).standard_normal(a.shape).astype(a.dtype)
                    for name, a in FEEDS.items()} for seed in range(3)]
    _, report = bake(*import_onnx(onnx_path),
                     BakeOptions.from_profile("fast").replace(calibration=calibration))
    assert report.precision is not None and report.precision.counts["int8"] == 1
