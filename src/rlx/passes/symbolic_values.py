"""Shape arithmetic on symbolic dims: what `Shape -> Gather -> Concat -> Reshape` computes.

Imported models compute shapes at run time, and with a symbolic dim (`batch`, `width`) the
values are not constants, so constant folding leaves the whole chain. Here each small
integer tensor of rank 0 or 1 gets a `SymValue`: its elements as `SymDim` expressions of the
graph's dims (a dim inference could not name is an opaque atom of the value it belongs to).
`symbolic_value` follows ShapeOf, Size, Gather, Slice, Concat, (Un)Squeeze, Reshape, Cast,
Identity and Add/Sub/Mul/Div; `reshape_target` and `expand_target` then spell a symbolic
target with ONNX's own placeholders (0 copies an input dim, one -1 is inferred, 1 keeps a
broadcast dim), which computes the same shape for every size the dims take, so the
Reshape or Expand becomes static and the arithmetic feeding it dead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rlx.ir.graph import Node
from rlx.ir.ops.base import Op
from rlx.ir.ops.elementwise import Binary, BinaryOp, Cast, Identity
from rlx.ir.ops.generators import ShapeOf, Size
from rlx.ir.ops.shaping import Gather, Reshape, Squeeze, Unsqueeze
from rlx.ir.ops.slicing import Concat, Slice, onnx_slice, slice_plan
from rlx.ir.rewrite import constant_value
from rlx.ir.shape import UNKNOWN, Dim, Shape
from rlx.ir.symbolic import SymDim

__all__ = ["SymValue", "constant_of", "dims_of", "expand_target", "reshape_target",
           "symbolic_value"]

MAX_ELEMENTS = 64
"""Longest integer vector followed (shapes, index lists)."""


@dataclass(frozen=True)
class SymValue:
    """An integer tensor of rank 0 (`scalar`) or 1, element by element."""

    items: tuple[SymDim, ...]
    scalar: bool = False

    @property
    def ints(self) -> tuple[int, ...] | None:
        values = [item.value for item in self.items]
        return None if None in values else tuple(v for v in values if v is not None)


def dims_of(node: Node) -> tuple[SymDim, ...]:
    """The node's dims as expressions; an UNKNOWN dim is an atom of this node and axis."""
    shape = node.tensor_shape
    return tuple(SymDim.of(d, f"{node.id}.{axis}") for axis, d in enumerate(shape.dims))


def symbolic_value(op: Op, inputs: Sequence[Node], shape: Shape,
                   known: Mapping[int, SymValue]) -> SymValue | None:
    """The value of a node computing `shape` by `op` over `inputs`, when it is a small
    integer tensor whose elements follow from the dims and values already `known`."""
    if not shape.dtype.is_int or shape.rank > 1:
        return None
    if isinstance(op, (ShapeOf, Size)):
        dims = dims_of(inputs[0])
        if isinstance(op, Size):
            return SymValue((_product(dims),), scalar=True)
        return SymValue(dims[op.start:op.end])
    values = [_value(node, known) for node in inputs]
    if any(v is None for v in values):
        return None
    rule = _RULES.get(type(op))
    try:
        out = rule(op, values) if rule is not None else None
    except (IndexError, ValueError, ZeroDivisionError):
        return None  # malformed arithmetic fails at run time, as before
    if out is None or out.scalar != (shape.rank == 0) or len(out.items) > MAX_ELEMENTS:
        return None
    return out


def _value(node: Node, known: Mapping[int, SymValue]) -> SymValue | None:
    if node.id in known:
        return known[node.id]
    shape = node.shape
    if not isinstance(shape, Shape) or not shape.dtype.is_int or shape.rank > 1 \
            or shape.numel is None or shape.numel > MAX_ELEMENTS:
        return None  # checked before anything is read: a weight may be large
    array = constant_value(node)
    if array is None or array.dtype.kind not in "iu" or array.ndim > 1 \
            or array.size > MAX_ELEMENTS:
        return None
    return SymValue(tuple(SymDim.const(int(v)) for v in array.reshape(-1)), array.ndim == 0)


def _product(items: Sequence[SymDim]) -> SymDim:
    out = SymDim.const(1)
    for item in items:
        out = out * item
    return out


# -- the rules, one per op ---------------------------------------------------------------------
def _same(op: Op, values: list[SymValue]) -> SymValue:
    return values[0]


def _gather(op: Gather, values: list[SymValue]) -> SymValue | None:
    data, indices = values
    picks = indices.ints
    if data.scalar or op.axis not in (0, -1) or picks is None:
        return None
    n = len(data.items)
    if any(not -n <= i < n for i in picks):
        return None
    return SymValue(tuple(data.items[i] for i in picks), indices.scalar)


def _unsqueeze(op: Unsqueeze, values: list[SymValue]) -> SymValue | None:
    x, *axes = values  # the dynamic form gives its axes as an input
    return SymValue(x.items) if x.scalar and len(op.axes or axes[0].items) == 1 else None


def _squeeze(op: Squeeze, values: list[SymValue]) -> SymValue | None:
    x = values[0]
    return SymValue(x.items, scalar=True) if len(x.items) == 1 and not x.scalar else None


def _reshape(op: Reshape, values: list[SymValue]) -> SymValue | None:
    if op.shape is None or len(values[0].items) != 1:
        return None  # the one reshape of shape arithmetic: a scalar to [1] or back
    return SymValue(values[0].items, scalar=len(op.shape) == 0)


def _concat(op: Concat, values: list[SymValue]) -> SymValue | None:
    if any(v.scalar for v in values):
        return None
    return SymValue(tuple(item for v in values for item in v.items))


def _slice(op: Slice, values: list[SymValue]) -> SymValue | None:
    x, *operands = values  # the dynamic form gives starts, ends, axes, steps as inputs
    bounds = [v.ints for v in operands]
    if x.scalar or None in bounds:
        return None
    starts, ends, axes, steps = (op.starts, op.ends, op.axes, op.steps) if not operands \
        else (*bounds, None, None)[:4]
    if starts is None or ends is None:
        return None
    [(_, start, end, step)] = slice_plan(1, starts, ends, axes, steps) or \
        [(0, 0, len(x.items), 1)]
    return SymValue(x.items[onnx_slice(start, end, step, len(x.items))])


def _binary(op: Binary, values: list[SymValue]) -> SymValue | None:
    a, b = values
    if len(a.items) != len(b.items) and 1 not in (len(a.items), len(b.items)):
        return None
    compute = _ARITHMETIC.get(op.op)
    if compute is None:
        return None
    n = max(len(a.items), len(b.items))
    items = []
    for i in range(n):
        out = compute(a.items[i % len(a.items)], b.items[i % len(b.items)])
        if out is None:
            return None
        items.append(out)
    return SymValue(tuple(items), a.scalar and b.scalar)


def _div(a: SymDim, b: SymDim) -> SymDim | None:
    divisor = b.value
    if divisor is None or divisor <= 0 or not a.nonnegative:
        return None  # truncation equals floor only for sizes divided by a positive int
    return a.floordiv(divisor)


_ARITHMETIC: dict[BinaryOp, Callable[[SymDim, SymDim], SymDim | None]] = {
    BinaryOp.ADD: lambda a, b: a + b,
    BinaryOp.SUB: lambda a, b: a - b,
    BinaryOp.MUL: lambda a, b: a * b,
    BinaryOp.DIV: _div,
}

_RULES: dict[type, Callable[..., SymValue | None]] = {
    Identity: _same,
    Cast: _same,
    Gather: _gather,
    Unsqueeze: _unsqueeze,
    Squeeze: _squeeze,
    Reshape: _reshape,
    Concat: _concat,
    Slice: _slice,
    Binary: _binary,
}


# -- targets spelled with placeholders ---------------------------------------------------------
def reshape_target(x: Node, target: SymValue, allowzero: bool
                   ) -> tuple[tuple[int, ...], list[Dim]] | None:
    """(static target, output dims) for `Reshape(x, target)`: known sizes as they are, a
    symbolic size equal to x's dim at that position as 0 (unless `allowzero`), and one other
    symbolic size as -1; None when more than one size is left."""
    dims = dims_of(x)
    out: list[int] = []
    shape: list[Dim] = []
    for axis, item in enumerate(target.items):
        value = item.value
        if value is not None:
            out.append(value)
            copied = value == 0 and not allowzero and axis < len(dims)
            shape.append(x.tensor_shape.dims[axis] if copied else max(value, 0) or UNKNOWN)
        elif not allowzero and axis < len(dims) and item == dims[axis]:
            out.append(0)
            shape.append(x.tensor_shape.dims[axis])
        elif -1 not in out:
            out.append(-1)
            shape.append(item.dim())
        else:
            return None
    if -1 in out and (allowzero and 0 in out or list(out).count(-1) > 1):
        return None
    return tuple(out), shape


def expand_target(x: Node, target: SymValue) -> tuple[int, ...] | None:
    """The static shape for `Expand(x, target)`: a symbolic size equal to x's aligned dim
    is 1 (broadcasting keeps x's dim); None when another size is symbolic."""
    dims = dims_of(x)
    lead = len(target.items) - len(dims)
    out = []
    for j, item in enumerate(target.items):
        value = item.value
        if value is None and j >= lead and item == dims[j - lead]:
            value = 1
        if value is None:
            return None
        out.append(value)
    return tuple(out)


def constant_of(value: SymValue, shape: Shape) -> np.ndarray | None:
    """The array of a fully known value, of `shape`'s dtype."""
    ints = value.ints
    if ints is None:
        return None
    array = np.array(ints, dtype=shape.dtype.numpy)
    return array.reshape(()) if value.scalar else array
