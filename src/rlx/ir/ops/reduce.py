"""Reductions and scans: Reduce, ArgMax/ArgMin, CumSum, TopK, with ONNX semantics.

Axes are attributes (static), negative ones count from the end. ONNX passes `axes` and TopK's
`k` as tensor inputs since opset 13/18; the importer turns constant ones into attributes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Sequence

from rlx.errors import ShapeError
from rlx.ir.dtype import DType
from rlx.ir.ops.base import Op
from rlx.ir.shape import Dim, Shape, normalize_axis

__all__ = ["ReduceOp", "Reduce", "ArgMax", "ArgMin", "CumSum", "TopK"]


class ReduceOp(enum.Enum):
    """What `Reduce` computes over the reduced elements (ONNX ReduceXxx)."""

    SUM = "sum"
    MEAN = "mean"
    MAX = "max"
    MIN = "min"
    PROD = "prod"
    L1 = "l1"  # sum |x|
    L2 = "l2"  # sqrt(sum x^2)
    LOG_SUM = "log_sum"  # log(sum x)
    LOG_SUM_EXP = "log_sum_exp"  # log(sum exp x)
    SUM_SQUARE = "sum_square"  # sum x^2


# Defined through exp/log/sqrt: ONNX dropped their integer forms (opset 28).
_FLOAT_ONLY = {ReduceOp.L2, ReduceOp.LOG_SUM, ReduceOp.LOG_SUM_EXP}
# max/min of bools are any/all (ONNX ReduceMax/ReduceMin accept bool since opset 20).
_BOOL_OK = {ReduceOp.MAX, ReduceOp.MIN}


def _normalize_axes(op: Op, axes: Sequence[int], rank: int) -> tuple[int, ...]:
    """`axes` mapped into [0, rank), sorted; ShapeError naming `op` on a bad or repeated axis."""
    try:
        out = sorted(normalize_axis(a, rank) for a in axes)
    except ShapeError as err:
        raise ShapeError(f"{op.op_name}: {err}") from None
    if len(set(out)) != len(out):
        raise ShapeError(f"{op.op_name}: repeated axis in {list(axes)}")
    return tuple(out)


def _reduced_dims(dims: Sequence[Dim], axes: Sequence[int], keepdims: bool) -> list[Dim]:
    if keepdims:
        return [1 if i in axes else d for i, d in enumerate(dims)]
    return [d for i, d in enumerate(dims) if i not in axes]


@dataclass(frozen=True)
class Reduce(Op):
    """Reduce `axes` with `op`; output keeps the input dtype (integer mean truncates).

    `axes=None` reduces every axis; `axes=()` reduces none, so the op applies to each element
    alone (ONNX's noop_with_empty_axes is resolved by the importer). A zero-size reduction
    yields the op's identity: sum 0, prod 1, max -inf and min +inf (an integer dtype's lowest
    and highest value), log_sum and log_sum_exp -inf; mean of nothing is NaN (integers: 0).
    """

    op: ReduceOp
    axes: tuple[int, ...] | None = None
    keepdims: bool = True

    def normalized_axes(self, rank: int) -> tuple[int, ...]:
        return tuple(range(rank)) if self.axes is None else _normalize_axes(self, self.axes, rank)

    def infer(self, inputs):
        (x,) = inputs
        dtype = x.dtype
        if (dtype is DType.BOOL and self.op not in _BOOL_OK) or (
            not dtype.is_float and self.op in _FLOAT_ONLY
        ):
            raise ShapeError(f"Reduce {self.op.value}: does not take {dtype} input")
        axes = self.normalized_axes(x.rank)
        return x.with_dims(_reduced_dims(x.dims, axes, self.keepdims))


@dataclass(frozen=True)
class _ArgReduce:
    """Fields and inference shared by ArgMax and ArgMin (a mixin, so not an op itself)."""

    axis: int = 0
    keepdims: bool = True
    select_last_index: bool = False  # among ties, the last index instead of the first

    def infer(self, inputs):
        (x,) = inputs
        name = type(self).__name__
        if x.rank == 0:
            raise ShapeError(f"{name}: needs rank >= 1, got a scalar")
        try:
            axis = normalize_axis(self.axis, x.rank)
        except ShapeError as err:
            raise ShapeError(f"{name}: {err}") from None
        if x.dims[axis] == 0:
            raise ShapeError(f"{name}: axis {self.axis} of {x} is empty (no index to return)")
        return Shape(_reduced_dims(x.dims, (axis,), self.keepdims), DType.I64)


@dataclass(frozen=True)
class ArgMax(_ArgReduce, Op):
    """Index (i64) of the largest element along `axis`; ties give the first (or last) one."""


@dataclass(frozen=True)
class ArgMin(_ArgReduce, Op):
    """Index (i64) of the smallest element along `axis`; ties give the first (or last) one."""


@dataclass(frozen=True)
class CumSum(Op):
    """Running sum along `axis`, keeping the dtype.

    `exclusive`: element i sums the elements before i (the first is 0); `reverse`: sums run
    from the end of the axis.
    """

    axis: int
    exclusive: bool = False
    reverse: bool = False

    def infer(self, inputs):
        (x,) = inputs
        if x.rank == 0 or x.dtype is DType.BOOL:
            raise ShapeError(f"CumSum: needs a numeric tensor of rank >= 1, got {x}")
        try:
            normalize_axis(self.axis, x.rank)
        except ShapeError as err:
            raise ShapeError(f"CumSum: {err}") from None
        return x


@dataclass(frozen=True)
class TopK(Op):
    """The `k` largest (or smallest) elements along `axis` -> (values, indices i64).

    Equal values are ordered lower index first (ONNX). Results are always sorted, which
    `sorted=False` permits, so the attribute only records the model's request.
    """

    k: int
    axis: int = -1
    largest: bool = True
    sorted: bool = True

    def infer(self, inputs):
        (x,) = inputs
        if x.rank == 0:
            raise ShapeError(f"TopK: needs rank >= 1, got {x}")
        try:
            axis = normalize_axis(self.axis, x.rank)
        except ShapeError as err:
            raise ShapeError(f"TopK: {err}") from None
        size = x.dims[axis]
        if self.k < 0 or isinstance(size, int) and self.k > size:
            raise ShapeError(f"TopK: k must be in [0, {size}] for axis {self.axis} of {x}, "
                             f"got {self.k}")
        dims = [*x.dims[:axis], self.k, *x.dims[axis + 1:]]
        return Shape(dims, x.dtype), Shape(dims, DType.I64)
