"""`Emitter`: small helpers that append rlx IR nodes, used by every converter.

They know nothing about ONNX. Shape-like operands are accepted either as Python tuples or
as node ids; a helper picks an op's static form when the operand is known (a tuple or a
Constant node) and its dynamic form otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from rlx.ir import (
    Activation,
    Binary,
    BinaryOp,
    Cast,
    Compare,
    CompareOp,
    Concat,
    DType,
    Expand,
    Fill,
    Flatten,
    Gather,
    Graph,
    Logical,
    LogicalOp,
    MatMul,
    Not,
    Reduce,
    ReduceOp,
    Reshape,
    Shape,
    ShapeOf,
    Slice,
    Squeeze,
    Transpose,
    TupleGet,
    Unary,
    Unsqueeze,
    Where,
)
from rlx.ir.ops.base import Op
from rlx.ir.rewrite import constant_value
from rlx.onnx.fold import FOLD_LIMIT, fold

ShapeArg = Sequence[int] | int
"""A shape-like operand: static values, or the id of a 1-D i64 node holding them."""

__all__ = ["Emitter", "ShapeArg"]


class Emitter:
    """Graph-building shorthands over `self.graph`."""

    graph: Graph

    # -- basics ------------------------------------------------------------------------------
    def emit(self, op: Op, *inputs: int, shape=None) -> int:
        """Append `op`; integer arithmetic on known values becomes a Constant instead."""
        if inputs and shape is None:
            values = [v for v in (self.value(i) for i in inputs) if v is not None]
            if len(values) == len(inputs):
                inferred = self.graph.infer(op, inputs)
                folded = None if isinstance(inferred, tuple) else fold(op, values, inferred)
                if folded is not None and not isinstance(inferred, tuple):
                    # the exact shape: inference may have had "?"
                    return self.graph.constant(folded, inferred.with_dims(folded.shape))
        return self.graph.add_node(op, inputs, shape)

    def parts(self, node_id: int, count: int | None = None) -> list[int]:
        """`TupleGet` nodes for the first `count` (default: all) outputs of a tuple node."""
        shapes = self.graph.node(node_id).shape
        assert isinstance(shapes, tuple), "parts of a tuple-valued node"
        n = len(shapes) if count is None else count
        return [self.emit(TupleGet(i), node_id) for i in range(n)]

    def shape(self, node_id: int) -> Shape:
        return self.graph.node(node_id).tensor_shape

    def dtype(self, node_id: int) -> DType:
        return self.shape(node_id).dtype

    def rank(self, node_id: int) -> int:
        return self.shape(node_id).rank

    def value(self, node_id: int) -> np.ndarray | None:
        """The values of a Constant node, or None when known only at run time."""
        return constant_value(self.graph.node(node_id))

    def const(self, value, dtype: DType | None = None) -> int:
        array = np.asarray(value, dtype=None if dtype is None else dtype.numpy)
        # (np.ascontiguousarray would turn a rank-0 value into rank 1)
        return self.graph.constant(array if array.flags.c_contiguous else array.copy())

    def scalar(self, value, dtype: DType) -> int:
        """A rank-0 constant of `dtype`."""
        return self.const(np.asarray(value).astype(dtype.numpy), dtype)

    def like(self, value, node_id: int) -> int:
        """A rank-0 constant of `node_id`'s dtype."""
        return self.scalar(value, self.dtype(node_id))

    def ints(self, arg: ShapeArg | None) -> tuple[int, ...] | None:
        """The static values of a shape-like operand, or None."""
        if arg is None or not isinstance(arg, (int, np.integer)):
            return None if arg is None else tuple(int(v) for v in arg)
        value = self.value(int(arg))
        return None if value is None else tuple(int(v) for v in value.reshape(-1))

    def shape_tensor(self, arg: ShapeArg) -> int:
        """A shape-like operand as a node (a 1-D i64 Constant when static)."""
        if isinstance(arg, (int, np.integer)):
            return int(arg)
        return self.const(np.asarray(arg, np.int64).reshape(-1))

    # -- elementwise -------------------------------------------------------------------------
    def binary(self, op: BinaryOp, a: int, b: int) -> int:
        return self.emit(Binary(op), a, b)

    def add(self, a: int, b: int) -> int:
        return self.binary(BinaryOp.ADD, a, b)

    def sub(self, a: int, b: int) -> int:
        return self.binary(BinaryOp.SUB, a, b)

    def mul(self, a: int, b: int) -> int:
        return self.binary(BinaryOp.MUL, a, b)

    def div(self, a: int, b: int) -> int:
        return self.binary(BinaryOp.DIV, a, b)

    def unary(self, kind: Activation, x: int, alpha: float | None = None,
              beta: float | None = None) -> int:
        return self.emit(Unary(kind, alpha, beta), x)

    def compare(self, op: CompareOp, a: int, b: int) -> int:
        return self.emit(Compare(op), a, b)

    def logical(self, op: LogicalOp, a: int, b: int) -> int:
        return self.emit(Logical(op), a, b)

    def not_(self, x: int) -> int:
        return self.emit(Not(), x)

    def where(self, cond: int, a: int, b: int) -> int:
        return self.emit(Where(), cond, a, b)

    def cast(self, x: int, dtype: DType) -> int:
        return x if self.dtype(x) == dtype else self.emit(Cast(dtype), x)

    def matmul(self, a: int, b: int, *, mlas_blocks: bool = False) -> int:
        return self.emit(MatMul(mlas_blocks=mlas_blocks), a, b)

    def reduce(self, op: ReduceOp, x: int, axes: Sequence[int] | None,
               keepdims: bool = True) -> int:
        return self.emit(Reduce(op, None if axes is None else tuple(axes), keepdims), x)

    # -- shapes ------------------------------------------------------------------------------
    def shape_of(self, x: int, start: int = 0, end: int | None = None) -> int:
        """x's dims [start:end] as a 1-D i64: a Constant when they are static."""
        dims = self.shape(x).dims[start:end]
        if all(isinstance(d, int) for d in dims):
            return self.const(np.asarray(dims, np.int64).reshape(-1))
        return self.emit(ShapeOf(start, end), x)

    def dim(self, x: int, axis: int) -> int:
        """Dim `axis` of x as a rank-0 i64 node."""
        axis %= self.rank(x)
        return self.reshape(self.shape_of(x, axis, axis + 1), ())

    def reshape(self, x: int, target: ShapeArg, allowzero: bool = False) -> int:
        static = self.ints(target)
        if static is not None:
            if tuple(self.shape(x).dims) == static and -1 not in static:
                return x
            return self.emit(Reshape(static, allowzero), x)
        return self.emit(Reshape(None, allowzero), x, self.shape_tensor(target))

    def expand(self, x: int, target: ShapeArg) -> int:
        static = self.ints(target)
        if static is not None:
            return self.emit(Expand(static), x)
        return self.emit(Expand(None), x, self.shape_tensor(target))

    def fill(self, target: ShapeArg, value: float, dtype: DType) -> int:
        """A tensor of `target` shape filled with `value` (finite or not)."""
        static = self.ints(target)
        if not np.isfinite(value) or float(value) != value:
            # Fill's float attribute must stay JSON-clean and exact: a non-finite value, or
            # an integer a float cannot hold, is an expanded scalar constant instead
            return self.expand(self.scalar(value, dtype), target if static is None else static)
        if static is not None:
            if not dtype.is_float and math.prod(static) <= FOLD_LIMIT:
                # small integer fills are shape arithmetic: keep them known (see `fold`)
                return self.const(np.full(static, value, dtype.numpy))
            return self.emit(Fill(float(value), dtype, static))
        return self.emit(Fill(float(value), dtype, None), self.shape_tensor(target))

    def full_like(self, x: int, value: float, dtype: DType | None = None) -> int:
        return self.fill(self.shape_of(x), value, dtype or self.dtype(x))

    def transpose(self, x: int, perm: Sequence[int]) -> int:
        perm = tuple(int(p) for p in perm)
        return x if perm == tuple(range(len(perm))) else self.emit(Transpose(perm), x)

    def unsqueeze(self, x: int, axes: Sequence[int]) -> int:
        return self.emit(Unsqueeze(tuple(int(a) for a in axes)), x) if axes else x

    def squeeze(self, x: int, axes: Sequence[int]) -> int:
        return self.emit(Squeeze(tuple(int(a) for a in axes)), x) if axes else x

    def concat(self, ids: Sequence[int], axis: int) -> int:
        return ids[0] if len(ids) == 1 else self.emit(Concat(axis), *ids)

    def slice(self, x: int, starts: Sequence[int], ends: Sequence[int],
              axes: Sequence[int], steps: Sequence[int] | None = None) -> int:
        def ints(values):
            return tuple(int(v) for v in values)

        return self.emit(Slice(ints(starts), ints(ends), ints(axes),
                               None if steps is None else ints(steps)), x)

    def gather(self, x: int, indices: int, axis: int = 0) -> int:
        return self.emit(Gather(axis), x, indices)

    def take(self, x: int, index: int, axis: int) -> int:
        """x[..., index, ...] along `axis`, dropping the axis (a static index)."""
        return self.gather(x, self.scalar(index, DType.I64), axis)

    def to_2d(self, x: int, axis: int) -> tuple[int, ShapeArg]:
        """x flattened to [prod(dims[:axis]), prod(dims[axis:])], and x's shape to undo it."""
        return self.emit(Flatten(axis), x), self.shape_of(x)


class Builder(Emitter):
    """An `Emitter` over a graph of its own (subgraph bodies built by a converter)."""

    def __init__(self, name: str):
        self.graph = Graph(name)
