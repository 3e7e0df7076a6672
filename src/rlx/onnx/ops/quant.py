"""Quantisation ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear and
MatMulInteger become rlx's integer ops (`rlx.ir.ops.quant`), so 8-bit weights stay 8-bit;
QLinearMatMul, QLinearConv and ConvInteger are built on them (an integer product, or a
Conv of centred operands, then requantisation in IR arithmetic).

Scales and zero points are per tensor, per axis (1-D along `axis`) or blocked (`block_size`
along `axis`). Rounding is half to even and results saturate to the integer type's range,
as ONNX specifies. Types other than 8- and 16-bit integers (an int32 bias's
DequantizeLinear) are spelled out in arithmetic, which widens nothing.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from rlx.ir import (
    QUANTIZED_TYPES,
    Activation,
    Clamp,
    DequantizeLinear,
    DType,
    DynamicQuantizeLinear,
    MatMulInteger,
    QuantizeLinear,
)
from rlx.onnx.node import NodeContext
from rlx.onnx.ops.nn import emit_conv
from rlx.onnx.registry import converter
from rlx.onnx.tensors import dtype_of

__all__ = [
    "quantize", "dequantize", "quantize_linear", "dequantize_linear", "qlinear_matmul",
    "qlinear_conv", "matmul_integer", "conv_integer", "dynamic_quantize_linear",
    "integer_matmul",
]

_COMPUTE = DType.F32


def _broadcastable(n: NodeContext, param: int, x: int, axis: int, block: int) -> int:
    """A scale or zero point shaped to broadcast against x (per tensor, axis or block)."""
    s = n.s
    rank, prank = s.rank(x), s.rank(param)
    if prank == 0 or (prank == 1 and s.shape(param).dims[0] == 1 and not block):
        return s.reshape(param, ()) if prank else param
    axis %= rank
    if block:
        # blocked: repeat each entry `block` times along axis, then cut to x's length
        index = np.arange(s.shape(x).dims[axis]) // block
        return s.gather(param, s.const(index.astype(np.int64)), axis)
    return s.reshape(param, [-1 if i == axis else 1 for i in range(rank)])


def quantize(s, x: int, scale: int, zero: int | None, dtype: DType) -> int:
    """saturate(round(x / scale) + zero) in `dtype`."""
    info = np.iinfo(dtype.numpy)
    y = s.unary(Activation.ROUND, s.div(s.cast(x, _COMPUTE), s.cast(scale, _COMPUTE)))
    if zero is not None:
        y = s.add(y, s.cast(zero, _COMPUTE))
    return s.cast(s.emit(Clamp(float(info.min), float(info.max)), y), dtype)


def dequantize(s, x: int, scale: int, zero: int | None, dtype: DType) -> int:
    """(x - zero) * scale in `dtype`."""
    y = s.cast(x, _COMPUTE)
    if zero is not None:
        y = s.sub(y, s.cast(zero, _COMPUTE))
    return s.cast(s.mul(y, s.cast(scale, _COMPUTE)), dtype)


def _quantized_type(n: NodeContext, zero_index: int) -> DType:
    if n.has(zero_index):
        return n.s.dtype(n.input(zero_index))
    if "output_dtype" in n.attrs and n.attr("output_dtype"):
        return dtype_of(n.attr("output_dtype"), f"{n.label} output_dtype")
    return DType.U8


def _check_integer(n: NodeContext, dtype: DType) -> None:
    if dtype not in (DType.U8, DType.I8, DType.U16, DType.I16, DType.I32, DType.U32):
        raise n.fail(f"quantised type {dtype} is not supported")


def _zero_point(n: NodeContext, index: int, dtype: DType, scale: int | None = None) -> int:
    """Input `index`, or where the node leaves it out zeros of `dtype`, shaped like
    `scale` when that has a static shape (onnxruntime wants them alike when blocked)."""
    if n.has(index):
        return n.input(index)
    dims = () if scale is None else n.s.shape(scale).dims
    if not all(isinstance(d, int) for d in dims):
        dims = ()
    return n.s.const(np.zeros(tuple(int(d) for d in dims), dtype.numpy))


@converter("QuantizeLinear")
def quantize_linear(n: NodeContext) -> int:
    s = n.s
    x = n.input(0)
    dtype = _quantized_type(n, 2)
    _check_integer(n, dtype)
    axis, block = n.attr("axis", 1), n.attr("block_size", 0)
    if dtype in QUANTIZED_TYPES:
        op = QuantizeLinear(axis, block)
        return s.emit(op, x, n.input(1), _zero_point(n, 2, dtype, n.input(1)))
    scale = _broadcastable(n, n.input(1), x, axis, block)
    zero = _broadcastable(n, n.input(2), x, axis, block) if n.has(2) else None
    return quantize(s, x, scale, zero, dtype)


@converter("DequantizeLinear")
def dequantize_linear(n: NodeContext) -> int:
    s = n.s
    x = n.input(0)
    _check_integer(n, s.dtype(x))
    axis, block = n.attr("axis", 1), n.attr("block_size", 0)
    scale = n.input(1)
    out = dtype_of(n.attr("output_dtype"), n.label) if n.attr("output_dtype") else \
        s.dtype(scale)
    if s.dtype(x) in QUANTIZED_TYPES:
        y = s.emit(DequantizeLinear(axis, block), x, scale,
                   _zero_point(n, 2, s.dtype(x), scale))
        return y if s.dtype(y) == out else s.cast(y, out)
    zero = _broadcastable(n, n.input(2), x, axis, block) if n.has(2) else None
    return dequantize(s, x, _broadcastable(n, scale, x, axis, block), zero, out)


@converter("DynamicQuantizeLinear")
def dynamic_quantize_linear(n: NodeContext) -> list[int]:
    return n.s.parts(n.s.emit(DynamicQuantizeLinear(), n.input(0)))


def integer_matmul(n: NodeContext, a: int, b: int, a_zero: int | None,
                   b_zero: int | None) -> int:
    """MatMulInteger of a and b (8-bit) less their zero points (absent: 0; per tensor,
    per row of a, per column of b), in int32; 1-D operands as numpy.matmul takes them."""
    s = n.s
    zeros = [s.scalar(0, s.dtype(x)) if z is None else
             s.reshape(z, ()) if s.shape(z).dims in ((1,), (1, 1)) else z
             for x, z in ((a, a_zero), (b, b_zero))]
    vector_a, vector_b = s.rank(a) == 1, s.rank(b) == 1
    if vector_a:
        a = s.unsqueeze(a, [0])
    if vector_b:
        b = s.unsqueeze(b, [1])
    y = s.emit(MatMulInteger(), a, b, *zeros)
    if vector_b:
        y = s.squeeze(y, [-1])
    return s.squeeze(y, [-2 if not vector_b else -1]) if vector_a else y


def _integer_operand(n: NodeContext, index: int, zero_index: int, axis: int,
                     dtype: DType) -> int:
    """Input `index` minus its zero point (per tensor or along `axis`), in float `dtype`:
    a DequantizeLinear of scale 1, so a constant 8-bit operand stays 8-bit in the file."""
    s = n.s
    x = n.input(index)
    zero = _zero_point(n, zero_index, s.dtype(x))
    if s.shape(zero).dims == (1,):
        zero = s.reshape(zero, ())
    dims = s.shape(zero).dims
    if not all(isinstance(d, int) for d in dims):
        raise n.fail(f"zero point {index} has a run-time shape {s.shape(zero)}")
    ones = s.const(np.ones(tuple(int(d) for d in dims), dtype.numpy))
    return s.emit(DequantizeLinear(axis % s.rank(x)), x, ones, zero)


def _requantize(n: NodeContext, acc: int, scales: list[int], y_scale: int,
                y_zero: int | None, out: DType) -> int:
    """round(acc * prod(scales) / y_scale) + y_zero, saturated to `out` (float64 like
    ONNX's reference; the scale ratio itself in the scales' type)."""
    s = n.s
    ratio = scales[0]
    for other in scales[1:]:
        ratio = s.mul(ratio, other)
    ratio = s.div(ratio, y_scale)
    y = s.mul(s.cast(acc, DType.F64), s.cast(ratio, DType.F64))
    if y_zero is not None:
        y = s.add(y, s.cast(y_zero, DType.F64))
    info = np.iinfo(out.numpy)
    y = s.emit(Clamp(float(info.min), float(info.max)), s.unary(Activation.ROUND, y))
    return s.cast(y, out)


def _scalar_or_vector(s, param: int, rank: int, axis: int) -> int:
    """A per-tensor or per-channel parameter shaped to broadcast along `axis`."""
    if s.rank(param) == 1 and s.shape(param).dims[0] != 1:
        return s.reshape(param, [-1 if i == axis % rank else 1 for i in range(rank)])
    return s.reshape(param, ()) if s.rank(param) else param


@converter("QLinearMatMul")
def qlinear_matmul(n: NodeContext) -> int:
    s = n.s
    ra, rb = s.rank(n.input(0)), s.rank(n.input(3))
    acc = integer_matmul(n, n.input(0), n.input(3), n.input(2), n.input(5))
    scales = [_scalar_or_vector(s, n.input(1), ra, ra - 2),
              _scalar_or_vector(s, n.input(4), rb, rb - 1)]
    out = s.dtype(n.input(7)) if n.has(7) else s.dtype(n.input(0))
    return _requantize(n, acc, scales, n.input(6), n.optional(7), out)


@converter("QLinearConv")
def qlinear_conv(n: NodeContext) -> int:
    s = n.s
    acc = s.cast(_integer_conv(n, (0, 2), (3, 5)), DType.F64)
    rank = s.rank(acc)
    if n.has(8):
        acc = s.add(acc, _scalar_or_vector(s, s.cast(n.input(8), DType.F64), rank, 1))
    scales = [_scalar_or_vector(s, n.input(1), rank, 1),
              _scalar_or_vector(s, n.input(4), rank, 1)]
    out = s.dtype(n.input(7)) if n.has(7) else s.dtype(n.input(0))
    return _requantize(n, acc, scales, n.input(6), n.optional(7), out)


@converter("MatMulInteger")
def matmul_integer(n: NodeContext) -> int:
    return integer_matmul(n, n.input(0), n.input(1), n.optional(2), n.optional(3))


@converter("ConvInteger")
def conv_integer(n: NodeContext) -> int:
    return n.s.cast(_integer_conv(n, (0, 2), (1, 3)), DType.I32)


def _integer_conv(n: NodeContext, x: tuple[int, int], w: tuple[int, int]) -> int:
    """The exact Conv of (x - x_zero) and (w - w_zero) ((input, zero point) indices), in
    float64. Computed as float32 Convs over slices of the input channels, each short enough
    that its partial sums are integers within 2^24: exact in any summation order, so every
    engine's float32 Conv gives it (onnxruntime has no float64 Conv); the slices' results
    are added in float64. Where no slice can be (see `_channels_per_slice`), one float64
    Conv."""
    s = n.s
    per_slice = _channels_per_slice(n, x, w)
    if per_slice is None:
        return emit_conv(n, _integer_operand(n, x[0], x[1], 1, DType.F64),
                         _integer_operand(n, w[0], w[1], 0, DType.F64), None)
    xs = _integer_operand(n, x[0], x[1], 1, DType.F32)
    ws = _integer_operand(n, w[0], w[1], 0, DType.F32)
    channels = int(s.shape(ws).dims[1])
    if per_slice == channels:
        return s.cast(emit_conv(n, xs, ws, None), DType.F64)
    parts = [s.cast(emit_conv(n, s.slice(xs, [start], [stop], [1]),
                              s.slice(ws, [start], [stop], [1]), None), DType.F64)
             for start in range(0, channels, per_slice)
             for stop in [min(start + per_slice, channels)]]
    return functools.reduce(s.add, parts)


def _channels_per_slice(n: NodeContext, x: tuple[int, int], w: tuple[int, int]) -> int | None:
    """The most input channels whose products sum within 2^24; None for a weight of
    run-time shape, or a grouped Conv that would need slicing (its groups' channels)."""
    dims = n.s.shape(n.input(w[0])).dims
    if not all(isinstance(d, int) for d in dims):
        return None
    channels, window = int(dims[1]), math.prod(int(d) for d in dims[2:])
    bound = window * _difference_bound(n, *x) * _difference_bound(n, *w)
    per_slice = channels if bound == 0 else min(channels, int(2 ** 24 // bound))
    if per_slice == 0 or (per_slice < channels and n.attr("group", 1) != 1):
        return None
    return per_slice


def _difference_bound(n: NodeContext, index: int, zero_index: int) -> float:
    """The largest |input - zero point| the two can hold: from their values where known
    at import, else from their integer types' ranges."""
    lo, hi = _value_range(n, index)
    if n.has(zero_index):
        zero_lo, zero_hi = _value_range(n, zero_index)
        lo, hi = lo - zero_hi, hi - zero_lo
    return max(-lo, hi)


def _value_range(n: NodeContext, index: int) -> tuple[float, float]:
    value = n.static(index)
    if value is not None and value.size:
        return float(value.min()), float(value.max())
    info = np.iinfo(n.s.dtype(n.input(index)).numpy)
    return float(info.min), float(info.max)
