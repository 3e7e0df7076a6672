"""Reduction and scan kernels: Reduce, ArgMax/ArgMin, CumSum, TopK.

Half-precision inputs (f16, bf16) are computed in float32 and rounded once at the end: a sum
of many f16 values loses digits and the square of an ordinary f16 value can overflow.
Integer inputs stay integers (sums wrap like ONNX / C).
"""

from __future__ import annotations

import math

import numpy as np

from rlx.ir.ops.reduce import ArgMax, ArgMin, CumSum, Reduce, ReduceOp, TopK
from rlx.ir.shape import normalize_axis
from rlx.kernels.elementwise import quiet, typed, widen_half
from rlx.kernels.registry import kernel, staged

__all__ = ["Axes", "build_reduce", "arg_reduce", "cumsum", "top_k"]

Axes = tuple[int, ...]


def _along(axis: int, start: int | None, stop: int | None) -> tuple[slice, ...]:
    """Index selecting `start:stop` on `axis` and everything on the axes before it."""
    return (slice(None),) * axis + (slice(start, stop),)


def _lowest(dtype: np.dtype):
    """The identity of max: -inf, the smallest integer, or False."""
    if dtype.kind == "f":
        return -np.inf
    return False if dtype.kind == "b" else np.iinfo(dtype).min


def _highest(dtype: np.dtype):
    if dtype.kind == "f":
        return np.inf
    return True if dtype.kind == "b" else np.iinfo(dtype).max


# The ufuncs' own reductions, not np.sum / np.max / np.mean: those wrap them in Python
# (~3-7 us a call, most of a small reduction's time)
def _sum(x: np.ndarray, axes: Axes, keep: bool) -> np.ndarray:
    # dtype=x.dtype: NumPy would widen small integers to int64
    return np.add.reduce(x, axis=axes, dtype=x.dtype, keepdims=keep)  # type: ignore[call-overload]


def _mean(x: np.ndarray, axes: Axes, keep: bool) -> np.ndarray:
    count = math.prod(x.shape[a] for a in axes)
    total = _sum(x, axes, keep)
    if x.dtype.kind in "iu":
        # exact integer quotient truncated toward zero, as ONNX's cast of the float mean
        return np.sign(total) * (np.abs(total) // max(count, 1))
    return total / count


def _log_sum_exp(x: np.ndarray, axes: Axes, keep: bool) -> np.ndarray:
    peak = np.maximum.reduce(x, axis=axes, keepdims=True, initial=-np.inf)
    # shift by the max so exp cannot overflow; an infinite max (+inf present, or all -inf)
    # already gives the right answer unshifted, and shifting by it would make NaN
    peak = np.where(np.isfinite(peak), peak, peak.dtype.type(0))
    out = np.log(np.add.reduce(np.exp(x - peak), axis=axes, keepdims=True)) + peak
    return out if keep else np.squeeze(out, axis=axes)


_REDUCERS = {
    ReduceOp.SUM: _sum,
    ReduceOp.MEAN: _mean,
    ReduceOp.MAX: lambda x, axes, keep: np.maximum.reduce(
        x, axis=axes, keepdims=keep, initial=_lowest(x.dtype)),
    ReduceOp.MIN: lambda x, axes, keep: np.minimum.reduce(
        x, axis=axes, keepdims=keep, initial=_highest(x.dtype)),
    ReduceOp.PROD: lambda x, axes, keep: np.multiply.reduce(
        x, axis=axes, keepdims=keep, dtype=x.dtype),
    ReduceOp.L1: lambda x, axes, keep: _sum(np.abs(x), axes, keep),
    ReduceOp.L2: lambda x, axes, keep: np.sqrt(_sum(np.square(x), axes, keep)),
    ReduceOp.LOG_SUM: lambda x, axes, keep: np.log(_sum(x, axes, keep)),
    ReduceOp.LOG_SUM_EXP: _log_sum_exp,
    ReduceOp.SUM_SQUARE: lambda x, axes, keep: _sum(np.square(x), axes, keep),
}


@staged(Reduce, shared=True)
def build_reduce(node, compile):
    """The op's static axes resolved once per input rank; the dynamic form's each run."""
    op, dtype = node.op, node.shape.dtype.numpy
    reducer, keep = _REDUCERS[op.op], op.keepdims
    static: dict[int, Axes] = {}

    def step(x, axes=None):
        if axes is not None:
            resolved = op.runtime_axes(axes, x.ndim)
        else:
            resolved = static.get(x.ndim)
            if resolved is None:
                resolved = static[x.ndim] = op.normalized_axes(x.ndim)
        return typed(reducer(widen_half(x), resolved, keep), dtype)

    return quiet(step, compile)


@kernel(ArgMax, ArgMin)
def arg_reduce(node, x):
    op = node.op
    pick = np.argmax if isinstance(op, ArgMax) else np.argmin
    axis = normalize_axis(op.axis, x.ndim)
    x = widen_half(x)
    if op.select_last_index:
        # the first hit on the reversed axis is the last one on the original axis
        index = x.shape[axis] - 1 - pick(np.flip(x, axis), axis=axis, keepdims=op.keepdims)
    else:
        index = pick(x, axis=axis, keepdims=op.keepdims)
    return np.asarray(index, dtype=np.int64)


@kernel(CumSum)
def cumsum(node, x, axis=None):
    op = node.op
    axis = normalize_axis(op.axis if axis is None else int(axis), x.ndim)
    work = widen_half(x)
    if op.reverse:
        work = np.flip(work, axis)
    if op.exclusive:
        # sum of the elements before each one: shift the running sum (not `sum - x`,
        # which turns inf into NaN and loses digits)
        out = np.zeros_like(work)
        np.cumsum(work[_along(axis, None, -1)], axis=axis, dtype=work.dtype,
                  out=out[_along(axis, 1, None)])
    else:
        out = np.cumsum(work, axis=axis, dtype=work.dtype)
    if op.reverse:
        out = np.flip(out, axis)
    return np.asarray(out, dtype=x.dtype)


@kernel(TopK)
def top_k(node, x, k=None):
    op = node.op
    axis = normalize_axis(op.axis, x.ndim)
    size = x.shape[axis]
    k = op.k if k is None else int(k)
    if not 0 <= k <= size:
        raise ValueError(f"TopK: k={k} is not in [0, {size}] for axis {op.axis}")
    work = widen_half(x)
    if op.largest:
        # A stable ascending sort keeps equal values in index order. Sorting the reversed
        # axis and reading the result backwards gives descending values whose ties are
        # still in ascending original index (the ONNX rule).
        order = np.argsort(np.flip(work, axis), axis=axis, kind="stable")
        order = size - 1 - np.flip(order, axis)
    else:
        order = np.argsort(work, axis=axis, kind="stable")
    index = order[_along(axis, 0, k)]
    return np.take_along_axis(x, index, axis), index.astype(np.int64)
