"""ShapeOf, Size, Range and Fill with ONNX semantics: tensors made from sizes and scalars (a
tensor's dims or element count, a range, a filled tensor), not from another tensor's
values. A family of its own: a graph whose shapes were fixed at bake has none of them, and
imports none of it (issue 35).
"""

from __future__ import annotations

from typing import ClassVar

from rlx.ir.dtype import DType
from rlx.ir.ops.base import Op, expect_dtype
from rlx.ir.ops.shaping import is_dynamic, op_error, static_length
from rlx.ir.shape import UNKNOWN, Shape
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = ["ShapeOf", "Size", "Range", "Fill"]


@dataclass(frozen=True)
class ShapeOf(Op):
    """ONNX Shape: the input's dims `[start:end]` (Python slice clamping) as a 1-D i64."""

    start: int = 0
    end: int | None = None

    def infer(self, inputs):
        (x,) = inputs
        return Shape((len(range(x.rank)[self.start:self.end]),), DType.I64)


@dataclass(frozen=True)
class Size(Op):
    """The input's element count as an i64 scalar."""

    def infer(self, inputs):
        return Shape((), DType.I64)


@dataclass(frozen=True)
class Range(Op):
    """ONNX Range `[start, limit, delta]` (rank-0, one dtype): `start + i * delta` while
    short of limit; the length is data-dependent."""

    arity: ClassVar = (3, 3)

    def infer(self, inputs):
        expect_dtype(self, inputs)
        if any(s.rank != 0 for s in inputs) or inputs[0].dtype is DType.BOOL:
            raise op_error(self, f"needs rank-0 numeric inputs, got {', '.join(map(str, inputs))}")
        return Shape((UNKNOWN,), inputs[0].dtype)


@dataclass(frozen=True)
class Fill(Op):
    """ONNX ConstantOfShape: a tensor of `shape` filled with `value`. Static form has no
    inputs; dynamic form (shape None) reads the shape from a 1-D integer input."""

    value: float
    dtype: DType
    shape: tuple[int, ...] | None = None
    arity: ClassVar = (0, 1)

    def infer(self, inputs):
        if is_dynamic(self, inputs, "shape", 0, (1,)):
            return Shape([UNKNOWN] * static_length(self, inputs[0], "shape"), self.dtype)
        assert self.shape is not None  # the static form
        if any(d < 0 for d in self.shape):
            raise op_error(self, f"negative size in shape {self.shape}")
        return Shape(self.shape, self.dtype)
