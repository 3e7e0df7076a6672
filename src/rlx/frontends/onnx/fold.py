"""Import-time shape arithmetic: small integer computations on constants, evaluated.

Exporters and ONNX function bodies compute shapes at run time (Shape -> Gather -> Concat ->
Reshape). When the inputs of such a step are already known, the importer evaluates it, as
ONNX's own shape inference propagates data: a Reshape whose target comes from static dims
gets its static form, inferred shapes stay exact, and an If on a known condition keeps only
its taken branch. Only integer and boolean tensors of at most `FOLD_LIMIT` elements are
evaluated (and int -> float casts of them), with the IR's own helpers where the semantics
are subtle (slices, reshape targets); everything else is left to the bake's folding.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from rlx.ir import (
    Binary, BinaryOp, Cast, Compare, CompareOp, Concat, Expand, Flatten, Gather, Identity, Logical,
    LogicalOp, Not, Range, Reduce, ReduceOp, Reshape, Shape, Slice, Squeeze, Transpose, Unary,
    Unsqueeze, Where,
)
from rlx.ir.ops.base import Op
from rlx.ir.ops.elementwise import Activation
from rlx.ir.ops.shaping import onnx_slice, reshape_target, slice_plan

__all__ = ["FOLD_LIMIT", "fold"]

FOLD_LIMIT = 1024
"""Largest tensor (elements) the importer evaluates."""


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.any(b == 0):
        raise ZeroDivisionError
    return np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))  # truncates toward zero


def _mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.any(b == 0):
        raise ZeroDivisionError
    return np.mod(a, b)


_BINARY: dict[BinaryOp, Callable] = {
    BinaryOp.ADD: np.add, BinaryOp.SUB: np.subtract, BinaryOp.MUL: np.multiply,
    BinaryOp.DIV: _divide, BinaryOp.MOD: _mod, BinaryOp.MAX: np.maximum,
    BinaryOp.MIN: np.minimum,
}
_COMPARE = {CompareOp.EQ: np.equal, CompareOp.NE: np.not_equal, CompareOp.LT: np.less,
            CompareOp.LE: np.less_equal, CompareOp.GT: np.greater,
            CompareOp.GE: np.greater_equal}
_LOGICAL = {LogicalOp.AND: np.logical_and, LogicalOp.OR: np.logical_or,
            LogicalOp.XOR: np.logical_xor}
_REDUCE = {ReduceOp.SUM: np.sum, ReduceOp.PROD: np.prod, ReduceOp.MAX: np.max,
           ReduceOp.MIN: np.min}
_UNARY = {Activation.NEG: np.negative, Activation.ABS: np.abs}


def _slice(op: Slice, x: np.ndarray) -> np.ndarray:
    index = [slice(None)] * x.ndim
    for axis, start, end, step in slice_plan(x.ndim, op.starts, op.ends, op.axes, op.steps):
        index[axis] = onnx_slice(start, end, step, x.shape[axis])
    return x[tuple(index)]


def _flatten(op: Flatten, x: np.ndarray) -> np.ndarray:
    axis = op.axis + x.ndim if op.axis < 0 else op.axis
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


def _reduce(op: Reduce, x: np.ndarray) -> np.ndarray:
    if op.axes == ():
        raise ValueError("a per-element reduction is not shape arithmetic")
    axes = op.normalized_axes(x.ndim)
    return _REDUCE[op.op](x, axis=axes, keepdims=op.keepdims)


_RULES: dict[type, Callable[..., np.ndarray]] = {
    Binary: lambda op, a, b: _BINARY[op.op](a, b),
    Compare: lambda op, a, b: _COMPARE[op.op](a, b),
    Logical: lambda op, a, b: _LOGICAL[op.op](a, b),
    Not: lambda op, x: np.logical_not(x),
    Where: lambda op, c, a, b: np.where(c, a, b),
    Unary: lambda op, x: _UNARY[op.kind](x),
    Cast: lambda op, x: x.astype(op.to.numpy),
    Identity: lambda op, x: x,
    Concat: lambda op, *xs: np.concatenate(xs, axis=op.axis),
    Gather: lambda op, x, i: np.take(x, i, axis=op.axis),
    Reshape: lambda op, x: x.reshape(reshape_target(x.shape, op.shape, op.allowzero)),
    Unsqueeze: lambda op, x: np.expand_dims(x, op.axes),
    Squeeze: lambda op, x: np.squeeze(x, axis=op.axes),
    Slice: _slice,
    Transpose: lambda op, x: x.transpose(op.resolved_perm(x.ndim)),
    Flatten: _flatten,
    Expand: lambda op, x: np.broadcast_to(x, np.broadcast_shapes(x.shape, op.shape)),
    Range: lambda op, a, b, d: np.arange(a, b, d, dtype=a.dtype),
    Reduce: _reduce,
}


def _arithmetic(value: np.ndarray) -> bool:
    return value.dtype.kind in "iub" and value.size <= FOLD_LIMIT


def fold(op: Op, values: Sequence[np.ndarray], shape: Shape) -> np.ndarray | None:
    """The value of `op` on known `values`, or None when it is not import-time arithmetic."""
    rule = _RULES.get(type(op))
    if rule is None or isinstance(shape, tuple) or not all(map(_arithmetic, values)):
        return None
    if isinstance(op, (Reshape, Expand)) and op.shape is None or \
            isinstance(op, Slice) and op.starts is None or \
            isinstance(op, (Squeeze, Unsqueeze)) and op.axes is None and len(values) > 1:
        return None  # dynamic forms take their operands as inputs: leave them
    if shape.numel is not None and shape.numel > FOLD_LIMIT:
        return None
    try:
        with np.errstate(all="raise"):
            out = np.asarray(rule(op, *values))
    except (ArithmeticError, ValueError, IndexError, KeyError, TypeError):
        return None
    if out.size > FOLD_LIMIT or out.ndim != shape.rank or any(
            isinstance(d, int) and d != n for d, n in zip(shape.dims, out.shape)):
        return None
    return out.astype(shape.dtype.numpy, copy=False)
