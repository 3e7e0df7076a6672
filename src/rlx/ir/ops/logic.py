"""Comparisons, boolean logic and select, elementwise and broadcast like NumPy: Compare,
Logical, Not, Where. `CompareOp` and `LogicalOp` are the closed sets of their kinds.

A family of their own, apart from `rlx.ir.ops.elementwise`: masks and branches by value,
which a baked encoder or CNN rarely keeps, and a graph without them imports neither these
classes nor their kernels (issue 35).
"""

from __future__ import annotations

import enum
from typing import ClassVar

from rlx.errors import ShapeError
from rlx.ir.dtype import DType
from rlx.ir.ops.base import Op, expect_dtype
from rlx.ir.ops.elementwise import broadcast_shape
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = ["CompareOp", "LogicalOp", "Compare", "Logical", "Not", "Where"]


class CompareOp(enum.Enum):
    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"


class LogicalOp(enum.Enum):
    AND = "and"
    OR = "or"
    XOR = "xor"


@dataclass(frozen=True)
class Compare(Op):
    op: CompareOp
    arity: ClassVar = (2, 2)

    def infer(self, inputs):
        expect_dtype(self, inputs)
        return broadcast_shape(self, inputs, DType.BOOL)


@dataclass(frozen=True)
class Logical(Op):
    """Boolean and / or / xor."""

    op: LogicalOp
    arity: ClassVar = (2, 2)

    def infer(self, inputs):
        if any(s.dtype is not DType.BOOL for s in inputs):
            raise ShapeError(f"Logical {self.op.value}: needs bool inputs")
        return broadcast_shape(self, inputs, DType.BOOL)


@dataclass(frozen=True)
class Not(Op):
    def infer(self, inputs):
        if inputs[0].dtype is not DType.BOOL:
            raise ShapeError(f"Not: needs a bool input, got {inputs[0].dtype}")
        return inputs[0]


@dataclass(frozen=True)
class Where(Op):
    """`Where(cond, a, b)`: a where cond else b."""

    arity: ClassVar = (3, 3)

    def infer(self, inputs):
        cond, a, b = inputs
        if cond.dtype is not DType.BOOL:
            raise ShapeError(f"Where: condition must be bool, got {cond.dtype}")
        expect_dtype(self, [a, b])
        return broadcast_shape(self, inputs, a.dtype)
