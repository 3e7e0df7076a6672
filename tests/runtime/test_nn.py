"""Neural-network kernels against ONNX's reference evaluator (onnxruntime where it is wrong)."""

from __future__ import annotations

import numpy as np
import pytest

from rlx.errors import ShapeError
from rlx.ir import DType, Graph, Shape, graph_from_json, graph_to_json
from rlx.ir.ops.channelwise import BatchNormInference, InstanceNorm, PRelu
from rlx.ir.ops.nn import LayerNorm, LogSoftmax, Softmax
from rlx.ir.ops.resize import CoordinateMode, NearestMode, Resize, ResizeMode
from rlx.ir.ops.windows import Conv, ConvTranspose, GlobalPool, Pool, PoolKind
from rlx.kernels.resize import _nearest_repeats
from rlx.kernels.windows import build_conv, build_pool
from rlx.runtime import Session
from tests.support import build_op_graph, onnx_reference, run_op

RTOL, ATOL = 1e-4, 1e-5

# Where ONNX's reference evaluator (onnx 1.23) is itself wrong, onnxruntime is the oracle; each
# entry was checked by hand, and onnxruntime agrees with rlx and PyTorch on it.
REFERENCE_BUGS = {
    "grouped_conv_transpose": "ConvTranspose with group > 1 slices W by output channel",
    "max_pool_unit_steps": "MaxPool with unit strides and dilations but pads mis-sizes output",
    "ceil_overhang": "a ceil_mode pool whose last window overhangs by >= 2 shifts all windows",
    "global_max_pool_rank": "GlobalMaxPool reduces the wrong axes unless the input is 4-D",
    "empty_batch_conv_transpose": "ConvTranspose with an empty batch returns None",
}


def _onnxruntime(op_type: str, inputs, **attrs) -> np.ndarray:
    import onnxruntime
    from onnx import helper

    names = [f"in{i}" for i in range(len(inputs))]
    elem = helper.np_dtype_to_tensor_dtype(inputs[0].dtype)
    graph = helper.make_graph(
        [helper.make_node(op_type, names, ["out"], **attrs)], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs)],
        [helper.make_tensor_value_info("out", elem, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3  # ONNX shape inference ignores the ceil-mode drop rule
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, dict(zip(names, inputs)))[0]


def _oracle(op_type: str, inputs, bug: str | None = None, **attrs) -> np.ndarray:
    if bug is None:
        return onnx_reference(op_type, inputs, **attrs)[0]
    assert bug in REFERENCE_BUGS
    return _onnxruntime(op_type, inputs, **attrs)


def _rand(rng, *shape, dtype=np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def _check(op, inputs, want, constant=()) -> None:
    (got,) = run_op(op, inputs, constant=constant)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def _listed(attrs: dict) -> dict:
    return {k: list(v) for k, v in attrs.items()}


# -- Conv -----------------------------------------------------------------------------------
CONV_CASES = [
    # x, w, groups, strides, pads, dilations, bias
    ((2, 3, 11), (4, 3, 3), 1, (1,), (0, 0), (1,), True),
    ((1, 4, 13), (6, 2, 4), 2, (3,), (2, 1), (2,), False),
    ((3, 5, 9), (5, 1, 3), 5, (2,), (1, 1), (1,), True),  # depthwise
    ((1, 3, 8, 8), (8, 3, 3, 3), 1, (1, 1), (1, 1, 1, 1), (1, 1), True),
    ((2, 4, 9, 7), (6, 2, 3, 2), 2, (2, 1), (1, 0, 2, 1), (1, 2), True),
    ((2, 6, 10, 11), (12, 1, 3, 3), 6, (2, 3), (0, 1, 2, 0), (2, 1), False),  # depthwise x2
    ((1, 8, 7, 7), (8, 1, 5, 5), 8, (1, 1), (2, 2, 2, 2), (1, 1), True),  # depthwise
    ((2, 3, 5, 6), (4, 3, 1, 1), 1, (1, 1), (0, 0, 0, 0), (1, 1), False),  # 1x1
    ((2, 6, 5, 3), (9, 2, 1, 1), 3, (1, 1), (0, 0, 0, 0), (1, 1), True),  # grouped 1x1
    ((1, 2, 6, 5), (3, 2, 6, 5), 1, (3, 3), (0, 0, 0, 0), (1, 1), True),  # kernel = input
    ((1, 2, 5, 6, 4), (3, 2, 2, 3, 2), 1, (1, 2, 1), (1, 0, 1, 0, 1, 1), (2, 1, 1), True),
    ((0, 3, 5, 5), (2, 3, 3, 3), 1, (1, 1), (1, 1, 1, 1), (1, 1), True),  # empty batch
    # im2col copies of >= 512 rows copy whole rows (kernels.windows._row_type): one GEMM, grouped,
    # dilated taps, a stride along the rows only
    ((1, 16, 12, 12), (8, 16, 3, 3), 1, (1, 1), (1, 1, 1, 1), (1, 1), True),
    ((2, 8, 9, 16), (8, 2, 3, 3), 4, (1, 1), (1, 0, 1, 2), (1, 1), True),
    ((1, 8, 10, 12), (4, 8, 3, 3), 1, (1, 1), (2, 2, 2, 2), (2, 2), False),
    ((1, 8, 20, 12), (4, 8, 3, 3), 1, (2, 1), (1, 1, 1, 1), (1, 1), False),
    # rows that meet the input with fewer kernel rows run as pieces (kernels.windows._row_runs)
    ((1, 40, 2, 96), (40, 1, 5, 5), 40, (1, 1), (2, 2, 2, 2), (1, 1), True),
    ((1, 24, 3, 20), (24, 1, 5, 5), 24, (2, 1), (2, 2, 2, 2), (1, 1), False),
    ((1, 3, 1, 6), (4, 3, 3, 3), 1, (1, 1), (3, 1, 3, 1), (1, 1), True),  # rows of padding
    ((2, 4, 3, 7), (4, 2, 3, 3), 2, (1, 1), (2, 1, 2, 1), (2, 1), True),
    ((1, 3, 2, 9), (5, 3, 5, 3), 1, (1, 2), (2, 1, 2, 1), (1, 1), True),
    ((2, 6, 3), (6, 1, 5), 6, (1,), (2, 2), (1,), True),
    ((1, 4, 1), (2, 4, 3), 1, (1,), (1, 1), (1,), True),  # one piece: the middle tap only
    ((1, 2, 2, 4, 3), (2, 1, 5, 3, 3), 2, (1, 1, 1), (2, 1, 1, 2, 1, 1), (1, 1, 1), True),
    # depthwise with >= 64 channels: the channels-last einsum path
    ((2, 64, 17), (64, 1, 5), 64, (2,), (2, 1), (2,), True),
    ((2, 80, 9, 11), (80, 1, 3, 5), 80, (2, 1), (1, 2, 0, 2), (1, 2), True),
    ((1, 64, 3, 96), (64, 1, 5, 5), 64, (1, 1), (2, 2, 2, 2), (1, 1), False),
    ((1, 64, 4, 5, 6), (64, 1, 2, 3, 2), 64, (1, 2, 1), (1, 0, 1, 0, 1, 1), (2, 1, 1), True),
    ((0, 64, 5, 5), (64, 1, 3, 3), 64, (1, 1), (1, 1, 1, 1), (1, 1), True),  # empty batch
    # depthwise over narrow rows: banded GEMMs (kernels.windows._BandedPlan), padding, strides and
    # dilations along the rows in the bands
    ((1, 64, 25, 5), (64, 1, 3, 3), 64, (1, 1), (1, 1, 1, 1), (1, 1), True),
    ((2, 6, 9, 10), (6, 1, 3, 3), 6, (2, 3), (0, 2, 1, 1), (1, 2), True),
    ((1, 5, 4, 3), (5, 1, 2, 5), 5, (1, 1), (3, 4, 0, 2), (1, 1), False),  # kernel past x
    ((1, 3, 6, 24), (3, 1, 1, 3), 3, (1, 2), (0, 0, 0, 0), (1, 1), True),
    ((0, 7, 5, 5), (7, 1, 3, 3), 7, (1, 1), (1, 1, 1, 1), (1, 1), True),  # empty batch
    # blocks of several output rows a GEMM (kernels.windows._band_rows): the last block cut
    # short, its rows past the output reading past the end padding
    ((2, 12, 7, 3), (12, 1, 3, 3), 12, (1, 1), (1, 1, 1, 1), (1, 1), True),  # 5 rows a block
    ((3, 4, 11, 4), (4, 1, 3, 3), 4, (1, 1), (0, 1, 2, 1), (1, 1), True),  # 4 rows a block
    ((1, 10, 9, 6), (10, 1, 5, 2), 10, (1, 2), (2, 0, 2, 1), (1, 2), False),  # 5, W dilated
    ((1, 6, 8, 9), (6, 1, 2, 3), 6, (1, 1), (1, 1, 0, 1), (1, 1), True),  # 1 row (W_out 9)
]


@pytest.mark.parametrize("xs, ws, groups, strides, pads, dilations, bias", CONV_CASES)
def test_conv(xs, ws, groups, strides, pads, dilations, bias):
    rng = np.random.default_rng(1)
    inputs = [_rand(rng, *xs), _rand(rng, *ws)] + ([_rand(rng, ws[0])] if bias else [])
    attrs = dict(strides=strides, pads=pads, dilations=dilations)
    want = _oracle("Conv", inputs, group=groups, **_listed(attrs))
    _check(Conv(groups=groups, **attrs), inputs, want, constant=[False, True, True])


@pytest.mark.parametrize("xs, ws", [((2, 3, 6, 5), (4, 3, 2, 3)),
                                     ((1, 8, 12, 10), (4, 8, 3, 3))])  # >= 512 rows
def test_conv_defaults_and_float64(xs, ws):
    rng = np.random.default_rng(2)
    inputs = [_rand(rng, *xs, dtype=np.float64), _rand(rng, *ws, dtype=np.float64)]
    _check(Conv(), inputs, _oracle("Conv", inputs))


def test_conv_step_follows_shapes_and_weights():
    """A built Conv step binds its last call's x shape, w and b: a call that changes any of
    them (a dynamic size, another weight array, f16 computed in f32) gets its own."""
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float16):
        ws = [_rand(rng, 6, 4, 1, 1, dtype=dtype) for _ in range(2)]
        bs = [None, _rand(rng, 6, dtype=dtype)]
        xs = [_rand(rng, 1, 4, 6, 5, dtype=dtype), _rand(rng, 2, 4, 9, 3, dtype=dtype)]
        g, _ = build_op_graph(Conv(), [xs[0], ws[0]])
        step = build_conv(g.node(g.outputs[0]), None)
        # (x, w, b): again, another x shape, back, another w, no bias, again
        for x, w, b in [(0, 0, 1), (0, 0, 1), (1, 0, 1), (0, 0, 1), (0, 1, 1), (0, 1, 0),
                        (0, 1, 0)]:
            inputs = [xs[x], ws[w]] + ([bs[b]] if bs[b] is not None else [])
            want = _oracle("Conv", [a.astype(np.float32) for a in inputs])
            got = step(*inputs)
            assert got.dtype == dtype and got.shape == want.shape
            tol = 2e-3 if dtype == np.float16 else ATOL
            np.testing.assert_allclose(got, want, rtol=max(tol, RTOL), atol=tol)


CONV_T_CASES = [
    # x, w, groups, strides, pads, dilations, output_padding, bias
    ((2, 3, 5), (3, 2, 3), 1, (2,), (0, 0), (1,), (1,), True),
    ((1, 4, 6), (4, 3, 2), 2, (3,), (1, 2), (2,), (0,), False),
    ((2, 4, 7, 6), (4, 3, 3, 2), 2, (2, 3), (1, 0, 0, 1), (1, 2), (1, 0), True),
    ((1, 3, 4, 4), (3, 5, 3, 3), 1, (1, 1), (0, 0, 0, 0), (1, 1), (0, 0), False),
    ((1, 6, 5, 4), (6, 1, 3, 3), 6, (2, 2), (1, 1, 1, 1), (1, 1), (1, 1), True),  # depthwise
    ((3, 2, 4, 3), (2, 2, 1, 2), 1, (3, 2), (0, 1, 2, 0), (1, 3), (2, 0), True),
    ((1, 2, 3, 4, 3), (2, 2, 2, 2, 2), 1, (2, 1, 2), (0, 1, 0, 0, 0, 1), (1, 1, 1), (1, 0, 0),
     True),
    ((0, 2, 3, 3), (2, 3, 2, 2), 1, (2, 2), (0, 0, 0, 0), (1, 1), (0, 0), True),  # empty batch
]


@pytest.mark.parametrize("xs, ws, groups, strides, pads, dilations, extra, bias", CONV_T_CASES)
def test_conv_transpose(xs, ws, groups, strides, pads, dilations, extra, bias):
    rng = np.random.default_rng(3)
    inputs = [_rand(rng, *xs), _rand(rng, *ws)] + ([_rand(rng, ws[1] * groups)] if bias else [])
    attrs = dict(strides=strides, pads=pads, dilations=dilations, output_padding=extra)
    bug = ("grouped_conv_transpose" if groups > 1
           else "empty_batch_conv_transpose" if xs[0] == 0 else None)
    want = _oracle("ConvTranspose", inputs, bug, group=groups, **_listed(attrs))
    _check(ConvTranspose(groups=groups, **attrs), inputs, want)


# -- pooling --------------------------------------------------------------------------------
POOL_CASES = [
    # x, kernel, strides, pads, dilations, ceil_mode
    ((2, 3, 11), (3,), (2,), (1, 1), (1,), False),
    ((2, 3, 11), (3,), (3,), (1, 2), (1,), True),
    ((1, 2, 9), (2,), (1,), (1, 1), (3,), False),
    ((1, 1, 8), (4,), (3,), (0, 0), (1,), True),  # ceil overhang of 2
    ((2, 3, 8, 7), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),
    ((2, 3, 8, 7), (3, 2), (2, 2), (1, 0, 1, 1), (1, 1), True),
    ((1, 2, 9, 10), (2, 3), (3, 2), (0, 1, 1, 2), (2, 1), True),
    ((1, 2, 6, 6), (2, 2), (1, 1), (0, 0, 1, 1), (1, 1), True),
    ((1, 1, 3, 3), (3, 3), (1, 1), (0, 0, 0, 0), (1, 1), False),
    ((0, 2, 5, 5), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False),  # empty batch
    ((1, 3, 12, 11), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), False),  # YOLO SPPF (separable)
    ((1, 2, 9, 10), (3, 3), (1, 2), (1, 2, 1, 0), (2, 1), False),  # one axis padded, one not
    ((1, 2, 12, 13), (3, 2), (3, 2), (2, 1, 1, 1), (2, 2), True),  # strided taps skip pads
    ((1, 2, 7, 6, 5), (3, 2, 2), (2, 1, 1), (1, 0, 0, 1, 1, 0), (1, 2, 1), False),  # 3-D
    ((1, 8, 10, 10), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False),  # unpadded: no pad pass
]


def _pool_bug(kind: PoolKind, sizes, kernel, strides, pads, dilations, ceil_mode):
    n = len(kernel)
    if kind is PoolKind.MAX and set(strides + dilations) == {1} and any(pads):
        return "max_pool_unit_steps"
    for i in range(n):
        extent = (kernel[i] - 1) * dilations[i] + 1
        padded = sizes[i] + pads[i] + pads[n + i]
        out = -(-(padded - extent) // strides[i]) + 1
        out -= (out - 1) * strides[i] >= sizes[i] + pads[i]
        if ceil_mode and (out - 1) * strides[i] + extent - padded >= 2:
            return "ceil_overhang"
    return None


@pytest.mark.parametrize("kind, count_include_pad", [
    (PoolKind.MAX, False), (PoolKind.AVG, False), (PoolKind.AVG, True)])
@pytest.mark.parametrize("xs, kernel, strides, pads, dilations, ceil_mode", POOL_CASES)
def test_pool(xs, kernel, strides, pads, dilations, ceil_mode, kind, count_include_pad):
    x = _rand(np.random.default_rng(4), *xs)
    attrs = dict(strides=strides, pads=pads, dilations=dilations)
    onnx_attrs = dict(kernel_shape=list(kernel), ceil_mode=int(ceil_mode), **_listed(attrs))
    if kind is PoolKind.AVG:
        onnx_attrs["count_include_pad"] = int(count_include_pad)
    bug = _pool_bug(kind, xs[2:], kernel, strides, pads, dilations, ceil_mode)
    want = _oracle("MaxPool" if kind is PoolKind.MAX else "AveragePool", [x], bug, **onnx_attrs)
    _check(Pool(kind, kernel, ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                **attrs), [x], want)


@pytest.mark.parametrize("kind, op_type", [(PoolKind.MAX, "MaxPool"),
                                           (PoolKind.AVG, "AveragePool")])
def test_pool_step_follows_input_shapes(kind, op_type):
    """A built Pool step binds its geometry per input shape: sizes taken in turns (a
    dynamic width, a batch) each pool as onnx.reference does, ceil mode's partial windows
    included."""
    op = Pool(kind, (3, 2), strides=(2, 2), pads=(1, 0, 1, 1), ceil_mode=True)
    rng = np.random.default_rng(6)
    xs = [_rand(rng, 1, 3, 7, 6), _rand(rng, 1, 3, 7, 9), _rand(rng, 2, 3, 5, 6)]
    g, _ = build_op_graph(op, [xs[0]])
    step = build_pool(g.node(g.outputs[0]), None)
    for x in [xs[0], xs[1], xs[0], xs[2], xs[1]]:
        want = _oracle(op_type, [x], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1],
                       ceil_mode=1)
        got = step(x)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_max_pool_int8_pads_with_the_lowest_value():
    x = np.random.default_rng(5).integers(-128, 0, (2, 3, 7, 6), dtype=np.int8)
    want = _oracle("MaxPool", [x.astype(np.float32)], kernel_shape=[3, 2], strides=[2, 2],
                   pads=[1, 1, 1, 1])
    (got,) = run_op(Pool(PoolKind.MAX, (3, 2), strides=(2, 2), pads=(1, 1, 1, 1)), [x])
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, want.astype(np.int8))


@pytest.mark.parametrize("kind, op_type", [(PoolKind.AVG, "GlobalAveragePool"),
                                           (PoolKind.MAX, "GlobalMaxPool")])
@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 4, 2)])
def test_global_pool(kind, op_type, shape):
    x = _rand(np.random.default_rng(6), *shape)
    bug = "global_max_pool_rank" if kind is PoolKind.MAX and len(shape) != 4 else None
    _check(GlobalPool(kind), [x], _oracle(op_type, [x], bug))


# -- softmax --------------------------------------------------------------------------------
SOFTMAX_CASES = [((5,), 0), ((3, 4), -1), ((3, 4), 0), ((2, 3, 4), 1), ((2, 3, 4), -3),
                 ((0, 4), -1), ((3, 0), -1), ((1, 12), -1), ((1, 1, 7), 2)]  # one row


def _log_softmax64(x: np.ndarray, axis: int) -> np.ndarray:
    # the reference evaluator takes log(softmax), which is -inf where softmax underflows
    z = x.astype(np.float64)
    z = z - z.max(axis=axis, keepdims=True)
    return (z - np.log(np.exp(z).sum(axis=axis, keepdims=True))).astype(x.dtype)


@pytest.mark.parametrize("op_cls, op_type", [(Softmax, "Softmax"), (LogSoftmax, "LogSoftmax")])
@pytest.mark.parametrize("scale", [1.0, 300.0])  # 300: exp would overflow without the shift
@pytest.mark.parametrize("shape, axis", SOFTMAX_CASES)
def test_softmax(op_cls, op_type, scale, shape, axis):
    x = _rand(np.random.default_rng(7), *shape) * np.float32(scale)
    if op_cls is LogSoftmax and scale > 1 and x.size:
        want = _log_softmax64(x, axis)
    else:
        want = _oracle(op_type, [x], axis=axis)
    _check(op_cls(axis), [x], want)


def _softmax64(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("offsets", [
    [0.0, -5.0, -15.0, 3.0],  # rows near the tensor's max: shifted by it
    [0.0, -40.0, 0.0, 0.0],  # a row far below it: every row by its own max
    [0.0, -1e4, -np.inf, 0.0],  # a masked-out row, an all -inf row (NaN, as float64 gives)
])
def test_softmax_along_the_last_axis_keeps_relative_precision(offsets):
    x = _rand(np.random.default_rng(9), 4, 2, 64) * np.float32(8)
    x += np.array(offsets, np.float32)[:, None, None]
    (got,) = run_op(Softmax(-1), [x])
    with np.errstate(invalid="ignore"):
        want = _softmax64(x)
    # relative to each value, down to the float32 normal range: no row lost its digits
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-37)


def test_softmax_of_one_row_with_masked_entries():
    """A single row sums after its own max's shift: masked (-inf) entries are 0."""
    x = _rand(np.random.default_rng(10), 1, 1, 64) * np.float32(30)
    x[..., ::3] = -np.inf
    (got,) = run_op(Softmax(-1), [x])
    np.testing.assert_allclose(got, _softmax64(x), rtol=1e-5, atol=1e-37)


@pytest.mark.parametrize("shape, special", [
    ((1, 12), {0: np.nan}), ((1, 12), {7: np.nan}), ((1, 12), {3: np.inf}),
    ((1, 12), {2: -np.inf, 9: -np.inf}), ((3, 4), {5: np.nan}), ((3, 4), {0: np.inf}),
    ((4, 4), {15: np.nan, 1: -np.inf}), ((1, 16), {}), ((1, 17), {4: np.nan})])
def test_small_softmax_with_nan_and_infinities(shape, special):
    """Up to 16 values Python's max and sum take the reductions' place
    (`kernels.nn._LISTED`), where a NaN may hide from max: the rows come out as float64's
    softmax gives them (NaN where a NaN or +inf is, 0 for -inf)."""
    x = _rand(np.random.default_rng(11), *shape) * np.float32(4)
    flat = x.reshape(-1)
    for i, value in special.items():
        flat[i] = value
    (got,) = run_op(Softmax(-1), [x])
    with np.errstate(invalid="ignore"):
        want = _softmax64(x)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


# -- normalisation --------------------------------------------------------------------------
LAYER_NORM_CASES = [
    # x, axis, scale shape, bias
    ((2, 5), -1, (5,), True),
    ((2, 3, 4), 1, (3, 4), False),
    ((2, 3, 4), -2, (1, 4), True),  # scale broadcasts within the normalised dims
    ((2, 3, 4), 0, (2, 3, 4), True),
    ((0, 3, 4), -1, (4,), True),
]


@pytest.mark.parametrize("xs, axis, ss, bias", LAYER_NORM_CASES)
def test_layer_norm(xs, axis, ss, bias):
    rng = np.random.default_rng(8)
    x = _rand(rng, *xs) * 3 + 5  # an offset mean tests the centring
    inputs = [x, _rand(rng, *ss)] + ([_rand(rng, *ss)] if bias else [])
    want = _oracle("LayerNormalization", inputs, axis=axis, epsilon=1e-3)
    _check(LayerNorm(axis, 1e-3), inputs, want)


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (2, 3, 4, 5)])
@pytest.mark.parametrize("epsilon", [1e-5, 0.1])
def test_batch_norm_inference(shape, epsilon):
    rng = np.random.default_rng(9)
    c = shape[1]
    inputs = [_rand(rng, *shape), _rand(rng, c), _rand(rng, c), _rand(rng, c),
              rng.uniform(0.5, 2.0, c).astype(np.float32)]
    want = onnx_reference("BatchNormalization", inputs, opset=15, epsilon=epsilon)[0]
    _check(BatchNormInference(epsilon), inputs, want)


@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 3, 2)])
def test_instance_norm(shape):
    rng = np.random.default_rng(10)
    inputs = [_rand(rng, *shape) + 2, _rand(rng, shape[1]), _rand(rng, shape[1])]
    want = _oracle("InstanceNormalization", inputs, epsilon=1e-4)
    _check(InstanceNorm(1e-4), inputs, want)


@pytest.mark.parametrize("xs, ss", [((2, 3, 4, 5), (1,)), ((2, 3, 4, 5), (5,)),
                                    ((2, 3, 4, 5), (3, 1, 1)), ((2, 3, 4, 5), (4, 5)),
                                    ((2, 3, 4, 5), (2, 3, 4, 5)), ((), ()), ((3,), ())])
def test_prelu(xs, ss):
    rng = np.random.default_rng(11)
    inputs = [_rand(rng, *xs), _rand(rng, *ss)]
    _check(PRelu(), inputs, _oracle("PRelu", inputs))


# -- resize ---------------------------------------------------------------------------------
RESIZE_CASES = [
    # x, sizes, scales (None: ONNX got sizes)
    ((5, 7), (9, 4), None),
    ((3, 5), (7, 2), (2.4, 0.5)),
    ((2, 3), (1, 1), None),
    ((1, 2, 5, 6), (1, 2, 11, 3), None),
    ((1, 2, 5, 6), (1, 2, 12, 3), (1.0, 1.0, 2.5, 0.6)),
    ((2, 1, 4, 4), (2, 1, 8, 8), (1.0, 1.0, 2.0, 2.0)),
    ((2, 3, 4), (4, 3, 8), None),  # integer upsampling of an outer axis too
    ((1, 2, 3, 4), (1, 2, 3, 12), (1.0, 1.0, 1.0, 3.0)),
]


@pytest.mark.parametrize("coords, nearest_mode, repeats", [
    (CoordinateMode.ASYMMETRIC, NearestMode.FLOOR, (1, 1, 2, 3)),
    (CoordinateMode.HALF_PIXEL, NearestMode.ROUND_PREFER_FLOOR, (1, 1, 2, 3)),
    (CoordinateMode.ALIGN_CORNERS, NearestMode.ROUND_PREFER_FLOOR, None),  # not k per index
])
def test_integer_nearest_upsampling_is_found(coords, nearest_mode, repeats):
    op = Resize((1, 2, 8, 15), mode=ResizeMode.NEAREST, coordinate_mode=coords,
                nearest_mode=nearest_mode)
    assert _nearest_repeats(op, (1, 2, 4, 5), (2, 3)) == repeats


def _resize_pair(shape, sizes, scales, mode, coords, nearest_mode, exclude_outside):
    """The rlx op and the ONNX inputs/attributes saying the same thing."""
    rank = len(shape)
    # ONNX's scales and roi are float32 tensors: the importer widens them exactly
    scales = None if scales is None else tuple(float(np.float32(s)) for s in scales)
    roi = None
    if coords is CoordinateMode.TF_CROP_AND_RESIZE:
        roi = (0.0,) * (rank - 2) + (0.125, 0.25) + (1.0,) * (rank - 2) + (0.75, 1.25)
    op = Resize(sizes, scales, roi, mode, coords, nearest_mode, -0.5, exclude_outside, 2.5)
    extra = [np.array(scales, np.float32)] if scales else [None, np.array(sizes, np.int64)]
    roi_input = None if roi is None else np.array(roi, np.float32)
    attrs = dict(mode=mode.value, coordinate_transformation_mode=coords.value,
                 nearest_mode=nearest_mode.value, cubic_coeff_a=-0.5,
                 exclude_outside=int(exclude_outside), extrapolation_value=2.5)
    return op, [roi_input, *extra], attrs


@pytest.mark.parametrize("coords", list(CoordinateMode))
@pytest.mark.parametrize("mode, exclude_outside", [
    (ResizeMode.NEAREST, False), (ResizeMode.LINEAR, False), (ResizeMode.CUBIC, False),
    (ResizeMode.CUBIC, True)])
@pytest.mark.parametrize("shape, sizes, scales", RESIZE_CASES)
def test_resize(shape, sizes, scales, mode, exclude_outside, coords):
    x = _rand(np.random.default_rng(12), *shape)
    op, extra, attrs = _resize_pair(shape, sizes, scales, mode, coords,
                                    NearestMode.ROUND_PREFER_FLOOR, exclude_outside)
    _check(op, [x], _oracle("Resize", [x, *extra], **attrs))


@pytest.mark.parametrize("nearest_mode", list(NearestMode))
@pytest.mark.parametrize("coords", [CoordinateMode.HALF_PIXEL, CoordinateMode.ALIGN_CORNERS,
                                    CoordinateMode.ASYMMETRIC])
@pytest.mark.parametrize("shape, sizes, scales", RESIZE_CASES)
def test_resize_nearest_modes(shape, sizes, scales, coords, nearest_mode):
    x = _rand(np.random.default_rng(13), *shape)
    op, extra, attrs = _resize_pair(shape, sizes, scales, ResizeMode.NEAREST, coords,
                                    nearest_mode, False)
    _check(op, [x], _oracle("Resize", [x, *extra], **attrs))


@pytest.mark.parametrize("mode", [ResizeMode.NEAREST, ResizeMode.LINEAR, ResizeMode.CUBIC])
def test_resize_uint8_rounds_and_saturates(mode):
    x = np.random.default_rng(14).integers(0, 256, (1, 1, 4, 5), dtype=np.uint8)
    op, extra, attrs = _resize_pair(x.shape, (1, 1, 7, 9), None, mode,
                                    CoordinateMode.HALF_PIXEL, NearestMode.ROUND_PREFER_FLOOR,
                                    False)
    (got,) = run_op(op, [x])
    np.testing.assert_array_equal(got, _oracle("Resize", [x, *extra], **attrs))


def test_symbolic_spatial_dims_infer_unknown_and_run():
    g = Graph("sym")
    x = g.input("x", Shape(("batch", 3, "h", 8), DType.F32))
    w = g.constant(np.ones((4, 3, 3, 3), np.float32))
    y = g.add_node(Conv(strides=(2, 2)), [x, w])
    z = g.add_node(Pool(PoolKind.MAX, (2, 2), strides=(2, 2), ceil_mode=True), [y])
    assert g.node(y).shape.dims == ("batch", 4, "?", 3)
    assert g.node(z).shape.dims == ("batch", 4, "?", 2)
    g.set_outputs([z])
    data = _rand(np.random.default_rng(15), 2, 3, 9, 8)
    (got,) = Session().compile(g).run({"x": data})
    conv = _oracle("Conv", [data, np.ones((4, 3, 3, 3), np.float32)], strides=[2, 2])
    np.testing.assert_allclose(got, _oracle("MaxPool", [conv], kernel_shape=[2, 2],
                                            strides=[2, 2], ceil_mode=1), rtol=RTOL, atol=ATOL)


def test_nn_ops_survive_json():
    g = Graph("nn")
    x = g.input("x", Shape((1, 2, 5, 5), DType.F32))
    w = g.constant(np.ones((2, 1, 3, 3), np.float32))
    y = g.add_node(Conv(pads=(1, 1, 1, 1), groups=2), [x, w])
    y = g.add_node(Pool(PoolKind.AVG, (2, 2), strides=(2, 2), ceil_mode=True), [y])
    y = g.add_node(Resize((1, 2, 6, 6), (1.0, 1.0, 2.0, 2.0), mode=ResizeMode.CUBIC,
                          coordinate_mode=CoordinateMode.ALIGN_CORNERS), [y])
    g.set_outputs([y])
    back = graph_from_json(graph_to_json(g))
    assert [n.op for n in back.nodes()][2:] == [n.op for n in g.nodes()][2:]


# -- errors ---------------------------------------------------------------------------------
def _shape_error(op, *shapes, match: str) -> None:
    g = Graph("bad")
    ids = [g.input(f"in{i}", Shape(s, DType.F32)) for i, s in enumerate(shapes)]
    with pytest.raises(ShapeError, match=match):
        g.add_node(op, ids)


@pytest.mark.parametrize("op, shapes, match", [
    (Conv(), [(1, 4, 5, 5), (2, 3, 3, 3)], "x has 4 channels but w expects 3 x groups=1"),
    (Conv(groups=2), [(1, 5, 5, 5), (4, 1, 3, 3)], "input channels 5 is not divisible"),
    (Conv(groups=2), [(1, 4, 5, 5), (3, 2, 3, 3)], "output channels 3 is not divisible"),
    (Conv(groups=0), [(1, 4, 5, 5), (3, 4, 3, 3)], "groups must be >= 1"),
    (Conv(), [(1, 3, 5, 5), (2, 3, 3, 3), (3,)], r"bias must be \[2\]"),
    (Conv(), [(1, 3, 2, 5), (2, 3, 3, 3)], "window does not fit"),
    (Conv(strides=(1,)), [(1, 3, 5, 5), (2, 3, 3, 3)], "strides needs 2 entries"),
    (Conv(pads=(-1, 0, 0, 0)), [(1, 3, 5, 5), (2, 3, 3, 3)], "pads must be >= 0"),
    (Conv(), [(1, 3, 5, 5), (2, 3, 3)], "w must have the rank of x"),
    (Conv(), [(3, 5), (2, 3)], "rank >= 3"),
    (ConvTranspose(), [(1, 4, 5, 5), (3, 2, 3, 3)], "x has 4 channels but w expects 3"),
    (ConvTranspose(groups=3), [(1, 4, 5, 5), (4, 2, 3, 3)], "not divisible by groups=3"),
    (ConvTranspose(strides=(2, 2), output_padding=(2, 0)), [(1, 4, 5, 5), (4, 2, 3, 3)],
     "output_padding"),
    (Pool(PoolKind.MAX, (3, 3), pads=(3, 0, 0, 0)), [(1, 2, 5, 5)], "smaller than the kernel"),
    (Pool(PoolKind.AVG, (3,)), [(1, 2, 5, 5)], "needs a rank-3 input"),
    (Pool(PoolKind.AVG, (7, 2)), [(1, 2, 5, 5)], "window does not fit"),
    (GlobalPool(PoolKind.AVG), [(5,)], "rank >= 2"),
    (Softmax(2), [(3, 4)], "axis 2 out of range"),
    (LogSoftmax(), [()], "rank >= 1"),
    (LayerNorm(1), [(2, 3, 4), (3,)], "does not broadcast"),
    (BatchNormInference(), [(2, 3, 4), (3,), (3,), (4,), (3,)], r"mean must be \[3\]"),
    (InstanceNorm(), [(2, 3), (3,), (3,)], "rank >= 3"),
    (PRelu(), [(2, 3, 4), (3,)], "does not broadcast"),
    (PRelu(), [(4,), (2, 4)], "does not broadcast"),
    (Resize((1, 2)), [(1, 2, 3)], "not a shape of rank 3"),
    (Resize((2, 2), scales=(1.0,)), [(2, 2)], "2 positive numbers"),
    (Resize((2, 2), coordinate_mode=CoordinateMode.TF_CROP_AND_RESIZE), [(2, 2)], "roi"),
    (Resize((2, 2), roi=(0.0, 0.0, 1.0, 1.0)), [(2, 2)], "roi"),
    (Resize((2, 3)), [(2, 0)], "cannot resize an empty axis"),
])
def test_shape_errors(op, shapes, match):
    _shape_error(op, *shapes, match=match)


def test_float_only_ops_refuse_integers():
    g = Graph("ints")
    x = g.input("x", Shape((1, 2, 4, 4), DType.I32))
    w = g.input("w", Shape((2, 2, 3, 3), DType.I32))
    with pytest.raises(ShapeError, match="floating-point"):
        g.add_node(Conv(), [x, w])
    with pytest.raises(ShapeError, match="avg: unsupported dtype i32"):
        g.add_node(Pool(PoolKind.AVG, (2, 2)), [x])


@pytest.mark.parametrize("op, op_type, attrs, shapes", [
    (Conv(pads=(1, 1)), "Conv", dict(pads=[1, 1]), [(2, 3, 7), (4, 3, 3)]),
    (ConvTranspose(strides=(2,)), "ConvTranspose", dict(strides=[2]), [(2, 3, 5), (3, 2, 3)]),
    (Pool(PoolKind.AVG, (2,)), "AveragePool", dict(kernel_shape=[2]), [(2, 3, 7)]),
    (Softmax(), "Softmax", {}, [(3, 5)]),
    (LayerNorm(), "LayerNormalization", {}, [(3, 5), (5,)]),
])
def test_half_precision_computes_in_float32(op, op_type, attrs, shapes):
    rng = np.random.default_rng(16)
    inputs = [_rand(rng, *s, dtype=np.float16) for s in shapes]
    want = _oracle(op_type, [x.astype(np.float32) for x in inputs], **attrs)
    (got,) = run_op(op, inputs)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("kind,shape,attrs", [
    ("MaxPool", (1, 2, 1, 4), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("MaxPool", (1, 2, 1, 5), {"kernel_shape": [3, 3], "strides": [2, 2]}),
    ("MaxPool", (1, 2, 1, 5), {"kernel_shape": [3, 3], "strides": [3, 3]}),
    ("AveragePool", (1, 2, 1, 4), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("AveragePool", (1, 2, 1, 4), {"kernel_shape": [2, 2], "strides": [2, 2],
                                   "count_include_pad": 1}),
    ("AveragePool", (1, 2, 1, 5), {"kernel_shape": [3, 3], "strides": [2, 2],
                                   "pads": [1, 1, 1, 1]}),
])
def test_pools_on_inputs_shorter_than_the_window_match_onnxruntime(kind, shape, attrs):
    """onnxruntime sizes a pool dividing toward zero: a window longer than the input (by
    less than a stride) still gives one output over the elements it covers."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from rlx.onnx import import_onnx

    graph = helper.make_graph(
        [helper.make_node(kind, ["x"], ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (got,) = Session().compile(import_onnx(model)[0]).run({"x": x})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
