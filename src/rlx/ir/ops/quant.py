"""Integer quantisation kept as such: ONNX's QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv, with their
operands in their 8-bit types.

Spelling these out in float arithmetic would widen an int8 weight to int32 or float32 as
soon as the bake folds its cast (4x the file, and a slow integer product); as ops they keep
the weight's bytes, run on exact kernels (`rlx.kernels.integer`) and export as the ONNX ops
whose int8 kernels onnxruntime and OpenVINO run.

Scales and zero points are per tensor (rank 0 or one element), per axis (1-D along `axis`)
or blocked (`block_size` > 0: x's rank, `axis` holding ceil(size / block_size) entries).
"""

from __future__ import annotations

from typing import ClassVar

from rlx.errors import ShapeError
from rlx.ir.dtype import DType
from rlx.ir.ops.base import Op, OpMixin, op_axis
from rlx.ir.ops.windows import Conv, SamePad
from rlx.ir.shape import Shape, broadcast_dims
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = ["QUANTIZED_TYPES", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
           "MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv"]

QUANTIZED_TYPES = (DType.U8, DType.I8, DType.U16, DType.I16)
"""The integer types a quantised tensor may have."""


def _check_quantized(op: Op, what: str, shape: Shape) -> None:
    if shape.dtype not in QUANTIZED_TYPES:
        names = ", ".join(str(t) for t in QUANTIZED_TYPES)
        raise ShapeError(f"{op.op_name}: {what} must be one of {names}, got {shape.dtype}")


class _Linear(OpMixin):
    """Shared by QuantizeLinear and DequantizeLinear: inputs `[x, scale, zero_point]`."""

    axis: int
    block_size: int

    def attrs(self) -> dict[str, object]:
        return {"axis": self.axis, **({"block_size": self.block_size} if self.block_size
                                      else {})}

    def _check_parameters(self, x: Shape, scale: Shape, zero: Shape) -> None:
        if not scale.dtype.is_float:
            raise ShapeError(f"{self.op_name}: scale must be floating point, got {scale}")
        if zero.dims != scale.dims and zero.rank:
            raise ShapeError(f"{self.op_name}: zero point {zero} does not match scale {scale}")
        if self.block_size < 0:
            raise ShapeError(f"{self.op_name}: block_size must be >= 0, got {self.block_size}")
        if scale.rank == 0 or (scale.rank == 1 and scale.dims[0] == 1 and not self.block_size):
            return
        axis = op_axis(self, self.axis, x.rank, "axis")
        size, dims = x.dims[axis], scale.dims
        if self.block_size:
            want = -(-size // self.block_size) if isinstance(size, int) else dims[axis]
            if scale.rank != x.rank or dims[axis] != want or any(
                    isinstance(d, int) and isinstance(s, int) and d != s
                    for i, (d, s) in enumerate(zip(x.dims, dims)) if i != axis):
                raise ShapeError(f"{self.op_name}: blocked scale {scale} does not fit x {x} "
                                 f"in blocks of {self.block_size} along axis {axis}")
        elif scale.rank != 1 or (isinstance(size, int) and isinstance(dims[0], int)
                                 and dims[0] != size):
            raise ShapeError(f"{self.op_name}: scale {scale} must be a scalar or have "
                             f"x's {size} entries along axis {axis}")


@dataclass(frozen=True)
class QuantizeLinear(_Linear, Op):
    """saturate(round_half_even(x / scale) + zero_point), in the zero point's type."""

    axis: int = 1
    block_size: int = 0
    arity: ClassVar = (3, 3)

    def infer(self, inputs):
        x, scale, zero = inputs
        _check_quantized(self, "zero point", zero)
        if not x.dtype.is_float:
            raise ShapeError(f"{self.op_name}: x must be floating point, got {x.dtype}")
        self._check_parameters(x, scale, zero)
        return Shape(x.dims, zero.dtype)


@dataclass(frozen=True)
class DequantizeLinear(_Linear, Op):
    """(x - zero_point) * scale, in the scale's type."""

    axis: int = 1
    block_size: int = 0
    arity: ClassVar = (3, 3)

    def infer(self, inputs):
        x, scale, zero = inputs
        _check_quantized(self, "x", x)
        if zero.dtype != x.dtype:
            raise ShapeError(f"{self.op_name}: zero point {zero.dtype} is not x's {x.dtype}")
        self._check_parameters(x, scale, zero)
        return Shape(x.dims, scale.dtype)


@dataclass(frozen=True)
class DynamicQuantizeLinear(Op):
    """x (float32) to uint8 with its own scale and zero point: a tuple (y u8 like x,
    scale f32 [], zero point u8 []). The range [min(x, 0), max(x, 0)] maps onto 0..255."""

    def infer(self, inputs):
        (x,) = inputs
        if x.dtype is not DType.F32:
            raise ShapeError(f"{self.op_name}: x must be f32, got {x.dtype}")
        return Shape(x.dims, DType.U8), Shape((), DType.F32), Shape((), DType.U8)


def _integer_matmul_shape(op: Op, a: Shape, b: Shape, a_zero: Shape, b_zero: Shape) -> Shape:
    """The int32 [*batch, M, N] of a product of 8-bit a and b less their zero points (per
    tensor, per row of a, per column of b)."""
    for what, shape in (("a", a), ("b", b)):
        if shape.dtype not in (DType.U8, DType.I8):
            raise ShapeError(f"{op.op_name}: {what} must be u8 or i8, got {shape.dtype}")
    if a_zero.dtype != a.dtype or b_zero.dtype != b.dtype:
        raise ShapeError(f"{op.op_name}: zero points must have their operands' types")
    if a.rank < 2 or b.rank < 2:
        raise ShapeError(f"{op.op_name}: operands must have rank >= 2, got {a} x {b}")
    if isinstance(a.dims[-1], int) and isinstance(b.dims[-2], int) and \
            a.dims[-1] != b.dims[-2]:
        raise ShapeError(f"{op.op_name}: inner dims differ, {a} x {b}")
    for zero, dim, what in ((a_zero, a.dims[-2], "rows"), (b_zero, b.dims[-1], "columns")):
        if zero.rank > 1 or (zero.rank == 1 and isinstance(zero.dims[0], int)
                             and zero.dims[0] not in (1, dim)):
            raise ShapeError(f"{op.op_name}: zero point {zero} must be a scalar or "
                             f"one per {what}")
    try:
        batch = broadcast_dims(a.dims[:-2], b.dims[:-2])
    except ShapeError as err:
        raise ShapeError(f"{op.op_name}: {err}") from None
    return Shape((*batch, a.dims[-2], b.dims[-1]), DType.I32)


@dataclass(frozen=True)
class MatMulInteger(Op):
    """(a - a_zero) @ (b - b_zero) in int32, NumPy matmul broadcasting. Inputs `[a, b,
    a_zero, b_zero]`, 8-bit; a_zero per tensor or per row of a (1-D of M), b_zero per
    tensor or per column of b (1-D of N)."""

    arity: ClassVar = (4, 4)

    def infer(self, inputs):
        return _integer_matmul_shape(self, *inputs)


def _check_requantize(op: Op, scales: tuple[Shape, ...], y_zero: Shape) -> None:
    """Scales are float32 (per tensor, or per output channel / column for the weight's);
    the output's zero point is a per-tensor 8-bit value, which sets the output's type."""
    if any(s.dtype is not DType.F32 for s in scales):
        raise ShapeError(f"{op.op_name}: scales must be f32, got {[str(s) for s in scales]}")
    if any(s.rank > 1 for s in scales):
        raise ShapeError(f"{op.op_name}: scales must be scalars or 1-D, got "
                         f"{[str(s) for s in scales]}")
    if y_zero.dtype not in (DType.U8, DType.I8) or y_zero.numel not in (1, None):
        raise ShapeError(f"{op.op_name}: the output zero point must be one u8 or i8, "
                         f"got {y_zero}")


@dataclass(frozen=True)
class QLinearMatMul(Op):
    """round(((a - a_zero) @ (b - b_zero)) * (a_scale * b_scale / y_scale)) + y_zero,
    saturated to y_zero's type: the int32 product scaled in float32 as onnxruntime does.
    Inputs `[a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero]`; b's scale and zero
    point per tensor or per column."""

    arity: ClassVar = (8, 8)

    def infer(self, inputs):
        a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = inputs
        _check_requantize(self, (a_scale, b_scale, y_scale), y_zero)
        return _integer_matmul_shape(self, a, b, a_zero, b_zero).with_dtype(y_zero.dtype)


class _IntegerConv(OpMixin):
    """Shared by ConvInteger and QLinearConv: Conv's window attributes, and its shape rule
    applied to the integer operands."""

    strides: tuple[int, ...]
    pads: tuple[int, ...]
    dilations: tuple[int, ...]
    groups: int
    same: SamePad | None

    @property
    def conv(self) -> Conv:
        """The float Conv with this op's geometry: what the integer one computes exactly."""
        return Conv(self.strides, self.pads, self.dilations, self.groups, self.same)

    def attrs(self) -> dict[str, object]:
        """`same` only where it is set, as Conv writes it."""
        return self.conv.attrs()

    def _conv_shape(self, x: Shape, w: Shape, x_zero: Shape, w_zero: Shape) -> Shape:
        for what, shape, zero in (("x", x, x_zero), ("w", w, w_zero)):
            if shape.dtype not in (DType.U8, DType.I8) or zero.dtype != shape.dtype:
                raise ShapeError(f"{self.op_name}: {what} and its zero point must be u8 or "
                                 f"i8 alike, got {shape.dtype} and {zero.dtype}")
        if x_zero.numel not in (1, None) or w_zero.rank > 1:
            raise ShapeError(f"{self.op_name}: zero points must be per tensor (x) or per "
                             f"output channel (w), got {x_zero} and {w_zero}")
        try:
            return self.conv.infer([x.with_dtype(DType.F32), w.with_dtype(DType.F32)])
        except ShapeError as err:
            raise ShapeError(f"{self.op_name}: {err}") from None


@dataclass(frozen=True)
class ConvInteger(_IntegerConv, Op):
    """Conv of (x - x_zero) and (w - w_zero) in int32 (ONNX ConvInteger). Inputs `[x, w,
    x_zero, w_zero]`: x_zero per tensor, w_zero per tensor or per output channel."""

    strides: tuple[int, ...] = ()
    pads: tuple[int, ...] = ()
    dilations: tuple[int, ...] = ()
    groups: int = 1
    same: SamePad | None = None
    arity: ClassVar = (4, 4)

    def infer(self, inputs):
        return self._conv_shape(*inputs).with_dtype(DType.I32)


@dataclass(frozen=True)
class QLinearConv(_IntegerConv, Op):
    """round((conv(x - x_zero, w - w_zero) + bias) * (x_scale * w_scale / y_scale)) +
    y_zero, saturated to y_zero's type (ONNX QLinearConv, in onnxruntime's float32
    arithmetic). Inputs `[x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero]` and an
    optional int32 bias; w's scale and zero point per tensor or per output channel."""

    strides: tuple[int, ...] = ()
    pads: tuple[int, ...] = ()
    dilations: tuple[int, ...] = ()
    groups: int = 1
    same: SamePad | None = None
    arity: ClassVar = (8, 9)

    def infer(self, inputs):
        x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero = inputs[:8]
        _check_requantize(self, (x_scale, w_scale, y_scale), y_zero)
        out = self._conv_shape(x, w, x_zero, w_zero)
        if len(inputs) == 9 and (inputs[8].dtype is not DType.I32 or inputs[8].rank != 1):
            raise ShapeError(f"{self.op_name}: bias must be 1-D i32, got {inputs[8]}")
        return out.with_dtype(y_zero.dtype)
