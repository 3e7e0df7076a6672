"""Unique: sort, mark where the sorted values change, and read everything off the marks.

The slices along `axis` (or the single elements without one) become rows of a matrix,
sorted lexicographically by stable TopK passes from the last column to the first. A row
that differs from the one before starts a group; the groups give the unique rows, the first
occurrence of each (a stable sort keeps it first), their counts, and each input row's group.
Without `sorted` the groups are put back in order of first occurrence.
"""

from __future__ import annotations

import numpy as np

from rlx.ir import (
    CompareOp,
    Compress,
    Concat,
    CumSum,
    DType,
    Range,
    ReduceOp,
    ScatterElements,
    TopK,
)
from rlx.onnx.emit import Emitter
from rlx.onnx.node import NodeContext
from rlx.onnx.registry import converter

__all__ = ["unique"]


def _arange(s: Emitter, count: int) -> int:
    """[0, count) for a rank-0 i64 node `count`."""
    return s.emit(Range(), s.scalar(0, DType.I64), count, s.scalar(1, DType.I64))


def _ascending(s: Emitter, keys: int, count: int) -> int:
    """Indices that sort the 1-D `keys` ascending, ties kept in index order."""
    return s.parts(s.emit(TopK(None, 0, False, True), keys, count))[1]


def _lexicographic_order(s: Emitter, rows: int, count: int, columns: int) -> int:
    """Stable row order sorting [n, columns] rows by their first column, then the next..."""
    order = _arange(s, count)
    for column in reversed(range(columns)):
        keys = s.gather(s.take(rows, column, 1), order)
        order = s.gather(order, _ascending(s, keys, count))
    return order


@converter("Unique")
def unique(n: NodeContext):
    s = n.s
    x = n.input(0)
    shape = s.shape(x)
    axis = n.attr("axis")
    if axis is None:
        rows = s.reshape(x, (-1, 1))
        slice_dims: tuple = ()
    else:
        axis %= shape.rank
        rest = [a for a in range(shape.rank) if a != axis]
        slice_dims = tuple(shape.dims[a] for a in rest)
        if not all(isinstance(d, int) for d in slice_dims):
            raise n.fail(f"the slices along axis {axis} must have static dims, got {shape}")
        rows = s.reshape(s.transpose(x, [axis, *rest]), (-1, int(np.prod(slice_dims))))
    columns = int(s.shape(rows).dims[1])  # static: the slices are (checked above)
    count = s.dim(rows, 0)
    order = _lexicographic_order(s, rows, count, columns)
    ranked = s.gather(rows, order)
    # a row starts a group when it differs from the row before it
    differs = s.compare(CompareOp.NE, s.slice(ranked, (1,), (2**31 - 1,), (0,)),
                        s.slice(ranked, (0,), (-1,), (0,)))
    starts = s.emit(Concat(0), s.const(np.ones(1, bool)),
                    s.reduce(ReduceOp.MAX, differs, (1,), keepdims=False))
    group = s.sub(s.emit(CumSum(0), s.cast(starts, DType.I64)), s.scalar(1, DType.I64))
    firsts = s.emit(Compress(0), _arange(s, count), starts)  # sorted positions of groups
    values = s.gather(ranked, firsts)
    first_index = s.gather(order, firsts)
    ends = s.emit(Concat(0), s.slice(firsts, (1,), (2**31 - 1,), (0,)), s.reshape(count, (1,)))
    counts = s.sub(ends, firsts)
    inverse = s.emit(ScatterElements(0), s.full_like(order, 0), order, group)
    if not n.attr("sorted", 1):
        groups = s.dim(firsts, 0)
        by_first = _ascending(s, first_index, groups)
        values, first_index, counts = (s.gather(v, by_first)
                                       for v in (values, first_index, counts))
        renumber = s.emit(ScatterElements(0), s.full_like(by_first, 0), by_first,
                          _arange(s, groups))
        inverse = s.gather(renumber, inverse)
    if axis is None:
        values = s.reshape(values, (-1,))
    else:
        values = s.reshape(values, (-1, *slice_dims))
        back = [0] * shape.rank
        for position, a in enumerate([axis, *rest]):
            back[a] = position
        values = s.transpose(values, back)
    return [values, first_index, inverse, counts]
