"""Reduce, ArgMax/ArgMin, CumSum and TopK kernels against ONNX's reference and float64 numpy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from rlx.errors import ShapeError
from rlx.ir import graph_from_json, graph_to_json
from rlx.ir.ops.reduce import ArgMax, ArgMin, CumSum, Reduce, ReduceOp, TopK
from tests.support import build_op_graph, onnx_reference, run_op

RNG = np.random.default_rng(20240611)

_ONNX_NAME = {
    ReduceOp.SUM: "ReduceSum",
    ReduceOp.MEAN: "ReduceMean",
    ReduceOp.MAX: "ReduceMax",
    ReduceOp.MIN: "ReduceMin",
    ReduceOp.PROD: "ReduceProd",
    ReduceOp.L1: "ReduceL1",
    ReduceOp.L2: "ReduceL2",
    ReduceOp.LOG_SUM: "ReduceLogSum",
    ReduceOp.LOG_SUM_EXP: "ReduceLogSumExp",
    ReduceOp.SUM_SQUARE: "ReduceSumSquare",
}

# The same reductions written independently in float64 numpy.
_F64 = {
    ReduceOp.SUM: lambda x, a, k: np.sum(x, axis=a, keepdims=k),
    ReduceOp.MEAN: lambda x, a, k: np.mean(x, axis=a, keepdims=k),
    ReduceOp.MAX: lambda x, a, k: np.max(x, axis=a, keepdims=k),
    ReduceOp.MIN: lambda x, a, k: np.min(x, axis=a, keepdims=k),
    ReduceOp.PROD: lambda x, a, k: np.prod(x, axis=a, keepdims=k),
    ReduceOp.L1: lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k),
    ReduceOp.L2: lambda x, a, k: np.sqrt(np.sum(x * x, axis=a, keepdims=k)),
    ReduceOp.LOG_SUM: lambda x, a, k: np.log(np.sum(x, axis=a, keepdims=k)),
    ReduceOp.LOG_SUM_EXP: lambda x, a, k: np.logaddexp.reduce(x, axis=a, keepdims=k),
    ReduceOp.SUM_SQUARE: lambda x, a, k: np.sum(x * x, axis=a, keepdims=k),
}

INT_OPS = [ReduceOp.SUM, ReduceOp.MEAN, ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PROD, ReduceOp.L1,
           ReduceOp.SUM_SQUARE]


def _data(op: ReduceOp, shape, dtype=np.float32) -> np.ndarray:
    x = RNG.standard_normal(shape)
    if op is ReduceOp.LOG_SUM:
        x = np.abs(x) + 0.1  # log of a positive sum
    return x.astype(dtype)


def _onnx_reduce(op: ReduceOp, x, axes, keepdims: bool, **attrs) -> np.ndarray:
    # opset 18+: axes is an optional input; omitted = every axis
    axes_in = None if axes is None else np.array(axes, np.int64)
    return onnx_reference(_ONNX_NAME[op], [x, axes_in], keepdims=int(keepdims), **attrs)[0]


# -- Reduce ----------------------------------------------------------------------------------
@pytest.mark.parametrize("keepdims", [True, False])
@pytest.mark.parametrize("axes", [None, (1,), (-1,), (0, 2), (-3, -1), (2, 0, 1)])
@pytest.mark.parametrize("op", list(ReduceOp))
def test_reduce_matches_onnx(op, axes, keepdims):
    x = _data(op, (2, 3, 4))
    (got,) = run_op(Reduce(op, axes, keepdims), [x])
    np.testing.assert_allclose(got, _onnx_reduce(op, x, axes, keepdims), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("op", list(ReduceOp))
def test_empty_axes_reduce_nothing(op):
    """`axes=()` is ONNX's noop_with_empty_axes=1: each element reduced alone."""
    x = _data(op, (2, 3))
    (got,) = run_op(Reduce(op, ()), [x])
    want = _onnx_reduce(op, x, (), True, noop_with_empty_axes=1)
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("dtype, rtol", [
    (np.float64, 1e-12), (np.float32, 2e-6), (np.float16, 2e-3), (ml_dtypes.bfloat16, 1e-2),
])
@pytest.mark.parametrize("op", list(ReduceOp))
def test_reduce_matches_float64_numpy(op, dtype, rtol):
    x = _data(op, (3, 5, 40), dtype)
    for axes, keepdims in [((0, -1), False), ((1,), True), (None, False)]:
        (got,) = run_op(Reduce(op, axes, keepdims), [x])
        assert got.dtype == x.dtype
        want = _F64[op](x.astype(np.float64), axes, keepdims)
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=rtol)


def test_rank0_reduces_to_itself():
    x = np.array(-2.5, np.float32)
    for op in (ReduceOp.SUM, ReduceOp.L1, ReduceOp.MAX):
        (got,) = run_op(Reduce(op, None, keepdims=False), [x])
        np.testing.assert_allclose(got, _onnx_reduce(op, x, None, False))


def test_log_sum_exp_is_stable():
    x = np.array([[1000.0, 1000.5, -np.inf],
                  [-np.inf, -np.inf, -np.inf],
                  [np.inf, 1.0, -5.0],
                  [-1000.0, -1001.0, -1002.0]], np.float32)
    (got,) = run_op(Reduce(ReduceOp.LOG_SUM_EXP, (1,), keepdims=False), [x])
    want = np.logaddexp.reduce(x.astype(np.float64), axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_half_precision_l2_does_not_overflow():
    x = np.full((8,), 3000.0, np.float16)  # x*x overflows f16, the norm (8485) does not
    (got,) = run_op(Reduce(ReduceOp.L2, None, keepdims=False), [x])
    np.testing.assert_allclose(got, np.sqrt(8) * 3000.0, rtol=1e-3)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the reference's mean of nothing
@pytest.mark.parametrize("axes", [(1,), (-2, 2), (0,), None])
@pytest.mark.parametrize("op", list(ReduceOp))
def test_reduce_zero_size(op, axes):
    x = np.zeros((2, 0, 3), np.float32)
    (got,) = run_op(Reduce(op, axes, keepdims=False), [x])
    np.testing.assert_array_equal(got, _onnx_reduce(op, x, axes, False))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
@pytest.mark.parametrize("op", [ReduceOp.MAX, ReduceOp.MIN, ReduceOp.SUM, ReduceOp.PROD])
def test_integer_reduce_of_nothing(op, dtype):
    x = np.zeros((0, 2), dtype)
    (got,) = run_op(Reduce(op, (0,)), [x])
    np.testing.assert_array_equal(got, _onnx_reduce(op, x, (0,), True))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("op", INT_OPS)
def test_integer_reduce_keeps_dtype(op, dtype):
    x = RNG.integers(-7, 8, (3, 4, 5)).astype(dtype)
    for axes in [(1,), (0, -1), None]:
        (got,) = run_op(Reduce(op, axes, keepdims=False), [x])
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, _onnx_reduce(op, x, axes, False))


def test_integer_mean_truncates_toward_zero():
    x = np.array([[-3, -4], [3, 4], [-7, 0]], np.int32)
    (got,) = run_op(Reduce(ReduceOp.MEAN, (1,), keepdims=False), [x])
    np.testing.assert_array_equal(got, [-3, 3, -3])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("op", [ReduceOp.MAX, ReduceOp.MIN])
def test_small_integer_max_min(op, dtype):
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, (4, 6), endpoint=True).astype(dtype)
    (got,) = run_op(Reduce(op, (-1,)), [x])
    np.testing.assert_array_equal(got, _onnx_reduce(op, x, (-1,), True))


@pytest.mark.parametrize("op", [ReduceOp.MAX, ReduceOp.MIN])
def test_bool_max_min_are_any_all(op):
    x = RNG.random((3, 4)) > 0.6
    (got,) = run_op(Reduce(op, (1,), keepdims=False), [x])
    np.testing.assert_array_equal(got, _onnx_reduce(op, x, (1,), False))


@pytest.mark.parametrize("op, x, match", [
    (Reduce(ReduceOp.SUM, (2,)), np.zeros((2, 3), np.float32), "axis 2 out of range"),
    (Reduce(ReduceOp.SUM, (-3,)), np.zeros((2, 3), np.float32), "axis -3 out of range"),
    (Reduce(ReduceOp.MAX, (1, -1)), np.zeros((2, 3), np.float32), "repeated axis"),
    (Reduce(ReduceOp.L2), np.zeros((2, 3), np.int32), "l2: does not take i32"),
    (Reduce(ReduceOp.LOG_SUM_EXP), np.zeros((2,), np.int64), "does not take i64"),
    (Reduce(ReduceOp.SUM), np.zeros((2,), bool), "sum: does not take bool"),
])
def test_reduce_errors(op, x, match):
    with pytest.raises(ShapeError, match=match):
        build_op_graph(op, [x])


# -- ArgMax / ArgMin -------------------------------------------------------------------------
@pytest.mark.parametrize("select_last_index", [False, True])
@pytest.mark.parametrize("keepdims", [True, False])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("op_type", [ArgMax, ArgMin])
def test_arg_reduce_with_ties(op_type, axis, keepdims, select_last_index):
    x = RNG.integers(0, 3, (3, 4, 5)).astype(np.float32)  # many ties
    (got,) = run_op(op_type(axis, keepdims, select_last_index), [x])
    (want,) = onnx_reference(op_type.__name__, [x], axis=axis, keepdims=int(keepdims),
                             select_last_index=int(select_last_index))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("op_type", [ArgMax, ArgMin])
def test_arg_reduce_dtypes(op_type, dtype):
    x = RNG.integers(0, 50, (6, 7)).astype(dtype)
    (got,) = run_op(op_type(axis=-2, select_last_index=True), [x])
    # float64 numpy: last index of the extreme value along axis 0
    x64 = x.astype(np.float64)
    extreme = (x64.max if op_type is ArgMax else x64.min)(axis=0, keepdims=True)
    want = x.shape[0] - 1 - np.argmax((x64 == extreme)[::-1], axis=0, keepdims=True)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op, x, match", [
    (ArgMax(1), np.zeros((2, 0), np.float32), "axis 1 of f32\\[2, 0\\] is empty"),
    (ArgMin(0), np.zeros((), np.float32), "rank >= 1"),
    (ArgMax(2), np.zeros((2, 3), np.float32), "axis 2 out of range"),
])
def test_arg_reduce_errors(op, x, match):
    with pytest.raises(ShapeError, match=match):
        build_op_graph(op, [x])


@pytest.mark.parametrize("op_type", [ArgMax, ArgMin])
def test_arg_reduce_vector_to_scalar(op_type):
    x = np.array([2.0, 7.0, -1.0, 7.0, -1.0], np.float32)
    (got,) = run_op(op_type(0, keepdims=False), [x])
    np.testing.assert_array_equal(got, onnx_reference(op_type.__name__, [x], keepdims=0)[0])


def test_arg_reduce_over_other_empty_axis():
    x = np.zeros((0, 3), np.float32)
    (got,) = run_op(ArgMax(1, keepdims=False), [x])
    assert got.shape == (0,)


# -- CumSum ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumsum_flags(axis, exclusive, reverse, dtype):
    x = (RNG.standard_normal((3, 4, 5)) * 10).astype(dtype)
    (got,) = run_op(CumSum(axis, exclusive, reverse), [x])
    (want,) = onnx_reference("CumSum", [x, np.array(axis, np.int64)], exclusive=int(exclusive),
                             reverse=int(reverse))
    assert got.dtype == dtype
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


def test_cumsum_exclusive_keeps_infinities_out_of_earlier_sums():
    x = np.array([1.0, np.inf, 2.0, 3.0], np.float32)
    (fwd,) = run_op(CumSum(0, exclusive=True), [x])
    (rev,) = run_op(CumSum(0, exclusive=True, reverse=True), [x])
    np.testing.assert_array_equal(fwd, [0.0, 1.0, np.inf, np.inf])
    np.testing.assert_array_equal(rev, [np.inf, 5.0, 3.0, 0.0])


def test_cumsum_half_precision_accumulates_wide():
    x = np.full((4096,), 1.0, np.float16)  # f16 running sums stall at 2048
    (got,) = run_op(CumSum(0), [x])
    want = np.arange(1, 4097, dtype=np.float64)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-3)


@pytest.mark.parametrize("exclusive", [False, True])
def test_cumsum_zero_size(exclusive):
    x = np.zeros((2, 0), np.float32)
    (got,) = run_op(CumSum(1, exclusive=exclusive, reverse=True), [x])
    assert got.shape == (2, 0)


@pytest.mark.parametrize("op, x, match", [
    (CumSum(0), np.zeros((), np.float32), "rank >= 1"),
    (CumSum(2), np.zeros((2, 3), np.float32), "axis 2 out of range"),
    (CumSum(0), np.zeros((2,), bool), "numeric"),
])
def test_cumsum_errors(op, x, match):
    with pytest.raises(ShapeError, match=match):
        build_op_graph(op, [x])


# -- TopK ------------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [0, 1, 3])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_with_ties(largest, axis, k):
    x = RNG.integers(0, 4, (4, 5, 6)).astype(np.float32)  # many ties
    values, indices = run_op(TopK(k, axis, largest), [x])
    want_values, want_indices = onnx_reference(
        "TopK", [x, np.array([k], np.int64)], n_outputs=2, axis=axis, largest=int(largest))
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)


@pytest.mark.parametrize("dtype", [np.int64, np.uint8, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_dtypes(dtype, largest):
    x = RNG.integers(0, 100, (3, 9)).astype(dtype)
    values, indices = run_op(TopK(4, -1, largest), [x])
    # float64 numpy: stable sort by (value descending or ascending, index ascending)
    x64 = x.astype(np.float64)
    order = np.lexsort((np.broadcast_to(np.arange(9), x.shape), -x64 if largest else x64))
    np.testing.assert_array_equal(indices, order[:, :4])
    np.testing.assert_array_equal(values, np.take_along_axis(x, order[:, :4], -1))


def test_topk_whole_axis_is_a_stable_sort():
    x = np.array([2.0, -1.0, 2.0, np.inf, -np.inf, 0.0], np.float32)
    values, indices = run_op(TopK(6, 0, largest=True), [x])
    np.testing.assert_array_equal(indices, [3, 0, 2, 5, 1, 4])
    np.testing.assert_array_equal(values, x[[3, 0, 2, 5, 1, 4]])


@pytest.mark.parametrize("op, x, match", [
    (TopK(4, 1), np.zeros((2, 3), np.float32), "k must be in \\[0, 3\\]"),
    (TopK(-1), np.zeros((2, 3), np.float32), "k must be in"),
    (TopK(1, 2), np.zeros((2, 3), np.float32), "axis 2 out of range"),
    (TopK(1), np.zeros((), np.float32), "rank >= 1"),
])
def test_topk_errors(op, x, match):
    with pytest.raises(ShapeError, match=match):
        build_op_graph(op, [x])


# -- serialisation of the attributes ---------------------------------------------------------
@pytest.mark.parametrize("op", [
    Reduce(ReduceOp.LOG_SUM_EXP, (0, -1), keepdims=False), Reduce(ReduceOp.L1),
    ArgMin(-1, False, True), CumSum(1, True, False), TopK(2, 0, False, False),
])
def test_ops_round_trip_through_json(op):
    g, _ = build_op_graph(op, [np.zeros((3, 4), np.float32)])
    assert graph_from_json(graph_to_json(g)).nodes()[1].op == op
