"""MatMul and Einsum kernels against float64 numpy and ONNX's reference evaluator."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from rlx.errors import ShapeError
from rlx.ir.ops.linalg import Einsum, MatMul
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
