"""Slice, Split and Concat kernels (ONNX semantics), numpy only: those of
`rlx.ir.ops.slicing`. Slice and Split return numpy views (basic slices worked out once per
input shape for the static form); kernels never write their inputs.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from rlx.ir.ops.slicing import Concat, Slice, Split, onnx_slice, slice_plan
from rlx.ir.shape import normalize_axis
from rlx.kernels.registry import kernel, staged
from rlx.kernels.shaping import given_ints, operand_ints, per_shape

__all__ = ["build_slice", "build_split", "concat"]


@staged(Slice, shared=True)
def build_slice(node, compile):
    op = node.op

    def index_of(shape, starts=None, ends=None, axes=None, steps=None) -> tuple[slice, ...]:
        plan = slice_plan(len(shape), given_ints(op.starts, starts),
                          given_ints(op.ends, ends),
                          operand_ints(op.axes, axes), operand_ints(op.steps, steps))
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


@kernel(Concat)
def concat(node, *xs):
    return np.concatenate(xs, axis=node.op.axis)
