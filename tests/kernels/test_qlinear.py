"""ConvInteger, QLinearConv and QLinearMatMul (`rlx.kernels.qlinear`) against onnxruntime,
bit for bit: on the numpy engine, and exported back to the same ONNX op, at operand ranges
where one float32 sum would not be exact (channels cut into slices, and the float64 path of
a grouped convolution too wide to cut)."""

from __future__ import annotations

import collections

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from rlx import BakeOptions, BakeProfile, bake
from rlx.kernels.integer import EXACT_FLOAT32
from rlx.onnx import export_onnx, import_onnx
from rlx.runtime import Session

U8, I8 = np.uint8, np.int8


def _model(op: str, feeds: dict, inits: dict, **attrs):
    """One `op` node reading the feeds then the initializers, in the order given."""
    node = helper.make_node(op, [*feeds, *inits], ["y"], **attrs)
    out = np.dtype(np.int32) if op == "ConvInteger" else np.asarray(inits["yz"]).dtype
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                                   v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(out), None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _ort(model, feeds) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _check(op: str, feeds: dict, inits: dict, **attrs) -> np.ndarray:
    """The numpy engine and the export equal onnxruntime on the original, bit for bit, and
    the export holds `op` itself (onnxruntime's integer kernel runs it); onnxruntime's
    output."""
    model = _model(op, feeds, inits, **attrs)
    want = _ort(model, feeds)
    file, _ = bake(*import_onnx(model), BakeOptions.from_profile(BakeProfile.EXACT))
    got = Session().compile(file.into_runtime_graph()).run(feeds)[0]
    assert got.dtype == want.dtype and np.array_equal(got, want)
    exported = export_onnx(file)
    assert collections.Counter(n.op_type for n in exported.graph.node)[op] == 1
    assert np.array_equal(_ort(exported, feeds), want)
    return want


def _one_sign(rng, shape, dtype, far: int, near: int) -> np.ndarray:
    """Mostly `far` (the widest difference from the zero point), a tenth `near`: every
    product has one sign, so sums grow past the integers float32 holds."""
    return np.where(rng.random(shape) < 0.9, far, near).astype(dtype)


def _past_float32(values: np.ndarray) -> bool:
    """Whether some of the integers are not float32 values (one float32 sum would round)."""
    return bool((values.astype(np.float32).astype(np.int64) != values).any())


def _extremes(rng, shape, dtype) -> np.ndarray:
    """The type's two ends, so that centred values reach the widest differences."""
    info = np.iinfo(dtype)
    return np.where(rng.random(shape) < 0.5, info.min, info.max).astype(dtype)


def _needs_slices(channels: int, window: int, bound_x: int, bound_w: int) -> bool:
    return channels * window * bound_x * bound_w > EXACT_FLOAT32


@pytest.mark.parametrize("w_type, far, near, w_zero", [(U8, 0, 2, U8(255)),
                                                        (I8, -128, -126, I8(0))])
def test_conv_integer_is_exact_where_one_float32_sum_is_not(w_type, far, near, w_zero):
    rng = np.random.default_rng(0)
    x = _one_sign(rng, (2, 300, 5, 6), U8, 255, 253)
    w = _one_sign(rng, (6, 300, 3, 3), w_type, far, near)
    want = _check("ConvInteger", {"x": x}, {"w": w, "xz": U8(0), "wz": w_zero},
                  pads=[1, 0, 1, 2], strides=[1, 2])
    assert _past_float32(want)


def test_conv_integer_depthwise_and_dilated():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (1, 8, 9, 9), dtype=U8)
    w = rng.integers(0, 256, (8, 1, 3, 3), dtype=U8)
    _check("ConvInteger", {"x": x}, {"w": w, "xz": U8(17), "wz": U8(128)}, group=8,
           dilations=[2, 2], pads=[2, 2, 2, 2])


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv_u8_s8_matches_onnxruntime(bias, per_channel):
    """uint8 activations, symmetric int8 weights (quantize_static's default), a slice cut
    of the 160 input channels, requantised per tensor or per output channel."""
    rng = np.random.default_rng(2)
    x = _extremes(rng, (1, 160, 7, 7), U8)
    w = rng.integers(-127, 128, (4, 160, 3, 3), dtype=I8)
    assert _needs_slices(160, 9, 255, 127)
    w_scale = rng.uniform(1e-4, 1e-3, 4 if per_channel else ()).astype(np.float32)
    inits = {"xs": np.float32(0.02), "xz": U8(3), "w": w, "ws": w_scale,
             "wz": np.zeros(w_scale.shape, I8), "ys": np.float32(0.37), "yz": U8(120)}
    if bias:
        inits["b"] = rng.integers(-50000, 50000, 4).astype(np.int32)
    _check("QLinearConv", {"x": x}, inits, pads=[1, 1, 1, 1])


def test_conv_integer_grouped_too_wide_to_slice_runs_in_float64():
    """Two groups of 300 channels: a group cannot be cut, so one float64 Conv."""
    rng = np.random.default_rng(3)
    x = _one_sign(rng, (1, 600, 4, 4), U8, 255, 253)
    w = _one_sign(rng, (4, 300, 3, 3), U8, 0, 2)
    want = _check("ConvInteger", {"x": x}, {"w": w, "xz": U8(0), "wz": U8(255)}, group=2)
    assert _past_float32(want)


def test_qlinear_conv_s8_s8():
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, (2, 16, 6, 6), dtype=I8)
    w = rng.integers(-127, 128, (16, 1, 3, 3), dtype=I8)
    inits = {"xs": np.float32(0.05), "xz": I8(-4), "w": w,
             "ws": rng.uniform(1e-3, 1e-2, 16).astype(np.float32), "wz": np.zeros(16, I8),
             "ys": np.float32(0.1), "yz": I8(5)}
    _check("QLinearConv", {"x": x}, inits, group=16, strides=[2, 2], pads=[1, 1, 1, 1])


@pytest.mark.parametrize("b_type", [U8, I8])
@pytest.mark.parametrize("per_column", [False, True])
def test_qlinear_matmul_matches_onnxruntime(b_type, per_column):
    rng = np.random.default_rng(5)
    a = _extremes(rng, (2, 3, 600), U8)
    b = _extremes(rng, (600, 5), b_type) if b_type is U8 else \
        rng.integers(-127, 128, (600, 5), dtype=I8)
    shape = (5,) if per_column else ()
    inits = {"as": np.float32(0.03), "az": U8(250), "b": b,
             "bs": rng.uniform(1e-4, 1e-3, shape).astype(np.float32),
             "bz": np.full(shape, 128 if b_type is U8 else 0, b_type),
             "ys": np.float32(0.8), "yz": U8(128)}
    _check("QLinearMatMul", {"a": a}, inits)


def test_qlinear_conv_same_upper_at_two_sizes():
    """auto_pad SAME_UPPER with stride 2 over a symbolic size: the pads are worked out at
    run time, on numpy and in the export (which keeps auto_pad)."""
    rng = np.random.default_rng(6)
    w = rng.integers(-127, 128, (4, 3, 3, 3), dtype=I8)
    inits = {"xs": np.float32(0.02), "xz": U8(128), "w": w, "ws": np.float32(0.003),
             "wz": I8(0), "ys": np.float32(0.05), "yz": U8(100)}
    node = helper.make_node("QLinearConv", ["x", *inits], ["y"], auto_pad="SAME_UPPER",
                            strides=[2, 2])
    graph = helper.make_graph(
        [node], "same", [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(
            np.dtype(U8)), [1, 3, "h", "w"])],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(U8)),
                                       None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    file, _ = bake(*import_onnx(model), BakeOptions.from_profile(BakeProfile.EXACT))
    compiled = Session().compile(file.into_runtime_graph())
    exported = export_onnx(file)
    for h, w_ in ((7, 9), (10, 6)):
        feeds = {"x": rng.integers(0, 256, (1, 3, h, w_), dtype=U8)}
        want = _ort(model, feeds)
        assert want.shape == (1, 4, -(-h // 2), -(-w_ // 2))
        assert np.array_equal(compiled.run(feeds)[0], want)
        assert np.array_equal(_ort(exported, feeds), want)


def test_conv_integer_per_channel_weight_zero_points_match_int64():
    """ONNX lets ConvInteger's w_zero be per output channel (onnxruntime refuses it): the
    numpy engine against the convolution in int64."""
    rng = np.random.default_rng(7)
    x = rng.integers(0, 256, (2, 5, 6, 6), dtype=U8)
    w = rng.integers(0, 256, (3, 5, 3, 3), dtype=U8)
    x_zero, w_zero = U8(9), np.array([0, 128, 255], U8)
    model = _model("ConvInteger", {"x": x}, {"w": w, "xz": x_zero, "wz": w_zero})
    file, _ = bake(*import_onnx(model), BakeOptions.from_profile(BakeProfile.EXACT))
    got = Session().compile(file.into_runtime_graph()).run({"x": x})[0]
    xc = x.astype(np.int64) - int(x_zero)
    wc = w.astype(np.int64) - w_zero.astype(np.int64).reshape(-1, 1, 1, 1)
    windows = np.lib.stride_tricks.sliding_window_view(xc, (3, 3), axis=(2, 3))
    want = np.einsum("ncpqij,mcij->nmpq", windows, wc)
    assert got.dtype == np.int32 and np.array_equal(got, want)


def test_qlinear_matmul_of_a_vector():
    """A 1-D a: a matrix of one row for the product, its axis dropped after (numpy.matmul)."""
    rng = np.random.default_rng(8)
    a = rng.integers(0, 256, 64, dtype=U8)
    b = rng.integers(-127, 128, (64, 6), dtype=I8)
    inits = {"as": np.float32(0.03), "az": U8(128), "b": b, "bs": np.float32(0.01),
             "bz": I8(0), "ys": np.float32(0.2), "yz": U8(128)}
    _check("QLinearMatMul", {"a": a}, inits)
