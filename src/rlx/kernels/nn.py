"""Neural-network kernels: normalisation, softmax, PReLU, resize (the sliding-window ops of
the family, convolution and pooling, are rlx.kernels.windows').

Half-precision inputs are computed in float32 (numpy has no fast f16 GEMM, and sums need
the range), then cast back; float64 stays float64 (rlx.kernels.precision).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from rlx.ir.ops.nn import (
    BatchNormInference,
    CoordinateMode,
    InstanceNorm,
    LayerNorm,
    LogSoftmax,
    NearestMode,
    PRelu,
    Resize,
    ResizeMode,
    Softmax,
)
from rlx.ir.shape import normalize_axis
from rlx.kernels.precision import compute_dtype, to_compute
from rlx.kernels.registry import kernel, staged

__all__ = [
    "build_softmax", "log_softmax", "layer_norm", "batch_norm", "instance_norm", "prelu",
    "resize",
]


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


def _last_axis_softmax(x: np.ndarray) -> np.ndarray | None:
    """Softmax over the last axis shifted by the tensor's max, or None where that shift
    does not do (a non-finite max, a row too far below it)."""
    top = np.maximum.reduce(x, axis=None)
    if not math.isfinite(top):
        return None
    e = np.subtract(x, top)
    np.exp(e, out=e)
    if e.size == e.shape[-1]:  # one row: the shift is its own max, so its sum is >= 1
        e /= np.add.reduce(e, axis=None)  # half the calls of the rows' path (~1.5 us)
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


def _standardize(x: np.ndarray, first_axis: int, epsilon: float) -> np.ndarray:
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


def _per_channel(v: np.ndarray, ndim: int, dtype: np.dtype) -> np.ndarray:
    """A [C] parameter shaped to broadcast over axis 1 of a rank-`ndim` tensor."""
    return v.astype(dtype, copy=False).reshape(-1, *[1] * (ndim - 2))


@kernel(LayerNorm)
def layer_norm(node, x, scale, bias=None):
    axis = normalize_axis(node.op.axis, x.ndim)
    y = _standardize(x, axis, node.op.epsilon)
    y *= scale.astype(y.dtype, copy=False)
    if bias is not None:
        y += bias.astype(y.dtype, copy=False)
    return y.astype(x.dtype, copy=False)


@kernel(BatchNormInference)
def batch_norm(node, x, scale, bias, mean, var):
    dt = compute_dtype(x.dtype)
    # folded into one multiply-add per element: y = x * a + (bias - mean * a)
    a = scale.astype(dt) / np.sqrt(var.astype(dt) + node.op.epsilon)
    shift = bias.astype(dt) - mean.astype(dt) * a
    y = to_compute(x) * _per_channel(a, x.ndim, dt) + _per_channel(shift, x.ndim, dt)
    return y.astype(x.dtype, copy=False)


@kernel(InstanceNorm)
def instance_norm(node, x, scale, bias):
    y = _standardize(x, 2, node.op.epsilon)
    y = y * _per_channel(scale, x.ndim, y.dtype) + _per_channel(bias, x.ndim, y.dtype)
    return y.astype(x.dtype, copy=False)


@kernel(PRelu)
def prelu(node, x, slope):
    return np.where(x < 0, x * slope, x).astype(x.dtype, copy=False)


# -- resize ---------------------------------------------------------------------------------
def _source_coords(op: Resize, axis: int, size: int) -> np.ndarray:
    """Input coordinate sampled by each output index on `axis` (float64), with ONNX's
    formulas, written as its reference evaluator does so that nearest-rounding ties agree."""
    assert op.sizes is not None  # kernels run resolved Resizes (sizes known)
    new = op.sizes[axis]
    scale = op.axis_scale(axis, size)
    length = scale * size  # ONNX's fractional output length
    y = np.arange(new, dtype=np.float64)
    mode = op.coordinate_mode
    if mode is CoordinateMode.ALIGN_CORNERS:
        return np.zeros(new) if length == 1 else y * (size - 1) / (length - 1)
    if mode is CoordinateMode.ASYMMETRIC:
        return y / scale
    if mode is CoordinateMode.PYTORCH_HALF_PIXEL:
        return np.full(new, -0.5) if length == 1 else (y + 0.5) / scale - 0.5
    if mode is CoordinateMode.HALF_PIXEL:
        return (y + 0.5) / scale - 0.5
    if mode is CoordinateMode.HALF_PIXEL_SYMMETRIC:
        offset = size / 2 * (1 - new / length)
        return offset + (y + 0.5) / scale - 0.5
    assert op.roi is not None  # TF_CROP_AND_RESIZE has its roi (Resize.infer)
    start, stop = op.roi[axis::len(op.sizes)]
    if length == 1:
        return np.full(new, (stop - start) * (size - 1) / 2 + start * (size - 1))
    return y * (stop - start) * (size - 1) / (length - 1) + start * (size - 1)


def _nearest_index(coords: np.ndarray, mode: NearestMode) -> np.ndarray:
    base = np.floor(coords)
    frac = coords - base
    up = {
        NearestMode.ROUND_PREFER_FLOOR: frac > 0.5,
        NearestMode.ROUND_PREFER_CEIL: frac >= 0.5,
        NearestMode.FLOOR: np.zeros_like(frac, dtype=bool),
        NearestMode.CEIL: frac > 0,
    }[mode]
    return (base + up).astype(np.int64)[:, None]


def _interp_taps(op: Resize, coords: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Input indices [out, taps] and their weights for linear (2 taps) or cubic (4 taps,
    Keys kernel with a = cubic_coeff_a).

    Taps are counted from the left neighbour, an exact hit counting as ratio 1 (ONNX's
    reference). With antialias a downsampling filter is stretched by 1 / scale over more
    taps and its weights normalised."""
    base = np.ceil(coords) - 1
    ratio = coords - base  # in (0, 1]
    stretch = min(scale, 1.0) if op.antialias else 1.0
    reach = 1 if op.mode is ResizeMode.LINEAR else 2
    start = math.floor(-reach / stretch) + 1
    taps = np.arange(start, 2 - start)
    s = np.abs(taps[None, :] - ratio[:, None]) * stretch
    if op.mode is ResizeMode.LINEAR:
        weights = np.clip(1 - s, 0, 1)
    else:
        a = op.cubic_coeff_a
        near = ((a + 2) * s - (a + 3)) * s * s + 1
        far = ((a * s - 5 * a) * s + 8 * a) * s - 4 * a
        weights = np.where(s <= 1, near, np.where(s < 2, far, 0.0))
    if op.antialias:
        weights = weights / weights.sum(axis=1, keepdims=True)
    return base[:, None] + taps, weights


def _resize_axis(op: Resize, data: np.ndarray, axis: int) -> np.ndarray:
    size = data.shape[axis]
    coords = _source_coords(op, axis, size)
    if op.mode is ResizeMode.NEAREST:
        index, weights = _nearest_index(coords, op.nearest_mode), None
    else:
        index, weights = _interp_taps(op, coords, op.axis_scale(axis, size))
        if op.exclude_outside:
            weights = np.where((index >= 0) & (index < size), weights, 0.0)
            total = weights.sum(axis=1, keepdims=True)
            weights = weights / np.where(total == 0, 1.0, total)
    # edge padding: taps outside the input read its border
    index = np.clip(index, 0, size - 1).astype(np.intp)
    bshape = [1] * data.ndim
    bshape[axis] = -1
    if weights is None:
        out = np.take(data, index[:, 0], axis=axis)
    else:
        weights = weights.astype(data.dtype)
        out = sum(np.take(data, index[:, j], axis=axis) * weights[:, j].reshape(bshape)
                  for j in range(index.shape[1]))
    if op.coordinate_mode is CoordinateMode.TF_CROP_AND_RESIZE:
        outside = ((coords < 0) | (coords > size - 1)).reshape(bshape)
        out = np.where(outside, np.asarray(op.extrapolation_value, out.dtype), out)
    return out


def _saturate(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Cast back; integers round (half to even) and clip, as ONNX's saturate_cast."""
    if dtype.kind in "iu" and y.dtype.kind == "f":
        info = np.iinfo(dtype)
        y = np.clip(np.round(y), info.min, info.max)
    return y.astype(dtype, copy=False)


@kernel(Resize)
def resize(node, x, *operands):
    op = node.op.resolved(x.shape, operands) if operands else node.op
    axes = [a for a, size in enumerate(x.shape) if not op.is_identity_axis(a, size)]
    if op.mode is ResizeMode.NEAREST:
        repeats = _nearest_repeats(op, x.shape, tuple(axes))
        if repeats is not None:
            return _repeat_each(x, repeats)
    y = x if op.mode is ResizeMode.NEAREST else to_compute(x)
    for axis in axes:
        y = _resize_axis(op, y, axis)
    return _saturate(y, x.dtype)


@functools.lru_cache(maxsize=256)
def _nearest_repeats(op: Resize, shape: tuple[int, ...],
                     axes: tuple[int, ...]) -> tuple[int, ...] | None:
    """Per axis, k where nearest sampling reads each input index k times in order (an
    integer upsampling, as detectors' FPNs do), else None. Cached: a model resizes the
    same shapes every run, and working it out costs ~4x the copy."""
    assert op.sizes is not None  # kernels run resolved Resizes (sizes known)
    repeats = [1] * len(shape)
    for axis in axes:
        size, new = shape[axis], op.sizes[axis]
        if not size or new % size:
            return None
        k = new // size
        index = _nearest_index(_source_coords(op, axis, size), op.nearest_mode)[:, 0]
        if not np.array_equal(index, np.arange(new) // k):
            return None
        repeats[axis] = k
    return tuple(repeats)


def _repeat_each(x: np.ndarray, repeats: Sequence[int]) -> np.ndarray:
    """Each element repeated k times along each axis: along the last, k strided copies;
    along the others, one copy of a broadcast view that repeats whole contiguous rows
    ([1, 128, 20, 20] 2x: 0.3x the time of a gather per axis; a broadcast along the last
    axis would copy elements one by one)."""
    y = x
    if repeats[-1] > 1:
        spread = np.empty((*x.shape, repeats[-1]), x.dtype)
        for j in range(repeats[-1]):
            spread[..., j] = x
        y = spread.reshape(*x.shape[:-1], -1)
    for axis in reversed(range(x.ndim - 1)):
        if repeats[axis] > 1:
            head, tail = y.shape[:axis + 1], y.shape[axis + 1:]
            wide = np.broadcast_to(y.reshape(*head, 1, *tail), (*head, repeats[axis], *tail))
            y = wide.reshape(*head[:-1], -1, *tail)
    return y
