"""Shape kernels (ONNX semantics), numpy only: those of `rlx.ir.ops.shaping`.

Ops with a static and a dynamic form read their shape-like operand from the attribute, or
from the extra input when the attribute is None. Pure re-layouts (Reshape, Transpose,
Expand) return numpy views where numpy gives them; kernels never write their inputs.
`operand_ints`, `given_ints` and `per_shape` are shared with the kernels of the slicing,
generators and blocks families.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from rlx.ir.ops.shaping import (
    Expand,
    Flatten,
    Gather,
    Reshape,
    Squeeze,
    Transpose,
    Unsqueeze,
    reshape_target,
)
from rlx.ir.shape import normalize_axis
from rlx.kernels.registry import kernel, staged

__all__ = [
    "build_reshape", "build_transpose", "expand", "build_flatten", "build_squeeze",
    "build_unsqueeze", "gather", "given_ints", "operand_ints", "per_shape",
]


def operand_ints(attr: tuple[int, ...] | None, operand: np.ndarray | None
                  ) -> tuple[int, ...] | None:
    """A shape-like operand: the static attribute, else the run-time tensor's values."""
    if attr is not None:
        return attr
    return None if operand is None else tuple(int(v) for v in operand.reshape(-1))


def given_ints(attr: tuple[int, ...] | None, operand: np.ndarray | None) -> tuple[int, ...]:
    """`operand_ints` of an operand every form has (a Reshape's shape, a Slice's starts, ...)."""
    values = operand_ints(attr, operand)
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
        _probe(shape), axis=operand_ints(op.axes, axes)).shape)
    return lambda x, axes=None: x.reshape(target(x.shape, axes))


@staged(Unsqueeze, shared=True)
def build_unsqueeze(node, compile):
    op = node.op
    target = per_shape(op.axes is not None, lambda shape, axes=None: np.expand_dims(
        _probe(shape), given_ints(op.axes, axes)).shape)
    return lambda x, axes=None: x.reshape(target(x.shape, axes))


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
