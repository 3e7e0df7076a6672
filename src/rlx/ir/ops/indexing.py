"""Index ops with ONNX semantics: gathers and scatters of single elements or index
tuples, one-hot codes, masks (NonZero, Compress, Trilu).

A family of their own, apart from `rlx.ir.ops.shaping`: few graphs have them (a language
model's attention mask, a detector's post-processing), and a graph without them imports
neither these classes nor their kernels (issue 35). Data-dependent sizes (NonZero,
Compress, OneHot's depth) are `UNKNOWN`.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import ClassVar

from rlx.ir.dtype import DType
from rlx.ir.ops.base import Op, expect_dtype, op_axis
from rlx.ir.ops.shaping import (
    check_index_dtype,
    check_min_rank,
    dims_mismatch,
    dims_product,
    is_known,
    op_error,
)
from rlx.ir.shape import UNKNOWN, Dim, Shape
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = ["ScatterReduction", "GatherElements", "GatherND", "ScatterND", "ScatterElements",
           "OneHot", "Trilu", "NonZero", "Compress"]


class ScatterReduction(enum.Enum):
    """How ScatterND / ScatterElements combine an update with the value already there."""

    NONE = "none"
    ADD = "add"
    MUL = "mul"
    MAX = "max"
    MIN = "min"


def _elements_check(op: Op, data: Shape, indices: Shape, axis: int) -> int:
    """Shared checks of GatherElements / ScatterElements; returns the normalised axis."""
    check_min_rank(op, data, 1, "data")
    check_index_dtype(op, indices)
    axis = op_axis(op, axis, data.rank)
    if indices.rank != data.rank:
        raise op_error(op, f"indices {indices} must have the rank of data {data}")
    for i, (d, n) in enumerate(zip(data.dims, indices.dims)):
        if i != axis and is_known(d) and is_known(n) and n > d:
            raise op_error(op, f"indices {indices} exceed data {data} on axis {i}")
    return axis


@dataclass(frozen=True)
class GatherElements(Op):
    """ONNX GatherElements: `out[..i..] = data[..indices[..i..]..]` along `axis`."""

    axis: int = 0
    arity: ClassVar = (2, 2)

    def infer(self, inputs):
        data, indices = inputs
        _elements_check(self, data, indices, self.axis)
        return indices.with_dtype(data.dtype)


def _nd_tuple_len(op: Op, data: Shape, indices: Shape, batch_dims: int) -> int:
    """Shared checks of GatherND / ScatterND: the static length of each index tuple."""
    check_index_dtype(op, indices)
    check_min_rank(op, indices, batch_dims + 1, "indices")
    m = indices.dims[-1]
    if not isinstance(m, int):
        raise op_error(op, f"the last dim of indices {indices} must be static")
    if not 1 <= m <= data.rank - batch_dims:
        raise op_error(op, f"index tuples of length {m} do not fit data {data}"
                        f"{f' after {batch_dims} batch dims' if batch_dims else ''}")
    for i in range(batch_dims):
        if dims_mismatch(data.dims[i], indices.dims[i]):
            raise op_error(op, f"batch dim {i} differs: data {data}, indices {indices}")
    return m


@dataclass(frozen=True)
class GatherND(Op):
    """ONNX GatherND: index tuples in the last dim of `indices` pick slices of `data`."""

    batch_dims: int = 0
    arity: ClassVar = (2, 2)

    def infer(self, inputs):
        data, indices = inputs
        if self.batch_dims < 0:
            raise op_error(self, f"batch_dims {self.batch_dims} is negative")
        m = _nd_tuple_len(self, data, indices, self.batch_dims)
        return data.with_dims((*indices.dims[:-1], *data.dims[self.batch_dims + m:]))


def _check_updates(op: Op, data: Shape, updates: Shape, want: Sequence[Dim]) -> None:
    expect_dtype(op, [data, updates])
    if len(want) != updates.rank or any(map(dims_mismatch, want, updates.dims)):
        raise op_error(op, f"updates {updates} must have dims {list(want)}")


@dataclass(frozen=True)
class ScatterND(Op):
    """ONNX ScatterND `[data, indices, updates]`: a copy of data with slices replaced or
    combined (`reduction`) at the index tuples."""

    reduction: ScatterReduction = ScatterReduction.NONE
    arity: ClassVar = (3, 3)

    def infer(self, inputs):
        data, indices, updates = inputs
        m = _nd_tuple_len(self, data, indices, 0)
        _check_updates(self, data, updates, (*indices.dims[:-1], *data.dims[m:]))
        return data


@dataclass(frozen=True)
class ScatterElements(Op):
    """ONNX ScatterElements `[data, indices, updates]`: the inverse of GatherElements."""

    axis: int = 0
    reduction: ScatterReduction = ScatterReduction.NONE
    arity: ClassVar = (3, 3)

    def infer(self, inputs):
        data, indices, updates = inputs
        _elements_check(self, data, indices, self.axis)
        _check_updates(self, data, updates, indices.dims)
        return data


@dataclass(frozen=True)
class OneHot(Op):
    """ONNX OneHot `[indices, depth, values=(off, on)]`: a new axis of length depth (run
    time, so UNKNOWN) at `axis`; negative indices count from depth."""

    axis: int = -1
    arity: ClassVar = (3, 3)

    def infer(self, inputs):
        indices, depth, values = inputs
        if indices.dtype is DType.BOOL or depth.dtype is DType.BOOL:
            raise op_error(self, f"indices and depth must be numeric, got {indices}, {depth}")
        if depth.rank > 1 or dims_mismatch(dims_product(depth.dims), 1):
            raise op_error(self, f"depth must hold one value, got {depth}")
        if values.rank != 1 or dims_mismatch(values.dims[0], 2):
            raise op_error(self, f"values must be [off, on], got {values}")
        axis = op_axis(self, self.axis, indices.rank + 1)
        dims = list(indices.dims)
        dims.insert(axis, UNKNOWN)
        return Shape(dims, values.dtype)


# -- masks -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Trilu(Op):
    """Upper (or lower) triangle of the last two axes, from diagonal `k`; the rest zeroed."""

    upper: bool = True
    k: int = 0

    def infer(self, inputs):
        (x,) = inputs
        check_min_rank(self, x, 2)
        return x


@dataclass(frozen=True)
class NonZero(Op):
    """Coordinates of the non-zero elements: i64 `[rank, count]` (count data-dependent)."""

    def infer(self, inputs):
        return Shape((inputs[0].rank, UNKNOWN), DType.I64)


@dataclass(frozen=True)
class Compress(Op):
    """ONNX Compress `[x, cond]`: keep the slices along `axis` where the 1-D bool cond is
    true (x flattened when axis is None); the kept length is data-dependent."""

    axis: int | None = None
    arity: ClassVar = (2, 2)

    def infer(self, inputs):
        x, cond = inputs
        if cond.rank != 1 or cond.dtype is not DType.BOOL:
            raise op_error(self, f"condition must be a 1-D bool tensor, got {cond}")
        if self.axis is None:
            return x.with_dims((UNKNOWN,))
        check_min_rank(self, x, 1)
        axis = op_axis(self, self.axis, x.rank)
        return x.with_dims((*x.dims[:axis], UNKNOWN, *x.dims[axis + 1:]))
