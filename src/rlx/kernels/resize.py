"""The Resize kernel (ONNX semantics), numpy only: that of `rlx.ir.ops.resize`, imported
only for a graph that resizes (issue 35)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from rlx.ir.ops.resize import CoordinateMode, NearestMode, Resize, ResizeMode
from rlx.kernels.precision import to_compute
from rlx.kernels.registry import kernel

__all__ = ["resize"]


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
