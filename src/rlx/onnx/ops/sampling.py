"""Sampling at computed coordinates: GridSample and RoiAlign, as gathers from the image.

Each spatial axis gives, for every output point, a few taps: an input index and a weight
(1 for nearest, 2 for linear, 4 for cubic). The taps of all axes combine into flat indices
and product weights on a new trailing axis, one GatherElements reads every tap of every
channel at once, and a weighted sum over that axis gives the result. Padding rules decide
what a tap outside the image reads: zero, the border, or the reflected position.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rlx.ir import (
    Activation,
    BinaryOp,
    Clamp,
    CompareOp,
    Concat,
    DType,
    GatherElements,
    LogicalOp,
    ReduceOp,
)
from rlx.onnx.emit import Emitter
from rlx.onnx.node import NodeContext
from rlx.onnx.registry import converter

__all__ = [
    "Taps", "interpolation_taps", "reflect", "gather_taps", "grid_sample", "roi_align",
    "deform_conv",
]

_CUBIC_A = -0.75
_COORD = DType.F32  # coordinates are computed in float32, as ONNX's reference does


@dataclass
class Taps:
    """One spatial axis: per output point, k input indices (float, integral) and weights."""

    index: int  # [N, P, k]
    weight: int  # [N, P, k]
    valid: int | None = None  # [N, P, k] bool: the tap reads the image (else zero)


def _offsets(s: Emitter, x: int, offsets) -> int:
    """x[..., None] + offsets: [N, P] -> [N, P, len(offsets)]."""
    return s.add(s.unsqueeze(x, (-1,)), s.const(np.asarray(offsets, np.float32)))


def _keys(s: Emitter, dist: int) -> int:
    """Keys' cubic convolution weight of a distance |t - tap| (a = -0.75)."""
    a = _CUBIC_A
    sq = s.mul(dist, dist)
    near = s.add(s.mul(s.sub(s.mul(dist, s.like(a + 2, dist)), s.like(a + 3, dist)), sq),
                 s.like(1, dist))
    far = s.sub(s.mul(s.add(s.mul(s.sub(s.mul(dist, s.like(a, dist)), s.like(5 * a, dist)),
                                  dist), s.like(8 * a, dist)), dist), s.like(4 * a, dist))
    far = s.where(s.compare(CompareOp.LT, dist, s.like(2, dist)), far, s.like(0, dist))
    return s.where(s.compare(CompareOp.LE, dist, s.like(1, dist)), near, far)


def interpolation_taps(s: Emitter, v: int, mode: str) -> Taps:
    """Taps around coordinate v [N, P]: nearest (v itself), linear or cubic neighbours."""
    if mode == "nearest":
        return Taps(s.unsqueeze(v, (-1,)), s.unsqueeze(s.like(1, v), (0, 1)))
    base = s.unary(Activation.FLOOR, v)
    frac = s.sub(v, base)
    offsets = (0, 1) if mode == "linear" else (-1, 0, 1, 2)
    dist = s.unary(Activation.ABS, _offsets(s, s.unary(Activation.NEG, frac), offsets))
    weight = s.sub(s.like(1, dist), dist) if mode == "linear" else _keys(s, dist)
    return Taps(_offsets(s, base, offsets), weight)


def reflect(s: Emitter, v: int, lo: float, hi: float) -> int:
    """Fold v into [lo, hi] by reflecting at the borders (ONNX's / PyTorch's rule)."""
    span = hi - lo
    below = s.compare(CompareOp.LT, v, s.like(lo, v))
    above = s.compare(CompareOp.GT, v, s.like(hi, v))
    dist = s.where(below, s.sub(s.like(lo, v), v), s.sub(v, s.like(hi, v)))
    flips = s.unary(Activation.FLOOR, s.div(dist, s.like(span, v)))
    rest = s.sub(dist, s.mul(flips, s.like(span, v)))
    even = s.compare(CompareOp.EQ, s.binary(BinaryOp.FMOD, flips, s.like(2, v)),
                     s.like(0, v))
    from_lo, from_hi = s.add(s.like(lo, v), rest), s.sub(s.like(hi, v), rest)
    folded_below = s.where(even, from_lo, from_hi)
    folded_above = s.where(even, from_hi, from_lo)
    return s.where(below, folded_below, s.where(above, folded_above, v))


def gather_taps(s: Emitter, x: int, taps: list[Taps], out_shape: int,
                combine: ReduceOp = ReduceOp.SUM) -> int:
    """`combine` (sum, or max) over the tap grid of weight * x[n, c, tap] -> x's [N, C] +
    `out_shape` dims. `taps` has one entry per spatial axis of x (static sizes), in order."""
    dims = s.shape(x).dims[2:]
    count = len(taps)
    flat: int | None = None
    weight: int | None = None
    valid: int | None = None
    stride = 1
    for axis in reversed(range(count)):
        t = taps[axis]
        shape = [0, 0] + [-1 if a == axis else 1 for a in range(count)]
        index = s.reshape(s.mul(t.index, s.like(stride, t.index)), shape)
        w = s.reshape(t.weight, shape)
        flat = index if flat is None else s.add(flat, index)
        weight = w if weight is None else s.mul(weight, w)
        if t.valid is not None:
            v = s.reshape(t.valid, shape)
            valid = v if valid is None else s.logical(LogicalOp.AND, valid, v)
        if axis:  # the next (outer) axis steps over this one's size
            stride *= int(dims[axis])
    assert flat is not None and weight is not None  # one tap per axis, at least one axis
    if valid is not None:
        weight = s.where(valid, weight, s.like(0, weight))
    tap_count = math.prod(int(s.shape(t.index).dims[-1]) for t in taps)  # static
    flat = s.reshape(s.cast(flat, DType.I64), (0, 1, -1))
    data = s.reshape(x, (0, 0, -1))
    span = s.emit(Concat(0), s.shape_of(x, 0, 2), s.shape_of(flat, 2, 3))
    picked = s.emit(GatherElements(2), data, s.expand(flat, span))
    picked = s.reshape(picked, (0, 0, -1, tap_count))
    weight = s.cast(s.reshape(weight, (0, 1, -1, tap_count)), s.dtype(x))
    total = s.reduce(combine, s.mul(picked, weight), (-1,), keepdims=False)
    return s.reshape(total, s.emit(Concat(0), s.shape_of(x, 0, 2), out_shape))


def _padded(s: Emitter, taps: Taps, size: int, padding: str, lo: float, hi: float) -> Taps:
    """Taps with their indices made readable under `padding` (zeros marks them invalid)."""
    index = taps.index
    valid = None
    if padding == "zeros":
        valid = s.logical(LogicalOp.AND, s.compare(CompareOp.GE, index, s.like(0, index)),
                          s.compare(CompareOp.LE, index, s.like(size - 1, index)))
    elif padding == "reflection":
        index = s.cast(s.cast(reflect(s, index, lo, hi), DType.I64), _COORD)  # truncates
    index = s.emit(Clamp(0.0, float(size - 1)), index)
    return Taps(index, taps.weight, valid)


@converter("GridSample")
def grid_sample(n: NodeContext) -> int:
    s = n.s
    x, grid = n.input(0), n.input(1)
    if not all(isinstance(d, int) for d in s.shape(x).dims[2:]):
        raise n.fail(f"needs static spatial dims, got {s.shape(x)}")
    dims = s.shape(x).static_dims[2:]
    mode = n.attr("mode", "linear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)  # opset 16 names
    padding = n.attr("padding_mode", "zeros")
    if mode not in ("nearest", "linear", "cubic") or \
            padding not in ("zeros", "border", "reflection"):
        raise n.fail(f"mode {mode!r} / padding_mode {padding!r} are not supported")
    align = bool(n.attr("align_corners", 0))
    count = len(dims)
    points = s.reshape(s.cast(grid, _COORD), (0, -1, count))  # [N, P, r]
    taps = []
    for axis, size in enumerate(dims):
        g = s.take(points, count - 1 - axis, axis=2)  # grid holds x (last axis) first
        if align:
            v = s.mul(s.add(g, s.like(1, g)), s.like((size - 1) / 2, g))
        else:
            v = s.div(s.sub(s.mul(s.add(g, s.like(1, g)), s.like(size, g)), s.like(1, g)),
                      s.like(2, g))
        if mode == "nearest":
            v = s.unary(Activation.ROUND, v)
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        outside = s.logical(LogicalOp.OR, s.compare(CompareOp.LT, v, s.like(lo, v)),
                            s.compare(CompareOp.GT, v, s.like(hi, v)))
        if padding == "border":
            v = s.where(outside, s.emit(Clamp(0.0, size - 1.0), v), v)
        elif padding == "reflection":
            v = s.where(outside, reflect(s, v, lo, hi), v)
        taps.append(_padded(s, interpolation_taps(s, v, mode), size, padding, lo, hi))
    return gather_taps(s, x, taps, s.shape_of(grid, 1, -1))


# -- RoiAlign ----------------------------------------------------------------------------------
def _roi_taps(s: Emitter, v: int, size: int) -> Taps:
    """ONNX RoiAlign's bilinear taps on one axis: samples beyond [-1, size] read nothing,
    others are clamped into the image first (the reference's rules, kept exactly)."""
    valid = s.logical(LogicalOp.AND, s.compare(CompareOp.GE, v, s.like(-1, v)),
                      s.compare(CompareOp.LE, v, s.like(size, v)))
    v = s.binary(BinaryOp.MAX, v, s.like(0, v))
    low = s.unary(Activation.FLOOR, v)
    edge = s.compare(CompareOp.GE, low, s.like(size - 1, low))
    low = s.where(edge, s.like(size - 1, low), low)
    v = s.where(edge, low, v)
    frac = s.sub(v, low)
    high = s.where(edge, low, s.add(low, s.like(1, low)))
    index = s.concat([s.unsqueeze(low, (-1,)), s.unsqueeze(high, (-1,))], -1)
    weight = s.concat([s.unsqueeze(s.sub(s.like(1, frac), frac), (-1,)),
                       s.unsqueeze(frac, (-1,))], -1)
    valid = s.expand(s.unsqueeze(valid, (-1,)), s.shape_of(index))
    return Taps(index, weight, valid)


@converter("RoiAlign")
def roi_align(n: NodeContext) -> int:
    """Per roi, a grid of sampling_ratio^2 bilinear samples per output bin, then their
    average or max (max of the weighted corners, as ONNX's reference)."""
    s = n.s
    x, rois = n.input(0), s.cast(n.input(1), _COORD)
    height, width = s.shape(x).dims[2:]
    if not (isinstance(height, int) and isinstance(width, int)):
        raise n.fail(f"needs static spatial dims, got {s.shape(x)}")
    ratio = n.attr("sampling_ratio", 0)
    if ratio <= 0:
        raise n.fail("sampling_ratio=0 (a sample count per roi size) is not supported")
    out_h, out_w = n.attr("output_height", 1), n.attr("output_width", 1)
    half_pixel = n.attr("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    scale = float(n.attr("spatial_scale", 1.0))
    corner = [s.sub(s.mul(s.take(rois, i, 1), s.like(scale, rois)),
                  s.like(0.5 if half_pixel else 0.0, rois)) for i in range(4)]
    images = s.gather(x, s.cast(n.input(2), DType.I64), 0)  # [R, C, H, W]
    coords = []
    for start, end, bins, size in ((corner[1], corner[3], out_h, height),
                                   (corner[0], corner[2], out_w, width)):
        extent = s.sub(end, start)
        if not half_pixel:  # the legacy mode makes degenerate rois 1 x 1
            extent = s.binary(BinaryOp.MAX, extent, s.like(1, extent))
        step = s.div(extent, s.like(bins, extent))
        offsets = (np.arange(bins * ratio) // ratio + (np.arange(bins * ratio) % ratio + 0.5)
                   / ratio).astype(np.float32)
        v = s.add(s.unsqueeze(start, (1,)), s.mul(s.unsqueeze(step, (1,)), s.const(offsets)))
        coords.append((v, size))
    (vy, h), (vx, w) = coords
    grid = (out_h * ratio, out_w * ratio)
    ty, tx = _roi_taps(s, vy, h), _roi_taps(s, vx, w)
    taps = []
    for tap, axis in ((ty, 2), (tx, 1)):  # y varies along the grid's rows, x along columns
        assert tap.valid is not None  # _roi_taps marks which taps read the image
        parts = (_spread(s, v, axis, grid) for v in (tap.index, tap.weight, tap.valid))
        taps.append(Taps(*(s.reshape(p, (0, -1, 2)) for p in parts)))
    mode = n.attr("mode", "avg")
    combine = ReduceOp.MAX if mode == "max" else ReduceOp.SUM
    samples = gather_taps(s, images, taps, s.const(np.array(grid, np.int64)), combine)
    binned = s.reshape(samples, (0, 0, out_h, ratio, out_w, ratio))
    return s.reduce(ReduceOp.MAX if mode == "max" else ReduceOp.MEAN, binned, (3, 5), False)


def _spread(s: Emitter, t: int, axis: int, grid: tuple[int, int]) -> int:
    """A per-axis [R, n, 2] tap tensor broadcast over the other axis of the sample grid."""
    return s.expand(s.unsqueeze(t, (axis,)), s.emit(
        Concat(0), s.shape_of(t, 0, 1), s.const(np.array([*grid, 2], np.int64))))


# -- DeformConv --------------------------------------------------------------------------------
@converter("DeformConv")
def deform_conv(n: NodeContext) -> int:
    """Each kernel tap reads x bilinearly (zero outside) at its place in the window moved by
    the tap's offset (times the mask); the sampled taps then meet the weights in one
    (grouped) matmul, as im2col does for an ordinary convolution."""
    s = n.s
    x, w, offset = n.input(0), n.input(1), n.input(2)
    xs, ws, os_ = s.shape(x), s.shape(w), s.shape(offset)
    if xs.rank != 4 or not all(s.shape(v).is_static for v in (x, w, offset)):
        raise n.fail(f"needs 2-D images and static shapes, got x {xs}, w {ws}, offset {os_}")
    batch, channels, height, width = xs.static_dims
    out_channels, per_group, kh, kw = ws.static_dims
    out_h, out_w = os_.static_dims[2:]
    groups, offset_groups = n.attr("group", 1), n.attr("offset_group", 1)
    strides = n.attr("strides") or (1, 1)
    dilations = n.attr("dilations") or (1, 1)
    pads = n.attr("pads") or (0, 0, 0, 0)
    taps, places = kh * kw, out_h * out_w
    moves = s.reshape(offset, (batch, offset_groups, taps, 2, places))
    mask = None if not n.has(4) else s.reshape(n.input(4), (batch, offset_groups, taps, places))
    sampled = []
    per_offset_group = channels // offset_groups
    # where each (tap, output place) reads before its offset: rows, then columns
    tap_i, tap_j = (a.reshape(-1, 1) for a in np.meshgrid(np.arange(kh), np.arange(kw),
                                                          indexing="ij"))
    out_i, out_j = (a.reshape(1, -1) for a in np.meshgrid(np.arange(out_h), np.arange(out_w),
                                                          indexing="ij"))
    origins = (tap_i * dilations[0] + out_i * strides[0] - pads[0],
               tap_j * dilations[1] + out_j * strides[1] - pads[1])
    for g in range(offset_groups):
        axes = []
        for axis, size in ((0, height), (1, width)):
            v = s.add(s.const(origins[axis].astype(np.float32)),
                      s.take(s.take(moves, g, 1), axis, 2))  # [N, taps, places]
            v = s.reshape(v, (batch, -1))
            axes.append(_padded(s, interpolation_taps(s, v, "linear"), size, "zeros", 0, 0))
        image = s.slice(x, (g * per_offset_group,), ((g + 1) * per_offset_group,), (1,))
        values = gather_taps(s, image, axes, s.const(np.array([taps, places], np.int64)))
        if mask is not None:
            values = s.mul(values, s.unsqueeze(s.take(mask, g, 1), (1,)))
        sampled.append(values)
    columns = s.reshape(s.concat(sampled, 1), (batch, groups, per_group * taps, places))
    kernel = s.reshape(w, (groups, out_channels // groups, per_group * taps))
    y = s.reshape(s.matmul(kernel, columns), (batch, out_channels, out_h, out_w))
    if n.has(3):
        y = s.add(y, s.reshape(n.input(3), (1, -1, 1, 1)))
    return y
