"""Kernels of ConvInteger, QLinearConv and QLinearMatMul: exact integer products through
float GEMMs (the argument of `rlx.kernels.integer`), then onnxruntime's requantisation.

A convolution's output is a sum of C/g * prod(kernel) products of |x - x_zero| <= A and
|w - w_zero| <= B. float32 sums `exact_terms(A, B)` such products exactly in any order, so
the input channels are cut into slices of at most that many terms per output, each one
float32 Conv (rlx.kernels.windows': im2col and BLAS), and the slices' integer results are
added in float64 (exact below 2^53). A grouped Conv whose groups are too wide for one slice
runs as one float64 Conv, exact while C/g * prod(kernel) * A * B < 2^53 (a window of 2^37
terms at A = B = 255). A is read off x's type and zero point, B measured once on a constant
weight. Padding reads as x's zero point (0 once centred), as in onnxruntime's im2col.

Requantisation follows onnxruntime (MLAS): multiplier = x_scale * w_scale / y_scale in
float32 (one per output channel or column), y = saturate(round_half_even(float32(acc) *
multiplier) + y_zero), so integer outputs are bit for bit onnxruntime's.
"""

from __future__ import annotations

import math

import numpy as np

from rlx.ir.dtype import DType
from rlx.ir.ops.quant import ConvInteger, QLinearConv, QLinearMatMul
from rlx.ir.ops.windows import Conv
from rlx.ir.shape import Shape
from rlx.kernels.integer import (
    KeptWeight,
    centred,
    centred_weight,
    exact_terms,
    weight_product,
    widest,
)
from rlx.kernels.registry import staged
from rlx.kernels.windows import build_conv
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = ["build_conv_integer", "build_qlinear_conv", "build_qlinear_matmul", "requantize"]

_EXACT_FLOAT64 = 1 << 53


@dataclass(frozen=True)
class _FloatConvNode:
    """What rlx.kernels.windows' Conv builder reads of a node: the op and the output dtype."""

    op: Conv
    shape: Shape


class _ExactConv:
    """conv(x, w) of centred float32 operands, exactly, as int32 (see the module doc).
    Holds one float Conv step per channel slice (each keeps its weight layout) and the
    slices of the last weight it saw; concurrent runs at worst redo that work."""

    def __init__(self, conv: Conv):
        self.conv = conv
        self.steps: dict[tuple[str, int], object] = {}
        self.weights: tuple = (None, None, ())

    def _step(self, dtype: DType, index: int):
        key = (dtype.name, index)
        step = self.steps.get(key)
        if step is None:
            step = self.steps[key] = build_conv(_FloatConvNode(self.conv, Shape((), dtype)),
                                                None)
        return step

    def _weights(self, w: np.ndarray, kind: str, cut: int) -> tuple[np.ndarray, ...]:
        """w's slices of `cut` channels (kind "f32") or its float64 copy ("f64"), made
        once per weight array."""
        cached = self.weights  # read once: a concurrent run may replace it
        if cached[0] is not w or cached[1] != (kind, cut):
            parts = (w.astype(np.float64),) if kind == "f64" else tuple(
                w[:, start:start + cut] for start in range(0, w.shape[1], cut))
            cached = self.weights = (w, (kind, cut), parts)
        return cached[2]

    def __call__(self, x: np.ndarray, w: np.ndarray, bound_x: int, bound_w: int) -> np.ndarray:
        window = math.prod(w.shape[2:])
        largest = bound_x * bound_w * window
        channels = w.shape[1]
        cut = exact_terms(bound_x * window, bound_w)  # input channels per exact float32 sum
        if cut >= channels:
            return self._step(DType.F32, 0)(x, w).astype(np.int32)
        if cut >= 1 and self.conv.groups == 1:
            parts = self._weights(w, "f32", cut)
            total = np.zeros((), np.float64)
            for i, part in enumerate(parts):
                total = total + self._step(DType.F32, i)(x[:, i * cut:(i + 1) * cut], part)
            return total.astype(np.int64).astype(np.int32)  # wraps as int32 accumulators do
        assert largest * channels < _EXACT_FLOAT64, "a window past float64's exact range"
        (w64,) = self._weights(w, "f64", 0)
        y = self._step(DType.F64, 0)(x.astype(np.float64), w64)
        return y.astype(np.int64).astype(np.int32)


def _integer_conv(exact: _ExactConv, x, w, x_zero, w_zero) -> np.ndarray:
    """conv(x - x_zero, w - w_zero) in int32; w_zero per tensor or per output channel."""
    w_shape = (-1,) + (1,) * (w.ndim - 1) if w_zero.size > 1 else ()
    centred_w, bound_w = centred_weight(w, w_zero, w_shape)
    x_zero = x_zero.reshape(())
    return exact(centred(x, x_zero, ()), centred_w, widest(x.dtype, x_zero), bound_w)


@staged(ConvInteger)
def build_conv_integer(node, compile):
    exact = _ExactConv(node.op.conv)

    def step(x, w, x_zero, w_zero):
        return _integer_conv(exact, x, w, x_zero, w_zero)

    return step


def requantize(acc: np.ndarray, multiplier: np.ndarray, y_zero: np.ndarray) -> np.ndarray:
    """saturate(round_half_even(float32(acc) * multiplier) + y_zero) in y_zero's type."""
    info = np.iinfo(y_zero.dtype)
    zero = int(y_zero.reshape(-1)[0])
    y = np.rint(acc.astype(np.float32) * multiplier)
    np.clip(y, info.min - zero, info.max - zero, out=y)
    y += np.float32(zero)
    return y.astype(y_zero.dtype)


def _multiplier(in_scale: np.ndarray, w_scale: np.ndarray, y_scale: np.ndarray) -> np.ndarray:
    """in_scale * w_scale / y_scale in float32, left to right (onnxruntime's order)."""
    first = np.float32(in_scale.reshape(-1)[0])
    return (first * w_scale.astype(np.float32).reshape(-1)) / np.float32(y_scale.reshape(-1)[0])


@staged(QLinearConv)
def build_qlinear_conv(node, compile):
    exact = _ExactConv(node.op.conv)

    def step(x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias=None):
        acc = _integer_conv(exact, x, w, x_zero, w_zero)
        per_channel = (-1,) + (1,) * (acc.ndim - 2)
        if bias is not None:
            acc += bias.astype(np.int32).reshape(per_channel)
        multiplier = _multiplier(x_scale, w_scale, y_scale)
        return requantize(acc, multiplier.reshape(per_channel if multiplier.size > 1 else ()),
                          y_zero)

    return step


@staged(QLinearMatMul)
def build_qlinear_matmul(node, compile):
    weights = KeptWeight()

    def step(a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero):
        a_zero = a_zero.reshape(())
        acc = weight_product(centred(a, a_zero, ()), widest(a.dtype, a_zero), b, b_zero,
                             b_zero.shape, weights)
        multiplier = _multiplier(a_scale, b_scale, y_scale)
        return requantize(acc, multiplier if multiplier.size > 1 else multiplier.reshape(()),
                          y_zero)

    return step
