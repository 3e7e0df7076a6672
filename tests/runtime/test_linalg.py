"""MatMul and Einsum kernels against float64 numpy and ONNX's reference evaluator."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from rlx.errors import ShapeError
from rlx.ir.ops.einsum import Einsum
from rlx.ir.ops.linalg import MatMul
from rlx.kernels.linalg import stride_k
from rlx.onnx import import_onnx
from rlx.passes import specialize
from rlx.runtime import Session
from tests.support import build_op_graph, onnx_reference, run_op

RNG = np.random.default_rng(7)


def _rand(shape, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("a_shape, b_shape", [
    ((4,), (4,)),                 # 1-D x 1-D: a scalar
    ((4,), (4, 3)),               # 1-D x 2-D: row vector, squeezed
    ((3, 4), (4,)),               # 2-D x 1-D: column vector, squeezed
    ((3, 4), (4, 5)),
    ((2, 1, 3, 4), (5, 4, 6)),    # batch dims broadcast to [2, 5]
    ((7, 4), (2, 4, 3)),          # a 2-D operand broadcast over b's batch
    ((2, 3, 4), (4,)),
    ((4,), (2, 4, 3)),
    ((3, 0), (0, 5)),             # zero-size K: zeros
    ((0, 4), (4, 5)),             # zero-size M
    ((2, 3, 4), (4, 0)),          # zero-size N
    ((0, 3, 4), (4, 2)),          # zero-size batch
])
def test_matmul_matches_references(a_shape, b_shape):
    a, b = _rand(a_shape), _rand(b_shape)
    (got,) = run_op(MatMul(), [a, b])
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    (onnx,) = onnx_reference("MatMul", [a, b])
    np.testing.assert_allclose(got, onnx, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("a_shape, b_shape", [
    ((300,), (300,)),
    ((300,), (300, 5)),
    ((3, 300), (300,)),
    ((2, 3, 300), (300, 7)),      # one GEMM over all of a's rows
    ((2, 3, 300), (2, 300, 7)),
    ((7, 300), (2, 300, 3)),
    ((3, 257), (257, 40)),        # narrow B: blocks of 256
    ((3, 128), (128, 9)),         # one block
    ((3, 0), (0, 5)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_matmul_in_mlas_blocks_is_still_the_product(a_shape, b_shape, dtype):
    a, b = _rand(a_shape, dtype), _rand(b_shape, dtype)
    (got,) = run_op(MatMul(mlas_blocks=True), [a, b])
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-3 if dtype == np.float16 else 1e-5,
                               atol=2e-2 if dtype == np.float16 else 1e-4)


def test_mlas_blocks_stride_follows_the_width_of_b():
    assert [stride_k(n) for n in (1000, 128, 64, 63, 40, 32, 17, 16, 1)] == \
        [128, 128, 256, 256, 256, 512, 512, 1024, 1024]


@pytest.mark.parametrize("k, n", [(384, 384), (1536, 384), (384, 64), (1000, 40)])
def test_a_dequantized_product_rounds_like_onnxruntimes(k, n):
    """A MatMul reading a DequantizeLinear imports with `mlas_blocks` and then rounds like
    onnxruntime (each node as written): most elements equal bit for bit, where one BLAS
    product over K leaves ~10% equal (in-block order still differs for some)."""
    rng = np.random.default_rng(k + n)
    codes = rng.integers(-127, 128, (k, n)).astype(np.int8)
    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["w", "s"], ["wf"]),
         helper.make_node("MatMul", ["x", "wf"], ["y"])], "dq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, n])],
        initializer=[numpy_helper.from_array(codes, "w"),
                     numpy_helper.from_array(np.float32(0.0123), "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    x = rng.standard_normal((64, k)).astype(np.float32)
    want = session.run(None, {"x": x})[0]

    imported, bindings = import_onnx(model)
    (product,) = [node for node in imported.nodes() if isinstance(node.op, MatMul)]
    assert product.op.mlas_blocks
    got = Session().compile(specialize(imported, bindings)[0]).run({"x": x})[0]
    w = codes.astype(np.float32) * np.float32(0.0123)
    assert (got == want).mean() > 0.5 > 0.3 > (np.matmul(x, w) == want).mean()


def test_a_float_product_imports_without_mlas_blocks():
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "f",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 300])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        initializer=[numpy_helper.from_array(_rand((300, 3)), "w")])
    imported, _ = import_onnx(helper.make_model(graph))
    (product,) = [node for node in imported.nodes() if isinstance(node.op, MatMul)]
    assert not product.op.mlas_blocks


@pytest.mark.parametrize("dtype, rtol", [
    (np.float64, 1e-12), (np.float16, 2e-3), (ml_dtypes.bfloat16, 1e-2),
])
def test_matmul_dtypes(dtype, rtol):
    a, b = _rand((2, 3, 64), dtype), _rand((64, 5), dtype)
    (got,) = run_op(MatMul(), [a, b])
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=rtol * 8)


def test_matmul_half_accumulates_wide():
    a = np.ones((1, 4096), np.float16)  # f16 running sums would stall at 2048
    (got,) = run_op(MatMul(), [a, a.T.copy()])
    assert got.item() == 4096


def test_matmul_integers():
    a = RNG.integers(-50, 50, (3, 4)).astype(np.int32)
    b = RNG.integers(-50, 50, (4, 2)).astype(np.int32)
    (got,) = run_op(MatMul(), [a, b])
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))


@pytest.mark.parametrize("a_shape, b_shape, match", [
    ((3, 4), (5, 6), "inner dims differ"),
    ((4,), (5,), "inner dims differ"),
    ((2, 3, 4), (3, 4, 5), "cannot broadcast"),
    ((), (3,), "rank >= 1"),
])
def test_matmul_errors(a_shape, b_shape, match):
    with pytest.raises(ShapeError, match=match):
        build_op_graph(MatMul(), [_rand(a_shape), _rand(b_shape)])


def test_matmul_dtype_mismatch():
    with pytest.raises(ShapeError, match="share a dtype"):
        build_op_graph(MatMul(), [_rand((2, 3)), _rand((3, 2), np.float64)])


@pytest.mark.parametrize("equation, shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),                        # implicit output: "ik"
    ("ba", [(3, 4)]),                                   # implicit output sorts: a transpose
    ("ij->ji", [(3, 4)]),
    ("ii->", [(4, 4)]),                                 # trace
    ("ii", [(4, 4)]),                                   # implicit trace
    ("ii->i", [(4, 4)]),                                # diagonal
    ("i,i->", [(5,), (5,)]),                            # dot
    ("i,j->ij", [(3,), (4,)]),                          # outer
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),           # batch matmul
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 8), (2, 3, 5, 8)]),  # attention scores
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 6)]),  # ellipsis with broadcasting
    ("...ij,jk", [(2, 3, 4), (4, 5)]),                  # implicit output with ellipsis
    ("b...,b->...", [(3, 2, 4), (3,)]),
    ("...ii->...i", [(2, 3, 3)]),                       # batched diagonal
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),         # three operands
    ("i j , j k -> i k", [(2, 3), (3, 4)]),             # spaces are ignored
    ("ij,jk->ik", [(3, 0), (0, 5)]),                    # zero-size contraction
])
def test_einsum_matches_onnx(equation, shapes):
    operands = [_rand(s) for s in shapes]
    (got,) = run_op(Einsum(equation), operands)
    (want,) = onnx_reference("Einsum", operands, equation=equation)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    want64 = np.einsum(equation.replace(" ", ""), *[x.astype(np.float64) for x in operands])
    np.testing.assert_allclose(got, want64, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype, rtol", [(np.float16, 2e-3), (ml_dtypes.bfloat16, 1e-2)])
def test_einsum_half_precision(dtype, rtol):
    a, b = _rand((2, 3, 32), dtype), _rand((2, 32, 4), dtype)
    (got,) = run_op(Einsum("bij,bjk->bik"), [a, b])
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=rtol * 8)


@pytest.mark.parametrize("equation, shapes, match", [
    ("ij,jk->ik", [(3, 4), (5, 6)], "dim j is 4 and 5"),
    ("ij,jk->ik", [(3, 4)], "2 operands, got 1 inputs"),
    ("ijk->i", [(3, 4)], "does not fit"),
    ("...ijk->i", [(3, 4)], "does not fit"),
    ("ij->ik", [(3, 4)], "output label k"),
    ("ij->ii", [(3, 3)], "repeated"),
    ("...i,...i->...", [(2, 3), (4, 3)], "cannot broadcast"),
    ("i1->i", [(3, 4)], "bad"),
])
def test_einsum_errors(equation, shapes, match):
    with pytest.raises(ShapeError, match=match):
        build_op_graph(Einsum(equation), [_rand(s) for s in shapes])
