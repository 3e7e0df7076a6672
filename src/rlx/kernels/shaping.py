"""Shape and indexing kernels (ONNX semantics), numpy only.

Ops with a static and a dynamic form read their shape-like operand from the attribute, or
from the extra input when the attribute is None. Pure re-layouts (Reshape, Transpose, Slice,
Expand, Split) return numpy views where numpy gives them; kernels never write their inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import numpy as np

from rlx.ir.ops.shaping import (
    Compress,
    Concat,
    DepthToSpace,
    DepthToSpaceMode,
    Expand,
    Fill,
    Flatten,
    Gather,
    GatherElements,
    GatherND,
    NonZero,
    OneHot,
    Pad,
    PadMode,
    Range,
    Reshape,
    ScatterElements,
    ScatterND,
    ScatterReduction,
    ShapeOf,
    Size,
    Slice,
    SpaceToDepth,
    Split,
    Squeeze,
    Tile,
    Transpose,
    Trilu,
    Unsqueeze,
    onnx_slice,
    reshape_target,
    slice_plan,
)
from rlx.ir.shape import normalize_axis
from rlx.kernels.registry import kernel, staged

__all__ = [
    "build_reshape", "build_transpose", "concat", "expand", "tile", "build_flatten",
    "build_squeeze",
    "build_unsqueeze", "build_slice", "build_split", "build_pad", "gather", "gather_elements",
    "gather_nd", "scatter_nd", "scatter_elements", "shape_of", "size", "range_", "fill",
    "one_hot", "depth_to_space", "space_to_depth", "trilu", "non_zero", "compress",
]


def _ints(attr: tuple[int, ...] | None, operand: np.ndarray | None) -> tuple[int, ...] | None:
    """A shape-like operand: the static attribute, else the run-time tensor's values."""
    if attr is not None:
        return attr
    return None if operand is None else tuple(int(v) for v in operand.reshape(-1))


def _given_ints(attr: tuple[int, ...] | None, operand: np.ndarray | None) -> tuple[int, ...]:
    """`_ints` of an operand every form has (a Reshape's shape, a Slice's starts, ...)."""
    ints = _ints(attr, operand)
    assert ints is not None  # the dynamic form takes it as an input (the op's infer checks)
    return ints


# -- re-layouts --------------------------------------------------------------------------------
def _per_shape(static: bool, plan: Callable[..., Any]) -> Callable[..., Any]:
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
    target = _per_shape(op.shape is not None, lambda shape, operand=None: tuple(
        reshape_target(shape, _given_ints(op.shape, operand), op.allowzero)))
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
    return np.broadcast_to(x, np.broadcast_shapes(x.shape, _given_ints(node.op.shape, shape)))


@kernel(Tile)
def tile(node, x, repeats=None):
    return np.tile(x, _given_ints(node.op.repeats, repeats))


@staged(Flatten, shared=True)
def build_flatten(node, compile):
    axis = node.op.axis

    def plan(shape: tuple[int, ...]) -> tuple[int, int]:
        cut = axis + len(shape) if axis < 0 else axis
        return math.prod(shape[:cut]), math.prod(shape[cut:])

    target = _per_shape(True, plan)
    return lambda x: x.reshape(target(x.shape))


@staged(Squeeze, shared=True)
def build_squeeze(node, compile):
    op = node.op
    target = _per_shape(op.axes is not None, lambda shape, axes=None: np.squeeze(
        _probe(shape), axis=_ints(op.axes, axes)).shape)
    return lambda x, axes=None: x.reshape(target(x.shape, axes))


@staged(Unsqueeze, shared=True)
def build_unsqueeze(node, compile):
    op = node.op
    target = _per_shape(op.axes is not None, lambda shape, axes=None: np.expand_dims(
        _probe(shape), _given_ints(op.axes, axes)).shape)
    return lambda x, axes=None: x.reshape(target(x.shape, axes))


@staged(Slice, shared=True)
def build_slice(node, compile):
    op = node.op

    def index_of(shape, starts=None, ends=None, axes=None, steps=None) -> tuple[slice, ...]:
        plan = slice_plan(len(shape), _given_ints(op.starts, starts),
                          _given_ints(op.ends, ends),
                          _ints(op.axes, axes), _ints(op.steps, steps))
        index = [slice(None)] * len(shape)
        for axis, start, end, step in plan:
            index[axis] = onnx_slice(start, end, step, shape[axis])
        return tuple(index)

    index = _per_shape(op.starts is not None, index_of)
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


@staged(Pad, shared=True)
def build_pad(node, compile):
    """Pad with its plan worked out once per input shape (`_pad_plan`): np.pad itself
    spends ~40 us per call on setup, more than a small tensor's copy."""
    op = node.op
    plan = _per_shape(op.pads is not None, lambda shape, pads=None: _pad_plan(
        op.mode, shape, _given_ints(op.pads, pads)))

    def step(x, pads=None, value=None):
        crop, inner_or_takes, shape = plan(x.shape, pads)
        x = x[crop]
        if op.mode is not PadMode.CONSTANT:
            for axis, index in inner_or_takes:
                x = np.take(x, index, axis=axis)
            return x
        fill = op.value if value is None else value
        out = np.full(shape, np.asarray(fill).astype(x.dtype), x.dtype)
        out[inner_or_takes] = x
        return out

    return step


def _pad_plan(mode: PadMode, shape: tuple[int, ...], pads: tuple[int, ...]):
    """(crop of x, constant mode: x's place in the output / other modes: per padded axis
    the source index of each output position (np.pad of an arange, so the edge rules are
    numpy's, which names them as ONNX does), output shape). Negative pads crop first, so
    reflect/wrap see the cropped data (as ONNX Runtime does)."""
    rank = len(shape)
    begins, ends = pads[:rank], pads[rank:]
    crop = tuple(slice(max(-b, 0), n - max(-e, 0)) for n, b, e in zip(shape, begins, ends))
    sizes = [len(range(n)[c]) for n, c in zip(shape, crop)]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begins, ends)]
    out = tuple(n + b + e for n, (b, e) in zip(sizes, widths))
    for axis, (n, w) in enumerate(zip(sizes, widths)):
        if mode is PadMode.REFLECT and max(w) >= n > 0 or n == 0 and any(w) \
                and mode is not PadMode.CONSTANT:
            raise ValueError(f"{mode.value} pads {w} of axis {axis} need more than its {n} "
                             "element(s)")
    if mode is PadMode.CONSTANT:
        return crop, tuple(slice(b, b + n) for n, (b, _) in zip(sizes, widths)), out
    takes = [(axis, np.pad(np.arange(n), w, mode=mode.value))
             for axis, (n, w) in enumerate(zip(sizes, widths)) if w != (0, 0)]
    return crop, takes, out


# -- gather and scatter ------------------------------------------------------------------------
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


def _element_index(indices: np.ndarray, axis: int) -> tuple[np.ndarray, ...]:
    """A fancy index addressing, for each element of `indices`, the data element it names:
    the element's own coordinates, with `indices` in place of the coordinate along `axis`."""
    grid: list[np.ndarray] = list(np.indices(indices.shape, sparse=True))
    grid[axis % indices.ndim] = indices
    return tuple(grid)


@kernel(GatherElements)
def gather_elements(node, data, indices):
    return data[_element_index(indices, node.op.axis)]


@kernel(GatherND)
def gather_nd(node, data, indices):
    b = node.op.batch_dims
    batch, count = int(np.prod(data.shape[:b])), int(np.prod(indices.shape[b:-1]))
    m = indices.shape[-1]
    flat = data.reshape(batch, *data.shape[b:])
    tuples = indices.reshape(batch, count, m)
    index = (np.arange(batch)[:, None], *np.moveaxis(tuples, -1, 0))
    picked = flat[index]
    return picked.reshape(*indices.shape[:-1], *data.shape[b + m:])


_SCATTER_UFUNCS = {
    ScatterReduction.ADD: np.add, ScatterReduction.MUL: np.multiply,
    ScatterReduction.MAX: np.maximum, ScatterReduction.MIN: np.minimum,
}


def _scatter(data: np.ndarray, index: tuple, updates: np.ndarray,
             reduction: ScatterReduction) -> np.ndarray:
    """A copy of `data` with `updates` written at `index`, or combined unbuffered (`ufunc.at`,
    so repeated indices all count)."""
    out = data.copy()
    if reduction is ScatterReduction.NONE:
        out[index] = updates
    else:
        _SCATTER_UFUNCS[reduction].at(out, index, updates)
    return out


@kernel(ScatterND)
def scatter_nd(node, data, indices, updates):
    return _scatter(data, tuple(np.moveaxis(indices, -1, 0)), updates, node.op.reduction)


@kernel(ScatterElements)
def scatter_elements(node, data, indices, updates):
    index = _element_index(indices, node.op.axis)
    return _scatter(data, index, updates, node.op.reduction)


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
    return np.full(_ints(op.shape, shape), op.value, dtype=node.shape.dtype.numpy)


@kernel(OneHot)
def one_hot(node, indices, depth, values):
    depth = int(depth.reshape(-1)[0])
    axis = node.op.axis % (indices.ndim + 1)
    idx = indices.astype(np.int64)
    idx = np.expand_dims(np.where(idx < 0, idx + depth, idx), axis)
    classes = np.arange(depth).reshape([-1 if i == axis else 1 for i in range(idx.ndim)])
    return np.where(idx == classes, values[1], values[0])


# -- layout ops on images and matrices ---------------------------------------------------------
@kernel(DepthToSpace)
def depth_to_space(node, x):
    n, c, h, w = x.shape
    b = node.op.blocksize
    if node.op.mode is DepthToSpaceMode.DCR:
        blocks = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        blocks = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return blocks.reshape(n, c // (b * b), h * b, w * b)


@kernel(SpaceToDepth)
def space_to_depth(node, x):
    n, c, h, w = x.shape
    b = node.op.blocksize
    blocks = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return blocks.reshape(n, c * b * b, h // b, w // b)


@kernel(Trilu)
def trilu(node, x):
    return (np.triu if node.op.upper else np.tril)(x, node.op.k)


@kernel(NonZero)
def non_zero(node, x):
    if x.ndim == 0:  # numpy refuses nonzero() on a scalar: no coordinates, 0 or 1 hits
        return np.zeros((0, int(bool(x))), dtype=np.int64)
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


@kernel(Compress)
def compress(node, x, cond):
    return np.compress(cond, x, axis=node.op.axis)
