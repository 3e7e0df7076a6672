"""The integer kernels (`rlx.kernels.integer`) against exact int64 numpy, onnxruntime and
ONNX's reference evaluator, at the edges of float32's exact range."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from rlx.ir import DequantizeLinear, DType, Graph, MatMulInteger, QuantizeLinear, Shape
from rlx.kernels.integer import (
    BLOCKED_ROWS,
    EXACT_FLOAT32,
    exact_terms,
    integer_product,
    weight_product,
)
from rlx.runtime import Session


def test_exact_terms_is_the_float32_bound():
    assert exact_terms(255, 255) == 258  # 258 * 65025 <= 2^24 < 259 * 65025
    assert exact_terms(255, 127) == 518
    assert exact_terms(0, 255) == EXACT_FLOAT32
    for a, b in ((255, 255), (255, 127), (128, 128), (3, 7)):
        k = exact_terms(a, b)
        assert k * a * b <= 2**24 < (k + 1) * a * b


@pytest.mark.parametrize("k", [257, 258, 259, 517, 518, 519, 1031, 4097])
def test_integer_product_is_exact_past_the_bound(k):
    """All products at the largest magnitude, one sign: every sum past the bound is an
    integer float32 cannot hold, so one float32 GEMM over K would round."""
    rng = np.random.default_rng(k)
    a = np.full((3, k), 255.0, np.float32)
    b = np.where(rng.random((k, 5)) < 0.9, 255.0, 253.0).astype(np.float32)
    exact = a.astype(np.int64) @ b.astype(np.int64)
    assert np.array_equal(integer_product(a, b, 255, 255), exact.astype(np.int32))
    if k == 4097:  # the odd totals above 2^24 are not float32 values at all
        assert not np.array_equal(np.matmul(a, b).astype(np.int64), exact)


@pytest.mark.parametrize("nonzero, gemms", [(258, 1), (259, 8)])
def test_sparse_rows_take_one_gemm_over_k(monkeypatch, nonzero, gemms):
    """K = 2048 (past the 258-term chunk at A = B = 255), every row with `nonzero` entries
    of 255: a row sum of |a| of 258 * 255 times B = 255 is within 2^24, one GEMM over all
    of K; one entry more is not, eight chunks. Both are exact."""
    rng = np.random.default_rng(nonzero)
    a = np.zeros((3, 2048), np.float32)
    for row in a:
        row[rng.choice(2048, nonzero, replace=False)] = 255.0
    b = np.where(rng.random((2048, 5)) < 0.9, 255.0, 253.0).astype(np.float32)
    calls = []
    matmul = np.matmul
    monkeypatch.setattr(np, "matmul", lambda *args: calls.append(1) or matmul(*args))
    got = integer_product(a, b, 255, 255)
    exact = a.astype(np.int64) @ b.astype(np.int64)
    assert np.array_equal(got, exact) and len(calls) == gemms


def test_integer_product_broadcasts_batches():
    rng = np.random.default_rng(1)
    a = rng.integers(-255, 256, (2, 3, 4, 700)).astype(np.float32)
    b = rng.integers(-255, 256, (3, 700, 6)).astype(np.float32)
    exact = a.astype(np.int64) @ b.astype(np.int64)
    assert np.array_equal(integer_product(a, b, 255, 255), exact)


def _constant(array: np.ndarray) -> np.ndarray:
    """A copy that cannot change, as a baked weight: the kernels keep what they make of it."""
    array = array.copy()
    array.flags.writeable = False
    return array


@pytest.mark.parametrize("rows", [1, 8, BLOCKED_ROWS, BLOCKED_ROWS + 1])
@pytest.mark.parametrize("k", [64, 700])
def test_weight_product_reads_blocks_for_few_rows(monkeypatch, rows, k):
    """A constant weight of 45 columns (one padded block of 32) with per-column zero points,
    at the widest differences: exact whether read in blocks (up to BLOCKED_ROWS rows) or
    whole, and K = 700 past the 258-term chunk of A = B = 255 sums in chunks either way."""
    rng = np.random.default_rng(rows * k)
    b = _constant(np.where(rng.random((k, 45)) < 0.5, 0, 255).astype(np.uint8))
    zero = _constant(np.where(rng.random(45) < 0.5, 0, 255).astype(np.uint8))
    a = np.where(rng.random((1, rows, k)) < 0.5, -255.0, 255.0).astype(np.float32)
    shapes = []
    matmul = np.matmul
    monkeypatch.setattr(np, "matmul", lambda x, y: shapes.append(y.ndim) or matmul(x, y))
    got = weight_product(a, 255, b, zero, zero.shape)
    exact = a.astype(np.int64) @ (b.astype(np.int64) - zero.astype(np.int64))
    assert got.dtype == np.int32 and np.array_equal(got, exact.astype(np.int32))
    assert set(shapes) == {3 if rows <= BLOCKED_ROWS else 2}
    assert len(shapes) == (1 if k == 64 else 3)


def test_a_node_looks_its_kept_weight_up_once(monkeypatch):
    """The second run of a compiled MatMulInteger finds its weight's blocks by identity,
    without `kept` (whose key costs ~5 us a call), and gives the same exact product."""
    from rlx.kernels import integer

    rng = np.random.default_rng(5)
    b = rng.integers(-128, 128, (64, 40)).astype(np.int8)
    g = Graph("mmi")
    ids = [g.input("a", Shape((3, 64), DType.U8)), g.constant(b),
           g.constant(np.uint8(7)), g.constant(np.int8(-3))]
    g.set_outputs([g.add_node(MatMulInteger(), ids)])
    compiled = Session().compile(g)
    calls = []
    kept = integer.kept
    monkeypatch.setattr(integer, "kept", lambda *args: calls.append(args[1]) or kept(*args))
    a = rng.integers(0, 256, (3, 64)).astype(np.uint8)
    exact = (a.astype(np.int64) - 7) @ (b.astype(np.int64) + 3)
    first = compiled.run({"a": a})[0]
    made = len(calls)
    second = compiled.run({"a": a})[0]
    assert made == 2 and len(calls) == made  # the blocks and the bound, in the first run
    assert np.array_equal(first, exact) and np.array_equal(second, exact)


def _ort_matmul_integer(a, b, a_zero, b_zero) -> np.ndarray:
    node = helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])
    graph = helper.make_graph(
        [node], "mmi", [helper.make_tensor_value_info("a", TensorProto.UINT8, a.shape)],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [numpy_helper.from_array(b, "b"), numpy_helper.from_array(a_zero, "za"),
         numpy_helper.from_array(b_zero, "zb")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"a": a})[0]


def _rlx_matmul_integer(a, b, a_zero, b_zero) -> np.ndarray:
    g = Graph("mmi")
    ids = [g.input("a", Shape(a.shape, DType.U8))] + [g.constant(v) for v in (b, a_zero, b_zero)]
    g.set_outputs([g.add_node(MatMulInteger(), ids)])
    return Session().compile(g).run({"a": a})[0]


@pytest.mark.parametrize("k", [258, 259, 1031])
@pytest.mark.parametrize("b_zero", [np.uint8(0), np.uint8(255), np.arange(7, dtype=np.uint8)])
def test_matmul_integer_matches_onnxruntime_at_the_widest_differences(k, b_zero):
    """uint8 x uint8 (onnxruntime's kernel for it never saturates): a and b at 0 and 255
    against zero points at 0 and 255, so |a - za| and |b - zb| reach 255."""
    rng = np.random.default_rng(k)
    a = (rng.random((4, k)) < 0.5).astype(np.uint8) * np.uint8(255)
    b = (rng.random((k, 7)) < 0.5).astype(np.uint8) * np.uint8(255)
    want = _ort_matmul_integer(a, b, np.uint8(255), b_zero)
    assert np.array_equal(_rlx_matmul_integer(a, b, np.uint8(255), b_zero), want)


def _reference(node, feeds: dict, inits: dict):
    inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape)
              for k, v in feeds.items()]
    graph = helper.make_graph([node], "q", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return ReferenceEvaluator(model).run(None, feeds)[0]


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_blocked_quantize_and_dequantize_match_the_reference(dtype):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((3, 10)) * 4).astype(np.float32)
    scale = rng.uniform(0.01, 0.1, (3, 3)).astype(np.float32)  # blocks of 4 along axis 1
    zero = rng.integers(0, 20, (3, 3)).astype(dtype)
    q_node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1, block_size=4)
    want_q = _reference(q_node, {"x": x}, {"s": scale, "z": zero})
    g = Graph("blocked")
    ids = [g.input("x", Shape(x.shape, DType.F32)), g.constant(scale), g.constant(zero)]
    q = g.add_node(QuantizeLinear(1, 4), ids)
    g.set_outputs([q, g.add_node(DequantizeLinear(1, 4), [q, ids[1], ids[2]])])
    got_q, got_d = Session().compile(g).run({"x": x})
    assert np.array_equal(got_q, want_q)
    d_node = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1, block_size=4)
    graph = helper.make_graph(
        [d_node], "d", [helper.make_tensor_value_info("q", helper.np_dtype_to_tensor_dtype(
            np.dtype(dtype)), want_q.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zero, "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    assert np.array_equal(got_d, ReferenceEvaluator(model).run(None, {"q": want_q})[0])


@pytest.mark.parametrize("scale", [0.0, 1.0, -1.0, 1e-3, 37.0])
def test_dynamic_quantize_linear_matches_onnxruntime(scale):
    """All-zero, all-positive, all-negative and mixed inputs."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((5, 64)) * 4 * scale).astype(np.float32)
    if scale == 1.0:
        x = np.abs(x)
    elif scale == -1.0:
        x = -np.abs(x)
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    graph = helper.make_graph(
        [node], "dql", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info(n, t, None) for n, t in
         (("y", TensorProto.UINT8), ("s", TensorProto.FLOAT), ("z", TensorProto.UINT8))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})
    from rlx.onnx import import_onnx

    graph_ir, _ = import_onnx(model)
    got = Session().compile(graph_ir).run({"x": x})
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and np.array_equal(g, w)


def test_dequantize_linear_of_a_constant_scalar_is_kept_as_an_array():
    """A constant's dequantised value is kept between runs (read-only), rank 0 too."""
    g = Graph("scalar")
    ids = [g.constant(np.array(v)) for v in (np.int8(-7), np.float32(0.5), np.int8(3))]
    g.set_outputs([g.add_node(DequantizeLinear(), ids)])
    compiled = Session().compile(g)
    for _ in range(2):
        assert compiled.run({})[0] == np.float32(-5.0)
