"""Quantisation ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear and
MatMulInteger become rlx's integer ops (`rlx.ir.ops.quant`), so 8-bit weights stay 8-bit;
ConvInteger, QLinearMatMul and QLinearConv too, each as the rlx op of its name (its
requantisation is onnxruntime's float32 arithmetic).

Scales and zero points are per tensor, per axis (1-D along `axis`) or blocked (`block_size`
along `axis`). Rounding is half to even and results saturate to the integer type's range,
as ONNX specifies. Types other than 8- and 16-bit integers (an int32 bias's
DequantizeLinear) are spelled out in arithmetic, which widens nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rlx.ir import (
    QUANTIZED_TYPES,
    Activation,
    Clamp,
    ConvInteger,
    DequantizeLinear,
    DType,
    DynamicQuantizeLinear,
    MatMulInteger,
    QLinearConv,
    QLinearMatMul,
    QuantizeLinear,
)
from rlx.onnx.node import NodeContext
from rlx.onnx.ops.nn import conv_geometry
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
    """(x - zero) * scale in `dtype`; an 8- or 16-bit x is centred in int32 (exact), so no
    engine can fold the float subtraction of a constant into the product (OpenVINO rewrites
    (x - z) * s as x * s - z * s, which rounds differently)."""
    y = centred(s, x, zero, _COMPUTE)
    return s.cast(s.mul(y, s.cast(scale, _COMPUTE)), dtype)


_NARROW = (DType.U8, DType.I8, DType.U16, DType.I16)


def centred(s, x: int, zero: int | None, dtype: DType) -> int:
    """x - zero in `dtype`, through int32 where x is 8- or 16-bit (exact; see `dequantize`)."""
    if zero is not None and s.dtype(x) in _NARROW and s.dtype(zero) in _NARROW:
        return s.cast(s.sub(s.cast(x, DType.I32), s.cast(zero, DType.I32)), dtype)
    y = s.cast(x, dtype)
    return y if zero is None else s.sub(y, s.cast(zero, dtype))


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
    zeros = [s.scalar(0, s.dtype(x)) if z is None else _per_tensor(s, z)
             for x, z in ((a, a_zero), (b, b_zero))]
    return _matmul_of_vectors(s, a, b, lambda a2, b2: s.emit(MatMulInteger(), a2, b2, *zeros))


def _matmul_of_vectors(s, a: int, b: int, emit: Callable[[int, int], int]) -> int:
    """emit(a, b) of operands of rank >= 2, 1-D ones made matrices before and their
    axis dropped after, as numpy.matmul does."""
    vector_a, vector_b = s.rank(a) == 1, s.rank(b) == 1
    if vector_a:
        a = s.unsqueeze(a, [0])
    if vector_b:
        b = s.unsqueeze(b, [1])
    y = emit(a, b)
    if vector_b:
        y = s.squeeze(y, [-1])
    return s.squeeze(y, [-2 if not vector_b else -1]) if vector_a else y


def _per_tensor(s, param: int) -> int:
    """A one-element [1] or [1, 1] parameter as the scalar it is."""
    return s.reshape(param, ()) if s.shape(param).dims in ((1,), (1, 1)) else param


def _per_column(n: NodeContext, index: int) -> int:
    """A weight's scale or zero point: a scalar, or 1-D per column / output channel (a
    [1, ..., 1, N] one is read as [N])."""
    s = n.s
    param = _per_tensor(s, n.input(index))
    dims = s.shape(param).dims
    if len(dims) <= 1:
        return param
    if not all(d == 1 for d in dims[:-1]):
        raise n.fail(f"input {index}: a parameter of shape {list(dims)} is not per tensor "
                     "or per column")
    return s.reshape(param, [-1])


def _qlinear_inputs(n: NodeContext, x: int, w: int) -> list[int]:
    """x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero of a QLinear node, absent
    zero points as zeros of their operand's type."""
    s = n.s
    y_type = s.dtype(n.input(x))
    return [n.input(x), _per_tensor(s, n.input(x + 1)),
            _per_tensor(s, _zero_point(n, x + 2, s.dtype(n.input(x)))),
            n.input(w), _per_column(n, w + 1),
            _per_column(n, w + 2) if n.has(w + 2) else _zero_point(n, w + 2,
                                                                   s.dtype(n.input(w))),
            _per_tensor(s, n.input(6)), _per_tensor(s, _zero_point(n, 7, y_type))]


@converter("QLinearMatMul")
def qlinear_matmul(n: NodeContext) -> int:
    s = n.s
    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = _qlinear_inputs(n, 0, 3)
    if any(s.dtype(p) is not DType.F32 for p in (a_scale, b_scale, y_scale)):
        # opset 21's float16 / bfloat16 scales, which onnxruntime has no kernel for: ONNX's
        # reference arithmetic (the ratio in the scales' type, the product in float64)
        acc = integer_matmul(n, a, b, a_zero, b_zero)
        return _requantize(s, acc, s.div(s.mul(a_scale, b_scale), y_scale), y_zero)
    return _matmul_of_vectors(s, a, b, lambda a2, b2: s.emit(
        QLinearMatMul(), a2, a_scale, a_zero, b2, b_scale, b_zero, y_scale, y_zero))


def _requantize(s, acc: int, ratio: int, y_zero: int) -> int:
    """saturate(round(acc * ratio) + y_zero) in float64, in y_zero's type."""
    y = s.add(s.mul(s.cast(acc, DType.F64), s.cast(ratio, DType.F64)),
              s.cast(y_zero, DType.F64))
    info = np.iinfo(s.dtype(y_zero).numpy)
    y = s.emit(Clamp(float(info.min), float(info.max)), s.unary(Activation.ROUND, y))
    return s.cast(y, s.dtype(y_zero))


@converter("QLinearConv")
def qlinear_conv(n: NodeContext) -> int:
    inputs = _qlinear_inputs(n, 0, 3) + ([n.input(8)] if n.has(8) else [])
    return n.s.emit(QLinearConv(*conv_geometry(n, n.input(0), n.input(3))), *inputs)


@converter("MatMulInteger")
def matmul_integer(n: NodeContext) -> int:
    return integer_matmul(n, n.input(0), n.input(1), n.optional(2), n.optional(3))


@converter("ConvInteger")
def conv_integer(n: NodeContext) -> int:
    s = n.s
    x, w = n.input(0), n.input(1)
    zeros = [_per_tensor(s, _zero_point(n, 2, s.dtype(x))),
             _per_column(n, 3) if n.has(3) else _zero_point(n, 3, s.dtype(w))]
    return s.emit(ConvInteger(*conv_geometry(n, x, w)), x, w, *zeros)
