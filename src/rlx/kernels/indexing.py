"""Index kernels (ONNX semantics), numpy only: those of `rlx.ir.ops.indexing`, imported
only for a graph that has one of them (issue 35)."""

from __future__ import annotations

import numpy as np

from rlx.ir.ops.indexing import (
    Compress,
    GatherElements,
    GatherND,
    NonZero,
    OneHot,
    ScatterElements,
    ScatterND,
    ScatterReduction,
    Trilu,
)
from rlx.kernels.registry import kernel

__all__ = ["gather_elements", "gather_nd", "scatter_nd", "scatter_elements", "one_hot",
           "trilu", "non_zero", "compress"]


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


@kernel(OneHot)
def one_hot(node, indices, depth, values):
    depth = int(depth.reshape(-1)[0])
    axis = node.op.axis % (indices.ndim + 1)
    idx = indices.astype(np.int64)
    idx = np.expand_dims(np.where(idx < 0, idx + depth, idx), axis)
    classes = np.arange(depth).reshape([-1 if i == axis else 1 for i in range(idx.ndim)])
    return np.where(idx == classes, values[1], values[0])


# -- masks -------------------------------------------------------------------------------------
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
