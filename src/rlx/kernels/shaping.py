"""Shape kernels (ONNX semantics), numpy only: those of `rlx.ir.ops.shaping`.

Ops with a static and a dynamic form read their shape-like operand from the attribute, or
from the extra input when the attribute is None. Pure re-layouts (Reshape, Transpose, Slice,
Expand, Split) return numpy views where numpy gives them; kernels never write their inputs.
`given_ints` and `per_shape` are shared with the kernels of the blocks family.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import numpy as np

from rlx.ir.ops.shaping import (
    Concat,
    Expand,
    Fill,
    Flatten,
    Gather,
    Range,
    Reshape,
    ShapeOf,
    Size,
    Slice,
    Split,
    Squeeze,
    Transpose,
    Unsqueeze,
    onnx_slice,
    reshape_target,
    slice_plan,
)
from rlx.ir.shape import normalize_axis
from rlx.kernels.registry import kernel, staged

__all__ = [
    "build_reshape", "build_transpose", "concat", "expand", "build_flatten", "build_squeeze",
    "build_unsqueeze", "build_slice", "build_split", "gather", "shape_of", "size", "range_",
    "fill", "given_ints", "per_shape",
]


def _operand_ints(attr: tuple[int, ...] | None, operand: np.ndarray | None
                  ) -> tuple[int, ...] | None:
    """A shape-like operand: the static attribute, else the run-time tensor's values."""
    if attr is not None:
        return attr
    return None if operand is None else tuple(int(v) for v in operand.reshape(-1))


def given_ints(attr: tuple[int, ...] | None, operand: np.ndarray | None) -> tuple[int, ...]:
    """`_operand_ints` of an operand every form has (a Reshape's shape, a Slice's starts, ...)."""
    values = _operand_ints(attr, operand)
    assert values is not None  # the dynamic form takes it as an input (the op's infer checks)
    return values


# -- re-layouts --------------------------------------------------------------------------------
def per_shape(static: bool, plan: Callable[..., Any]) -> Callable[..., Any]:
    """`plan(x_shape, *operands)`, cached per input shape when the op's operands are static
    attributes (a view op then costs a dict lookup and a reshape or index, not numpy's
    argument handling); computed each time for the dynamic form."""
    if not static:
        return plan
    plans: dict[tuple, Any] = {}

    def cached(shape: tuple, *operands):
        found = plans.get(shape)
        if found is None:
            found = plans[shape] = plan(shape, *operands)
        return found

    return cached


def _probe(shape: tuple[int, ...]) -> np.ndarray:
    """An array of `shape` that holds no memory: numpy's shape functions applied to it give
    their result shape, or raise their errors."""
    return np.broadcast_to(np.empty((), np.bool_), shape)


@staged(Reshape, shared=True)
def build_reshape(node, compile):
    op = node.op
    target = per_shape(op.shape is not None, lambda shape, operand=None: tuple(
        reshape_target(shape, given_ints(op.shape, operand), op.allowzero)))
    return lambda x, shape=None: x.reshape(target(x.shape, shape))


@staged(Transpose, shared=True)
def build_transpose(node, compile):
    perm = node.op.resolved_perm(node.shape.rank)  # the output rank is the input's
    return lambda x: x.transpose(perm)


@kernel(Concat)
def concat(node, *xs):
    return np.concatenate(xs, axis=node.op.axis)


@kernel(Expand)
def expand(node, x, shape=None):
    return np.broadcast_to(x, np.broadcast_shapes(x.shape, given_ints(node.op.shape, shape)))


@staged(Flatten, shared=True)
def build_flatten(node, compile):
    axis = node.op.axis

    def plan(shape: tuple[int, ...]) -> tuple[int, int]:
        cut = axis + len(shape) if axis < 0 else axis
        return math.prod(shape[:cut]), math.prod(shape[cut:])

    target = per_shape(True, plan)
    return lambda x: x.reshape(target(x.shape))


@staged(Squeeze, shared=True)
def build_squeeze(node, compile):
    op = node.op
    target = per_shape(op.axes is not None, lambda shape, axes=None: np.squeeze(
        _probe(shape), axis=_operand_ints(op.axes, axes)).shape)
    return lambda x, axes=None: x.reshape(target(x.shape, axes))


@staged(Unsqueeze, shared=True)
def build_unsqueeze(node, compile):
    op = node.op
    target = per_shape(op.axes is not None, lambda shape, axes=None: np.expand_dims(
        _probe(shape), given_ints(op.axes, axes)).shape)
    return lambda x, axes=None: x.reshape(target(x.shape, axes))


@staged(Slice, shared=True)
def build_slice(node, compile):
    op = node.op

    def index_of(shape, starts=None, ends=None, axes=None, steps=None) -> tuple[slice, ...]:
        plan = slice_plan(len(shape), given_ints(op.starts, starts),
                          given_ints(op.ends, ends),
                          _operand_ints(op.axes, axes), _operand_ints(op.steps, steps))
        index = [slice(None)] * len(shape)
        for axis, start, end, step in plan:
            index[axis] = onnx_slice(start, end, step, shape[axis])
        return tuple(index)

    index = per_shape(op.starts is not None, index_of)
    return lambda x, *operands: x[index(x.shape, *operands)]


@staged(Split, shared=True)
def build_split(node, compile):
    """The pieces as basic slices worked out once (views, like np.split, without its ~10 us
    of set-up per call: unrolled recurrent cells split their gates at every time step)."""
    rank = node.shape[0].rank
    axis = normalize_axis(node.op.axis, rank)
    bounds = np.cumsum((0, *node.op.sizes)).tolist()
    index = [(slice(None),) * axis + (slice(a, b),) for a, b in pairwise(bounds)]
    return lambda x: tuple(x[i] for i in index)


# -- gather --------------------------------------------------------------------------------------
@kernel(Gather)
def gather(node, data, indices):
    axis = node.op.axis
    if indices.ndim == 0 and data.ndim:
        # one index: a basic-index view. np.take copies a non-contiguous `data` whole first
        # (a transposed feature map read one time step at a time: ~100 us instead of ~1)
        axis = normalize_axis(axis, data.ndim)
        i = int(indices)
        if not -data.shape[axis] <= i < data.shape[axis]:
            raise IndexError(f"index {i} is out of bounds for axis {axis} with size "
                             f"{data.shape[axis]}")
        picked = data[(slice(None),) * axis + (i,)]
        return picked if data.ndim > 1 else np.asarray(picked)  # a 1-D pick is a scalar
    return np.asarray(np.take(data, indices, axis=axis))  # a scalar take gives a 0-d


# -- shape queries and generators --------------------------------------------------------------
@kernel(ShapeOf)
def shape_of(node, x):
    return np.array(x.shape[node.op.start:node.op.end], dtype=np.int64)


@kernel(Size)
def size(node, x):
    return np.array(x.size, dtype=np.int64)


@kernel(Range)
def range_(node, start, limit, delta):
    if delta == 0:
        raise ValueError("Range: delta is 0")
    if np.issubdtype(start.dtype, np.integer):
        # exact ceil division on Python ints: float64 would round large int64 bounds
        count = -((int(start) - int(limit)) // int(delta))
    else:
        count = int(np.ceil((limit - start) / delta))
    return start + np.arange(max(count, 0), dtype=start.dtype) * delta


@kernel(Fill)
def fill(node, shape=None):
    op = node.op
    return np.full(_operand_ints(op.shape, shape), op.value, dtype=node.shape.dtype.numpy)


