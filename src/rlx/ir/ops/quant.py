"""Integer quantisation kept as such: ONNX's QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear and MatMulInteger, with their operands in their 8-bit types.

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
from rlx.ir.shape import Shape, broadcast_dims
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = ["QUANTIZED_TYPES", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
           "MatMulInteger"]

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


@dataclass(frozen=True)
class MatMulInteger(Op):
    """(a - a_zero) @ (b - b_zero) in int32, NumPy matmul broadcasting. Inputs `[a, b,
    a_zero, b_zero]`, 8-bit; a_zero per tensor or per row of a (1-D of M), b_zero per
    tensor or per column of b (1-D of N)."""

    arity: ClassVar = (4, 4)

    def infer(self, inputs):
        a, b, a_zero, b_zero = inputs
        for what, shape in (("a", a), ("b", b)):
            if shape.dtype not in (DType.U8, DType.I8):
                raise ShapeError(f"{self.op_name}: {what} must be u8 or i8, got {shape.dtype}")
        if a_zero.dtype != a.dtype or b_zero.dtype != b.dtype:
            raise ShapeError(f"{self.op_name}: zero points must have their operands' types")
        if a.rank < 2 or b.rank < 2:
            raise ShapeError(f"{self.op_name}: operands must have rank >= 2, got {a} x {b}")
        if isinstance(a.dims[-1], int) and isinstance(b.dims[-2], int) and \
                a.dims[-1] != b.dims[-2]:
            raise ShapeError(f"{self.op_name}: inner dims differ, {a} x {b}")
        for zero, dim, what in ((a_zero, a.dims[-2], "rows"), (b_zero, b.dims[-1], "columns")):
            if zero.rank > 1 or (zero.rank == 1 and isinstance(zero.dims[0], int)
                                 and zero.dims[0] not in (1, dim)):
                raise ShapeError(f"{self.op_name}: zero point {zero} must be a scalar or "
                                 f"one per {what}")
        try:
            batch = broadcast_dims(a.dims[:-2], b.dims[:-2])
        except ShapeError as err:
            raise ShapeError(f"{self.op_name}: {err}") from None
        return Shape((*batch, a.dims[-2], b.dims[-1]), DType.I32)
