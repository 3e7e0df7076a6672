"""Reductions and scans: Reduce, ArgMax/ArgMin, CumSum, TopK, with ONNX semantics.

Axes are attributes (static), negative ones count from the end. ONNX passes `axes`, CumSum's
`axis` and TopK's `k` as tensor inputs since opset 13/18; the importer turns constant ones
into attributes. Operands known only at run time give the op's *dynamic form*: the attribute
is None and the operand is a second input (as the shape ops of `ops.shaping` do).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import ClassVar

from rlx.errors import ShapeError
from rlx.ir.dtype import DType
from rlx.ir.ops.base import Op, OpMixin, op_axis
from rlx.ir.shape import UNKNOWN, Dim, Shape, normalize_axis
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

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


def _operand(op: Op, inputs: Sequence[Shape], attr: str, what: str, vector: bool) -> bool:
    """Whether `op` runs in its dynamic form; checks the operand (1-D, or rank 0).

    Only Reduce may have neither (its axes None alone means every axis)."""
    dynamic = getattr(op, attr) is None and len(inputs) == 2
    if len(inputs) == 2 and not dynamic:
        raise ShapeError(f"{op.op_name}: {attr} is given as an attribute and as an input")
    if getattr(op, attr) is None and len(inputs) == 1 and not vector:
        raise ShapeError(f"{op.op_name}: {attr} is None, so it must be given as an input")
    if dynamic:
        operand = inputs[1]
        ok = operand.dtype in (DType.I32, DType.I64) and (
            operand.rank == 1 if vector else operand.rank == 0)
        if not ok:
            want = "a 1-D" if vector else "a rank-0"
            raise ShapeError(f"{op.op_name}: {what} must be {want} i32/i64 tensor, "
                             f"got {operand}")
    return dynamic


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

    Dynamic form `[x, axes]` (axes None): the axes come from a 1-D integer input; an empty
    one reduces every axis, or none with `noop_with_empty_axes` (ONNX's rule).
    """

    op: ReduceOp
    axes: tuple[int, ...] | None = None
    keepdims: bool = True
    noop_with_empty_axes: bool = False
    arity: ClassVar = (1, 2)

    def normalized_axes(self, rank: int) -> tuple[int, ...]:
        return tuple(range(rank)) if self.axes is None else _normalize_axes(self, self.axes, rank)

    def runtime_axes(self, axes, rank: int) -> tuple[int, ...]:
        """The dynamic form's axes from the values of its axes input."""
        values = [int(a) for a in axes]
        if not values:
            return () if self.noop_with_empty_axes else tuple(range(rank))
        return _normalize_axes(self, values, rank)

    def infer(self, inputs):
        x = inputs[0]
        dtype = x.dtype
        if (dtype is DType.BOOL and self.op not in _BOOL_OK) or (
            not dtype.is_float and self.op in _FLOAT_ONLY
        ):
            raise ShapeError(f"Reduce {self.op.value}: does not take {dtype} input")
        if _operand(self, inputs, "axes", "axes", vector=True):
            return x.with_dims(self._dynamic_dims(x, inputs[1].dims[0]))
        axes = self.normalized_axes(x.rank)
        return x.with_dims(_reduced_dims(x.dims, axes, self.keepdims))

    def _dynamic_dims(self, x: Shape, count: Dim) -> list[Dim]:
        """Output dims when which axes go is known only at run time."""
        if count == 0:
            empty = () if self.noop_with_empty_axes else tuple(range(x.rank))
            return _reduced_dims(x.dims, empty, self.keepdims)
        if self.keepdims:
            return [1 if d == 1 else UNKNOWN for d in x.dims]
        if not isinstance(count, int):
            raise ShapeError(f"Reduce {self.op.value}: without keepdims, the number of axes "
                             "must be static (it sets the output rank)")
        if count > x.rank:
            raise ShapeError(f"Reduce {self.op.value}: {count} axes for rank {x.rank}")
        return [UNKNOWN] * (x.rank - count)


@dataclass(frozen=True)
class _ArgReduce(OpMixin):
    """Fields and inference shared by ArgMax and ArgMin (a mixin, so not an op itself)."""

    axis: int = 0
    keepdims: bool = True
    select_last_index: bool = False  # among ties, the last index instead of the first

    def infer(self, inputs):
        (x,) = inputs
        name = type(self).__name__
        if x.rank == 0:
            raise ShapeError(f"{name}: needs rank >= 1, got a scalar")
        axis = op_axis(self, self.axis, x.rank)
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
    from the end of the axis. Dynamic form `[x, axis]` (axis None, a rank-0 integer input).
    """

    axis: int | None
    exclusive: bool = False
    reverse: bool = False
    arity: ClassVar = (1, 2)

    def infer(self, inputs):
        x = inputs[0]
        if x.rank == 0 or x.dtype is DType.BOOL:
            raise ShapeError(f"CumSum: needs a numeric tensor of rank >= 1, got {x}")
        if not _operand(self, inputs, "axis", "axis", vector=False):
            assert self.axis is not None  # the static form
            op_axis(self, self.axis, x.rank)
        return x


@dataclass(frozen=True)
class TopK(Op):
    """The `k` largest (or smallest) elements along `axis` -> (values, indices i64).

    Equal values are ordered lower index first (ONNX). Results are always sorted, which
    `sorted=False` permits, so the attribute only records the model's request. Dynamic
    form `[x, k]` (k None, a rank-0 integer input): the length along axis is UNKNOWN.
    """

    k: int | None
    axis: int = -1
    largest: bool = True
    sorted: bool = True
    arity: ClassVar = (1, 2)

    def infer(self, inputs):
        x = inputs[0]
        if x.rank == 0:
            raise ShapeError(f"TopK: needs rank >= 1, got {x}")
        axis = op_axis(self, self.axis, x.rank)
        size = x.dims[axis]
        dynamic = _operand(self, inputs, "k", "k", vector=False)
        k: Dim = UNKNOWN if dynamic or self.k is None else self.k
        if isinstance(k, int) and (k < 0 or isinstance(size, int) and k > size):
            raise ShapeError(f"TopK: k must be in [0, {size}] for axis {self.axis} of {x}, "
                             f"got {self.k}")
        dims = [*x.dims[:axis], k, *x.dims[axis + 1:]]
        return Shape(dims, x.dtype), Shape(dims, DType.I64)
