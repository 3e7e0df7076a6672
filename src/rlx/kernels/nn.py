"""Neural-network kernels: softmax and layer normalisation (the per-channel ops are
rlx.kernels.channelwise', convolution and pooling rlx.kernels.windows', resize
rlx.kernels.resize').

Half-precision inputs are computed in float32 (numpy has no fast f16 GEMM, and sums need
the range), then cast back; float64 stays float64 (rlx.kernels.precision).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from rlx.ir.ops.nn import LayerNorm, LogSoftmax, Softmax
from rlx.ir.shape import normalize_axis
from rlx.kernels.precision import to_compute
from rlx.kernels.registry import kernel, staged

__all__ = ["build_softmax", "log_softmax", "layer_norm", "standardize"]


def _shifted(x: np.ndarray, axis: int) -> np.ndarray:
    """x - max(x) along axis: exp of it cannot overflow (the usual stable softmax)."""
    x = to_compute(x)
    n = x.shape[axis] if x.ndim else 1
    if axis == x.ndim - 1 and x.size and n:
        # along the last axis, reduceat over the flat rows runs ~1.6x faster than max
        flat = np.ascontiguousarray(x).reshape(-1)
        top = np.maximum.reduceat(flat, np.arange(0, flat.size, n)).reshape(*x.shape[:-1], 1)
        return x - top
    return x - np.max(x, axis=axis, keepdims=True, initial=-np.inf)


# after a shift by the whole tensor's max, a row summing to at least this has its own max
# within ~21 + ln(n) of it, so every term within ~60 of the row's max is still a normal
# float, as exact as after a shift by the row's own max; terms further down are < 1e-26
# of the row's sum either way
_ROW_SUM_FLOOR = 2.0 ** -30


@staged(Softmax, shared=True)
def build_softmax(node, compile):
    """exp(x - max) / sum. Along the last axis the shift is the tensor's max (one fast
    reduction; the max of each short row costs ~3x the exp) and the sums are a
    matrix-vector product (BLAS), unless a row falls so far below the tensor's max that
    its sum would lose precision: then the rows are shifted by their own max. The axis is
    resolved once, from the node's rank (one row of 12: 4.1 -> 3.7 us a call)."""
    rank = node.tensor_shape.rank
    axis = normalize_axis(node.op.axis, rank)
    last = rank > 0 and axis == rank - 1

    def step(x):
        e = _last_axis_softmax(to_compute(x)) if last and x.size else None
        if e is None:
            e = _shifted(x, axis)  # a fresh array: exponentiate and normalise it in place
            np.exp(e, out=e)
            e /= e.sum(axis=axis, keepdims=True)
        return e.astype(x.dtype, copy=False)

    return step


@functools.lru_cache(maxsize=64)
def _ones(n: int, dtype: np.dtype) -> np.ndarray:
    """A read-only vector of n ones (the row sums' operand), made once per size."""
    ones = np.ones(n, dtype)
    ones.flags.writeable = False
    return ones


# up to this many values, Python's max and sum over a list of them beat the setup of
# NumPy's reductions (12 values: 3.5 -> 2.9 us a softmax; 32: even; thread CPU time)
_LISTED = 16


def _last_axis_softmax(x: np.ndarray) -> np.ndarray | None:
    """Softmax over the last axis shifted by the tensor's max, or None where that shift
    does not do (a non-finite max, a row too far below it). A NaN may hide from Python's
    max; it then makes its row's sum NaN, which the rows' checks catch (one row: NaN all
    over, as the shift by the row's own max gives)."""
    listed = x.size <= _LISTED
    top = max(x.reshape(-1).tolist()) if listed else np.maximum.reduce(x, axis=None)
    if not math.isfinite(top):
        return None
    e = np.subtract(x, top)
    np.exp(e, out=e)
    if e.size == e.shape[-1]:  # one row: the shift is its own max, so its sum is >= 1
        # half the calls of the rows' path (~1.5 us)
        e /= sum(e.reshape(-1).tolist()) if listed else np.add.reduce(e, axis=None)
        return e
    sums = e @ _ones(x.shape[-1], e.dtype)
    if not np.minimum.reduce(sums, axis=None) >= _ROW_SUM_FLOOR:  # NaN fails too
        return None
    e /= sums[..., None]
    return e


@kernel(LogSoftmax)
def log_softmax(node, x):
    axis = normalize_axis(node.op.axis, x.ndim)
    z = _shifted(x, axis)
    # the sum is >= 1 (the max term is exp(0)) except over an empty axis, where log(0) is moot
    with np.errstate(divide="ignore"):
        log_sum = np.log(np.exp(z).sum(axis=axis, keepdims=True))
    return (z - log_sum).astype(x.dtype, copy=False)


def standardize(x: np.ndarray, first_axis: int, epsilon: float) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) over the axes from `first_axis` on; two-pass variance
    (no cancellation). Both means are matrix-vector products with a vector of 1/n (BLAS),
    which beats numpy's row reductions on the short rows normalisation sees."""
    x = to_compute(x)
    shape = x.shape
    n = math.prod(shape[first_axis:])
    rows = x.reshape(*shape[:first_axis], n)
    inv = np.full(n, 1 / n if n else 0, rows.dtype)
    centered = rows - (rows @ inv)[..., None]
    var = (np.square(centered) @ inv)[..., None]
    var += epsilon
    centered /= np.sqrt(var, out=var)  # a fresh array: scaled in place
    return centered.reshape(shape)


@kernel(LayerNorm)
def layer_norm(node, x, scale, bias=None):
    axis = normalize_axis(node.op.axis, x.ndim)
    y = standardize(x, axis, node.op.epsilon)
    y *= scale.astype(y.dtype, copy=False)
    if bias is not None:
        y += bias.astype(y.dtype, copy=False)
    return y.astype(x.dtype, copy=False)
