"""Import-time shape arithmetic: small integer computations on constants, evaluated.

Exporters and ONNX function bodies compute shapes at run time (Shape -> Gather -> Concat ->
Reshape). When the inputs of such a step are already known, the importer evaluates it, as
ONNX's own shape inference propagates data: a Reshape whose target comes from static dims
gets its static form, inferred shapes stay exact, and an If on a known condition keeps only
its taken branch. Only integer and boolean tensors of at most `FOLD_LIMIT` elements are
evaluated (and int -> float casts of them), by the same kernels the runtime and the bake's
constant folding run (`rlx.kernels`); everything else is left to the bake's folding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from rlx.errors import RlxError
from rlx.ir import (
    Binary,
    BinaryOp,
    Cast,
    Compare,
    Concat,
    Expand,
    Flatten,
    Gather,
    Identity,
    Logical,
    Not,
    Range,
    Reduce,
    ReduceOp,
    Reshape,
    Shape,
    Slice,
    Squeeze,
    Transpose,
    Unary,
    Unsqueeze,
    Where,
)
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.base import Op
from rlx.ir.ops.elementwise import Activation
from rlx.ir.rewrite import constant_value
from rlx.kernels import KERNELS

__all__ = ["FOLD_LIMIT", "evaluated", "fold"]

FOLD_LIMIT = 1024
"""Largest tensor (elements) the importer evaluates."""


def _always(op: Op) -> bool:
    return True


_BINARY = {BinaryOp.ADD, BinaryOp.SUB, BinaryOp.MUL, BinaryOp.DIV, BinaryOp.MOD, BinaryOp.MAX,
           BinaryOp.MIN}
_REDUCE = {ReduceOp.SUM, ReduceOp.PROD, ReduceOp.MAX, ReduceOp.MIN}

# Which ops are shape arithmetic, and so evaluated at import (the values come from the
# kernels, `rlx.kernels`: each op's semantics are written once, there).
_ARITHMETIC: dict[type[Op], Callable[..., bool]] = {
    Binary: lambda op: op.op in _BINARY,
    Unary: lambda op: op.kind in (Activation.NEG, Activation.ABS),
    Reduce: lambda op: op.op in _REDUCE and op.axes != (),  # () is per element, not a shape
    **dict.fromkeys((Compare, Logical, Not, Where, Cast, Identity, Concat, Gather, Reshape,
                     Unsqueeze, Squeeze, Slice, Transpose, Flatten, Expand, Range), _always),
}


def _arithmetic(value: np.ndarray) -> bool:
    return value.dtype.kind in "iub" and value.size <= FOLD_LIMIT


def _dynamic(op: Op, values: Sequence[np.ndarray]) -> bool:
    """Whether `op` is in a form that takes its operands (shape, starts, axes) as inputs."""
    return (isinstance(op, (Reshape, Expand)) and op.shape is None
            or isinstance(op, Slice) and op.starts is None
            or isinstance(op, (Squeeze, Unsqueeze)) and op.axes is None and len(values) > 1)


def fold(op: Op, values: Sequence[np.ndarray], shape: Shape) -> np.ndarray | None:
    """The value of `op` on known `values`, or None when it is not import-time arithmetic."""
    is_arithmetic = _ARITHMETIC.get(type(op))
    kernel = KERNELS.get(type(op))
    if is_arithmetic is None or kernel is None or not is_arithmetic(op) \
            or isinstance(shape, tuple) or not all(map(_arithmetic, values)):
        return None
    if _dynamic(op, values):
        return None  # left as they are
    if shape.numel is not None and shape.numel > FOLD_LIMIT:
        return None
    node = Node(-1, op, tuple(range(len(values))), shape)
    try:
        with np.errstate(all="raise"):
            out = np.asarray(kernel(node, *values))
    except (ArithmeticError, ValueError, IndexError, KeyError, TypeError, RlxError):
        return None  # the runtime will meet (and report) the same values
    if out.size > FOLD_LIMIT or out.ndim != shape.rank or any(
            isinstance(d, int) and d != n for d, n in zip(shape.dims, out.shape)):
        return None
    return out.astype(shape.dtype.numpy, copy=False)


def evaluated(graph: Graph, node_id: int) -> np.ndarray | None:
    """The value of `node_id` when it depends on constants only, computed now by the kernels
    (any dtype, any size), or None. For a converter that wants a float table computed once,
    in the runtime's arithmetic, rather than in whatever an engine rewrites it to."""
    cone, stack = set(), [node_id]
    while stack:
        i = stack.pop()
        if i not in cone:
            cone.add(i)
            if constant_value(graph.node(i)) is None:
                stack.extend(graph.node(i).inputs)
    values: dict[int, np.ndarray] = {}
    for i in sorted(cone):  # node ids are in topological order
        node = graph.node(i)
        known = constant_value(node)
        if known is None:
            kernel = KERNELS.get(type(node.op))
            if kernel is None or not node.inputs or node.is_tuple:
                return None  # an input, or an op without a kernel
            out = np.asarray(kernel(node, *(values[j] for j in node.inputs)))
            known = out.astype(node.tensor_shape.dtype.numpy, copy=False)
        values[i] = known
    return values[node_id]
