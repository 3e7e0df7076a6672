"""The compile-time fast paths of the runtime: cached Conv plans and weight layouts, staged
kernels (built once per node, still usable one-shot for constant folding), and the hot
loop's behaviour across repeated and concurrent runs. References are ONNX's evaluator or
float64 numpy, independent of the kernels."""

from __future__ import annotations

import itertools
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from rlx.errors import KernelError
from rlx.ir import DType, Graph, Shape
from rlx.ir.ops.elementwise import Activation, Binary, BinaryOp, Clamp, Unary
from rlx.ir.ops.linalg import MatMul
from rlx.ir.ops.shaping import Transpose
from rlx.ir.ops.windows import Conv, GlobalPool, PoolKind
from rlx.kernels import BUILDERS, KERNELS
from rlx.runtime import Session
from tests.support import onnx_reference, run_op

RTOL, ATOL = 1e-5, 1e-5


_RNG = np.random.default_rng(0)
DW = _RNG.standard_normal((4, 1, 3, 3)).astype(np.float32)
PW = _RNG.standard_normal((6, 4, 1, 1)).astype(np.float32)
BIAS = _RNG.standard_normal(6).astype(np.float32)


def _conv_graph(weight_is_input: bool) -> Graph:
    """x [batch, 4, h, 7] -> depthwise 3x3 pad 1 -> 1x1 with bias; batch and h symbolic."""
    g = Graph("convs")
    x = g.input("x", Shape(("batch", 4, "h", 7), DType.F32))
    dw = g.input("dw", Shape(DW.shape, DType.F32)) if weight_is_input else g.constant(DW)
    y = g.add_node(Conv(pads=(1, 1, 1, 1), groups=4), [x, dw])
    g.set_outputs([g.add_node(Conv(), [y, g.constant(PW), g.constant(BIAS)])])
    return g


def _conv_reference(x: np.ndarray, dw: np.ndarray) -> np.ndarray:
    (y,) = onnx_reference("Conv", [x, dw], pads=[1, 1, 1, 1], group=4)
    return onnx_reference("Conv", [y, PW, BIAS])[0]


def test_conv_plans_follow_the_input_shape():
    compiled = Session().compile(_conv_graph(weight_is_input=False))
    rng = np.random.default_rng(1)
    for shape in [(1, 4, 5, 7), (3, 4, 2, 7), (1, 4, 5, 7), (0, 4, 3, 7)]:
        x = rng.standard_normal(shape).astype(np.float32)
        (got,) = compiled.run({"x": x})
        np.testing.assert_allclose(got, _conv_reference(x, DW), rtol=RTOL, atol=ATOL)


def test_conv_weights_fed_at_run_time_are_reread_each_run():
    compiled = Session().compile(_conv_graph(weight_is_input=True))
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 4, 4, 7)).astype(np.float32)
    for weights in (DW, DW * 2, DW):  # a new array, then the first one again
        (got,) = compiled.run({"x": x, "dw": weights})
        np.testing.assert_allclose(got, _conv_reference(x, weights), rtol=RTOL, atol=ATOL)


def test_conv_does_not_modify_a_read_only_input_and_takes_strided_views():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 6, 10)).astype(np.float32)[..., ::2]  # not contiguous
    w = rng.standard_normal((5, 3, 1, 1)).astype(np.float32)
    before = x.copy()
    x.setflags(write=False)
    (got,) = run_op(Conv(), [x, w], constant=[False, True])
    np.testing.assert_array_equal(x, before)
    np.testing.assert_allclose(got, onnx_reference("Conv", [before, w])[0], rtol=RTOL,
                               atol=ATOL)


def test_wide_depthwise_conv_runs_channels_last_in_half_precision():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 64, 6, 7)).astype(np.float16)
    w = rng.standard_normal((64, 1, 3, 3)).astype(np.float16)
    (got,) = run_op(Conv(pads=(1, 1, 1, 1), groups=64), [x, w], constant=[False, True])
    (want,) = onnx_reference("Conv", [x.astype(np.float64), w.astype(np.float64)],
                             pads=[1, 1, 1, 1], group=64)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3, atol=2e-3)


def test_a_wide_depthwise_conv_switches_path_with_the_input_size():
    """64 channels: channels-last at few positions per channel, im2col at many; one
    compiled Conv keeps each path's weight layout apart as the input size changes."""
    g = Graph("dw")
    x = g.input("x", Shape((1, 64, "h", "w"), DType.F32))
    w = np.random.default_rng(5).standard_normal((64, 1, 3, 3)).astype(np.float32)
    g.set_outputs([g.add_node(Conv(pads=(1, 1, 1, 1), groups=64), [x, g.constant(w)])])
    compiled = Session().compile(g)
    rng = np.random.default_rng(6)
    for size in [(4, 5), (30, 30), (4, 5), (30, 30)]:  # 20 / 900 positions per channel
        x = rng.standard_normal((1, 64, *size)).astype(np.float32)
        (got,) = compiled.run({"x": x})
        (want,) = onnx_reference("Conv", [x, w], pads=[1, 1, 1, 1], group=64)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_kernel_rows_that_read_only_padding_are_not_multiplied():
    """Over 2 rows padded by 2, a 5x5 kernel meets the input with 2 of its 5 rows at each
    output row: the im2col matrices hold 40% of the full one, and the result is the same."""
    from rlx.kernels.windows import _conv_plan

    op = Conv(pads=(2, 2, 2, 2), groups=200)
    plan = _conv_plan(op, (1, 200, 2, 96), (200, 1, 5, 5), 4)
    assert plan.taps == ((2, 4), (1, 3))
    held = sum(math.prod(piece.cols) for piece in plan.pieces)
    assert held == 0.4 * 200 * 25 * 2 * 96
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 200, 2, 96)).astype(np.float32)
    w = rng.standard_normal((200, 1, 5, 5)).astype(np.float32)
    (got,) = run_op(op, [x, w], constant=[False, True])
    (want,) = onnx_reference("Conv", [x, w], pads=[2, 2, 2, 2], group=200)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_a_large_im2col_matrix_is_made_a_few_rows_at_a_time():
    """One group's im2col matrix over 200 rows of 40 positions would take 2.3 MB: it is made
    in pieces of up to 1 MiB of rows, and the result is the same."""
    from rlx.kernels.windows import _PIECE_BYTES, _conv_plan

    op = Conv(pads=(1, 1, 1, 1))
    plan = _conv_plan(op, (1, 8, 200, 40), (4, 8, 3, 3), 4)
    assert len(plan.pieces) == 3
    assert all(math.prod(piece.cols) * 4 <= _PIECE_BYTES for piece in plan.pieces)
    assert [piece.positions for piece in plan.pieces] == [
        slice(0, 91 * 40), slice(91 * 40, 182 * 40), slice(182 * 40, 200 * 40)]
    # a 1x1, stride-1, unpadded conv multiplies its input as it is (3.3 MB): one product
    assert len(_conv_plan(Conv(), (1, 64, 200, 40), (4, 64, 1, 1), 4).pieces) == 1
    rng = np.random.default_rng(10)
    x = rng.standard_normal((1, 8, 200, 40)).astype(np.float32)
    w = rng.standard_normal((4, 8, 3, 3)).astype(np.float32)
    (got,) = run_op(op, [x, w], constant=[False, True])
    (want,) = onnx_reference("Conv", [x, w], pads=[1, 1, 1, 1])
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_row_runs_agree_with_every_output_row_checked_one_by_one():
    """kernels.windows._row_runs looks only at the border rows; the definition checks each tap
    of each row against the input."""
    from rlx.ir.ops.windows import Window
    from rlx.kernels.windows import _row_runs

    for k, s, d, b, e, size in itertools.product(range(1, 6), range(1, 4), range(1, 4),
                                                 range(5), range(5), range(1, 12)):
        out = (size + b + e - (k - 1) * d - 1) // s + 1
        if out < 1:
            continue
        want: list = []
        for o in range(out):
            taps = [a for a in range(k) if 0 <= o * s + a * d - b < size]
            key = (taps[0], taps[-1] + 1) if taps else (0, 0)
            if want and want[-1][0] == key:
                want[-1] = (key, (want[-1][1][0], o + 1))
            else:
                want.append((key, (o, o + 1)))
        assert _row_runs(Window((k,), (s,), (d,), (b,), (e,)), size, out) == want


def test_conv_in_half_precision_rounds_once():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float16)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float16)
    b = rng.standard_normal(3).astype(np.float16)
    (got,) = run_op(Conv(pads=(1, 1, 1, 1)), [x, w, b], constant=[False, True, True])
    (want,) = onnx_reference("Conv", [x.astype(np.float32), w.astype(np.float32),
                                      b.astype(np.float32)], pads=[1, 1, 1, 1])
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, want.astype(np.float16), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("kind", [PoolKind.AVG, PoolKind.MAX])
@pytest.mark.parametrize("shape, dtype", [((2, 3, 4, 5), np.float32),
                                          ((1, 2, 3), np.float64),
                                          ((0, 2, 3, 3), np.float32),
                                          ((2, 2, 3, 2, 2), np.float16)])
def test_global_pool(kind, shape, dtype):
    x = np.random.default_rng(5).standard_normal(shape).astype(dtype)
    (got,) = run_op(GlobalPool(kind), [x])
    axes = tuple(range(2, x.ndim))
    wide = x.astype(np.float64)
    want = wide.max(axis=axes, keepdims=True) if kind is PoolKind.MAX and x.size else \
        wide.mean(axis=axes, keepdims=True) if x.size else np.zeros(got.shape)
    tol = 1e-3 if dtype == np.float16 else 1e-6
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_global_pool_step_follows_the_input_shape():
    """One built step binds its geometry per input shape: a dynamic size alternating
    between runs gets each shape's own average and max, as float64 gives them."""
    for kind in (PoolKind.AVG, PoolKind.MAX):
        g = Graph("pool")
        x = g.input("x", Shape((1, 8, "h", "w"), DType.F32))
        g.set_outputs([g.add_node(GlobalPool(kind), [x])])
        compiled = Session().compile(g)
        rng = np.random.default_rng(12)
        for shape in [(1, 8, 5, 5), (1, 8, 3, 7), (1, 8, 5, 5), (1, 8, 1, 1)]:
            xv = rng.standard_normal(shape).astype(np.float32)
            wide = xv.astype(np.float64)
            want = wide.max(axis=(2, 3), keepdims=True) if kind is PoolKind.MAX else \
                wide.mean(axis=(2, 3), keepdims=True)
            (got,) = compiled.run({"x": xv})
            assert got.shape == (1, 8, 1, 1)
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("lo, hi", [(-0.5, 0.5), (None, 0.25), (-0.25, None), (None, None)])
@pytest.mark.parametrize("shape", [(3, 4), ()])
def test_clamp_float(lo, hi, shape):
    x = np.asarray(np.random.default_rng(6).standard_normal(shape), dtype=np.float32)
    (got,) = run_op(Clamp(lo, hi), [x])
    want = np.clip(x.astype(np.float64), -np.inf if lo is None else lo,
                   np.inf if hi is None else hi)
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_clamp_integer_rounds_bounds_inward_and_keeps_nan():
    (got,) = run_op(Clamp(-1.5, 2.5), [np.arange(-4, 5, dtype=np.int8)])
    np.testing.assert_array_equal(got, np.clip(np.arange(-4, 5), -1, 2))
    (got,) = run_op(Clamp(0.0, 1.0), [np.array([np.nan, 2.0], np.float32)])
    assert np.isnan(got[0]) and got[1] == 1.0


@pytest.mark.parametrize("op_type", [Conv, GlobalPool, Binary, Unary, Clamp, Transpose, MatMul])
def test_staged_kernels_are_also_one_shot_kernels(op_type):
    """Constant folding and shape resolution call KERNELS directly."""
    assert op_type in BUILDERS and op_type in KERNELS


def test_staged_kernel_runs_one_shot():
    g = Graph("one")
    a = g.input("a", Shape((2, 3), DType.I64))
    b = g.input("b", Shape((3,), DType.I64))
    y = g.add_node(Binary(BinaryOp.DIV), [a, b])
    node = g.node(y)
    got = KERNELS[Binary](node, np.array([[7, -7, 9], [1, 2, 3]]), np.array([2, 2, -4]))
    np.testing.assert_array_equal(got, [[3, -3, -2], [0, 1, 0]])  # toward zero


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_matmul_of_two_vectors_is_a_rank0_array(dtype):
    """numpy gives a scalar for vector @ vector; the step gives an array of the output's
    dtype, summed in float32 for float16 (float64 numpy as the reference)."""
    a, b = (np.linspace(-1, 1, 7).astype(dtype), np.linspace(0, 2, 7).astype(dtype))
    (got,) = run_op(MatMul(), [a, b])
    assert isinstance(got, np.ndarray) and got.shape == () and got.dtype == dtype
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(float(got), want, rtol=1e-3 if dtype is np.float16 else 1e-6)


def test_unary_rank0_and_transpose_negative_perm():
    (got,) = run_op(Unary(Activation.RELU), [np.array(-2.0, np.float32)])
    assert isinstance(got, np.ndarray) and got.shape == () and got == 0
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    (got,) = run_op(Transpose((-1, 0, 1)), [x])
    np.testing.assert_array_equal(got, np.transpose(x, (2, 0, 1)))


def test_concurrent_runs_agree():
    compiled = Session().compile(_conv_graph(weight_is_input=False))
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal((1 + i % 3, 4, 3 + i % 4, 7)).astype(np.float32)
          for i in range(16)]
    want = [compiled.run({"x": x})[0] for x in xs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda x: compiled.run({"x": x})[0], xs))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_kernel_errors_name_the_node():
    g = Graph("bad")
    x = g.input("x", Shape(("n",), DType.F32))
    y = g.input("y", Shape(("m",), DType.F32))
    g.set_outputs([g.add_node(Binary(BinaryOp.MUL), [x, y], name="boom")])
    with pytest.raises(KernelError, match=r"'boom' \(Binary\)"):
        Session().compile(g).run({"x": np.ones(2, np.float32), "y": np.ones(3, np.float32)})


@pytest.mark.parametrize("xs, ws, groups", [
    ((2, 48, 20, 20), (48, 1, 5, 5), 48),  # depthwise: im2col in blocks of groups
    ((1, 48, 24, 24), (96, 2, 3, 3), 24),  # grouped, two filters per group, last block short
])
def test_large_grouped_conv_in_blocks(xs, ws, groups):
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    pads = [ws[2] // 2] * 4
    (got,) = run_op(Conv(pads=tuple(pads), groups=groups), [x, w, b], constant=[False, True, True])
    (want,) = onnx_reference("Conv", [x, w, b], pads=pads, group=groups)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows, width, strides, block", [
    (25, 5, (1, 1), 3), (12, 8, (1, 1), 2), (40, 3, (1, 1), 5), (14, 14, (1, 1), 1),
    (49, 10, (2, 1), 1), (12, 5, (1, 2), 5)])
def test_banded_depthwise_makes_blocks_of_rows_up_to_16_columns(rows, width, strides, block):
    """A band makes 16 // W_out output rows at once at a row stride of 1, one past it; the
    same result as onnx.reference either way."""
    from rlx.kernels.windows import _BandedPlan, _chosen_plan

    op = Conv(pads=(1, 1, 1, 1), strides=strides, groups=64)
    x_shape, w_shape = (1, 64, rows, width), (64, 1, 3, 3)
    plan, _ = _chosen_plan(op, x_shape, w_shape, 4)
    assert isinstance(plan, _BandedPlan) and plan.rows[0] == block
    rng = np.random.default_rng(rows)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    (got,) = run_op(op, [x, w], constant=[False, True])
    (want,) = onnx_reference("Conv", [x, w], pads=[1, 1, 1, 1], strides=list(strides),
                             group=64)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("channels, rows, width, kernel, banded", [
    (8, 6, 5, 3, True), (8, 6, 24, 3, True), (8, 6, 25, 3, False), (8, 6, 40, 5, True),
    (8, 6, 41, 5, False), (64, 25, 5, 3, True), (96, 4, 4, 3, False)])
def test_depthwise_conv_over_narrow_rows_runs_as_banded_gemms(channels, rows, width, kernel,
                                                               banded):
    """Banded GEMMs while the rows are at most 8 kernel widths wide (they multiply W / kw
    times the products), im2col past that; with 64 channels or more, channels-last below
    32 positions per channel. The same result either way."""
    from rlx.kernels.windows import _BandedPlan, _chosen_plan

    op = Conv(pads=(1, 2, 1, 2), groups=channels)
    x_shape, w_shape = (2, channels, rows, width), (channels, 1, 3, kernel)
    plan, _ = _chosen_plan(op, x_shape, w_shape, 4)
    assert isinstance(plan, _BandedPlan) == banded
    rng = np.random.default_rng(width)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    (got,) = run_op(op, [x, w], constant=[False, True])
    (want,) = onnx_reference("Conv", [x, w], pads=[1, 2, 1, 2], group=channels)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def _log_graph() -> Graph:
    g = Graph("log")
    x = g.input("x", Shape((3,), DType.F32))
    g.set_outputs([g.add_node(Unary(Activation.LOG), [x])])
    return g


def test_runs_compute_ieee_results_and_leave_the_callers_error_state():
    """Inside a run inf and NaN are results (float64 numpy's, with warnings off); the
    caller's own setting, here to raise, holds again afterwards, on every thread."""
    compiled = Session().compile(_log_graph())
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    with np.errstate(all="ignore"):
        want = np.log(x.astype(np.float64))

    def run_raising() -> str:
        with np.errstate(all="raise"):
            (got,) = compiled.run({"x": x})
            np.testing.assert_allclose(got, want, rtol=1e-6)
            return np.geterr()["invalid"]

    with ThreadPoolExecutor(4) as pool:
        assert set(pool.map(lambda _: run_raising(), range(40))) == {"raise"}
    assert run_raising() == "raise"
