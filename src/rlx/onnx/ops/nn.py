"""Convolution, pooling, normalisation and softmax-like ops.

`auto_pad`, `output_shape` and the optional kernel/stride/dilation attributes are turned
into explicit per-axis tuples here; softmax-like ops before opset 13 (which flatten the
input to 2-D at `axis`) are rewritten to the single-axis form where they mean the same.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from rlx.ir import (
    Activation,
    ArgMax,
    BatchNormInference,
    BinaryOp,
    CompareOp,
    Concat,
    Conv,
    ConvTranspose,
    DType,
    GatherElements,
    GlobalPool,
    InstanceNorm,
    LayerNorm,
    LogSoftmax,
    OneHot,
    Pad,
    PadMode,
    Pool,
    PoolKind,
    ReduceOp,
    SamePad,
    ScatterElements,
    Softmax,
)
from rlx.ir.shape import normalize_axis
from rlx.onnx.node import NodeContext
from rlx.onnx.registry import converter

__all__ = [
    "conv", "emit_conv", "conv_geometry", "conv_transpose", "max_pool", "average_pool", "lp_pool",
    "global_average_pool", "global_max_pool", "global_lp_pool", "max_unpool", "batch_norm",
    "instance_norm", "layer_norm", "lp_normalization", "lrn", "softmax", "log_softmax",
    "hardmax",
]

# -- sliding-window attributes -----------------------------------------------------------------


def _per_axis(n: NodeContext, name: str, count: int, default: int) -> tuple[int, ...]:
    values = n.attr(name)
    return tuple(values) if values else (default,) * count


def _pads(n: NodeContext, sizes: Sequence, kernel: Sequence[int], strides: Sequence[int],
          dilations: Sequence[int]) -> tuple[tuple[int, ...], SamePad | None]:
    """Explicit (begin..., end...) pads from `pads` / `auto_pad`, or () and the SAME rule
    where the pads depend on a symbolic size (a stride above 1): the op then works them
    out at run time."""
    auto = n.attr("auto_pad", "NOTSET") or "NOTSET"
    if auto == "NOTSET":
        return _per_axis(n, "pads", 2 * len(kernel), 0), None
    if auto == "VALID":
        return (0,) * (2 * len(kernel)), None
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise n.fail(f"unknown auto_pad {auto!r}")
    same = SamePad(auto)
    if any(not isinstance(size, int) and stride > 1 for size, stride in zip(sizes, strides)):
        return (), same
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    # a symbolic size with stride 1 pads extent - 1 whatever it is: any stand-in works
    return same.pads([s if isinstance(s, int) else 1 for s in sizes], extents, strides), None


def _window(n: NodeContext, x: int, kernel: Sequence[int]):
    """(strides, pads, dilations, same) of a conv/pool node over the spatial dims of x."""
    count = len(kernel)
    strides = _per_axis(n, "strides", count, 1)
    dilations = _per_axis(n, "dilations", count, 1)
    pads, same = _pads(n, n.s.shape(x).dims[2:], kernel, strides, dilations)
    return strides, pads, dilations, same


def _kernel(n: NodeContext, w: int | None = None) -> tuple[int, ...]:
    kernel = n.attr("kernel_shape")
    if kernel:
        return tuple(kernel)
    if w is None:
        raise n.fail("kernel_shape is required")
    dims = n.s.shape(w).dims[2:]
    if not all(isinstance(d, int) for d in dims):
        raise n.fail(f"the kernel size must be static, got {list(dims)}")
    return tuple(int(d) for d in dims)


# -- convolution -------------------------------------------------------------------------------
@converter("Conv")
def conv(n: NodeContext) -> int:
    return emit_conv(n, n.input(0), n.input(1), n.optional(2))


def emit_conv(n: NodeContext, x: int, w: int, b: int | None) -> int:
    """A Conv over x, w (and bias b) with the window attributes of node `n`."""
    op = Conv(*conv_geometry(n, x, w))
    return n.s.emit(op, x, w) if b is None else n.s.emit(op, x, w, b)


def conv_geometry(n: NodeContext, x: int, w: int) -> tuple:
    """(strides, pads, dilations, groups, same) of a convolution node `n` of x by w: the
    fields of Conv and of the integer convolutions alike."""
    strides, pads, dilations, same = _window(n, x, _kernel(n, w))
    return strides, pads, dilations, n.attr("group", 1), same


@converter("ConvTranspose")
def conv_transpose(n: NodeContext) -> int:
    x, w = n.input(0), n.input(1)
    kernel = _kernel(n, w)
    count = len(kernel)
    strides = _per_axis(n, "strides", count, 1)
    dilations = _per_axis(n, "dilations", count, 1)
    extra = list(_per_axis(n, "output_padding", count, 0))
    sizes = n.s.shape(x).dims[2:]
    auto = n.attr("auto_pad", "NOTSET") or "NOTSET"
    target = n.attr("output_shape")
    if target is None and auto in ("SAME_UPPER", "SAME_LOWER"):
        # out = in * stride: the pads (stride * (in - 1) + extent - out) do not depend on
        # the size, so a symbolic one takes any stand-in
        sizes = tuple(s if isinstance(s, int) else 1 for s in sizes)
        target = [s * st for s, st in zip(sizes, strides)]
    if target is None:
        pads = (0,) * (2 * count) if auto == "VALID" else _per_axis(n, "pads", 2 * count, 0)
    else:
        pads = _transposed_pads(n, sizes, kernel, strides, dilations, extra,
                                tuple(target)[-count:], upper=auto == "SAME_UPPER")
    inputs = [x, w] + ([n.input(2)] if n.has(2) else [])
    op = ConvTranspose(strides, pads, dilations, n.attr("group", 1), tuple(extra))
    return n.s.emit(op, *inputs)


def _transposed_pads(n: NodeContext, sizes, kernel, strides, dilations, extra: list[int],
                     target: Sequence[int | None], upper: bool) -> tuple[int, ...]:
    """Pads giving a transposed convolution the requested output size; a negative total
    (the output is larger than the full scatter) becomes more output padding."""
    begins, ends = [], []
    for i, (size, k, s, d, out) in enumerate(zip(sizes, kernel, strides, dilations, target)):
        if not isinstance(size, int) or out is None:
            raise n.fail(f"output_shape / auto_pad need static spatial dims, got {list(sizes)}")
        total = s * (size - 1) + extra[i] + (k - 1) * d + 1 - out
        if total < 0:
            extra[i] -= total
            total = 0
        small = total // 2
        begins.append(small if upper else total - small)
        ends.append(total - small if upper else small)
    return (*begins, *ends)


# -- pooling -----------------------------------------------------------------------------------
def _pool(n: NodeContext, kind: PoolKind, x: int) -> int:
    kernel = _kernel(n)
    strides, pads, dilations, same = _window(n, x, kernel)
    return n.s.emit(Pool(kind, kernel, strides, pads, dilations, bool(n.attr("ceil_mode", 0)),
                         bool(n.attr("count_include_pad", 0)), same), x)


@converter("MaxPool")
def max_pool(n: NodeContext):
    x = n.input(0)
    values = _pool(n, PoolKind.MAX, x)
    return [values, _max_indices(n, x, values) if n.wants(1) else None]


def _max_indices(n: NodeContext, x: int, values: int) -> int:
    """MaxPool's Indices: the flat index (into x, row-major or, with storage_order=1,
    column-major over the spatial dims) of each window's first largest element.

    Every tap's strided slice of the padded input is stacked on a new last axis; ArgMax
    picks the tap, which a table of flat indices (static: the shapes are) turns into the
    element's position."""
    s = n.s
    shape = s.shape(x)
    if not shape.is_static:
        raise n.fail(f"Indices need a static input shape, got {shape}")
    kernel = _kernel(n)
    strides, pads, dilations, _ = _window(n, x, kernel)  # static sizes: no run-time pads
    count = len(kernel)
    dims = shape.static_dims
    sizes, out = dims[2:], s.shape(values).static_dims[2:]
    ends = [max(e, (o - 1) * st + (k - 1) * d + 1 - size - b) for o, st, k, d, size, b, e in
            zip(out, strides, kernel, dilations, sizes, pads, pads[count:])]
    lowest = -np.inf if shape.dtype.is_float else np.iinfo(shape.dtype.numpy).min
    width = s.const(np.array([0, 0, *pads[:count], 0, 0, *ends], np.int64))
    padded = s.emit(Pad(PadMode.CONSTANT, None), x, width, s.like(lowest, x))
    taps = []
    for tap in np.ndindex(*kernel):
        starts = [t * d for t, d in zip(tap, dilations)]
        stops = [b + (o - 1) * st + 1 for b, o, st in zip(starts, out, strides)]
        taps.append(s.unsqueeze(s.slice(padded, starts, stops, range(2, 2 + count), strides),
                                (-1,)))
    best = s.emit(ArgMax(-1, True), s.concat(taps, -1))
    table = _tap_indices(sizes, out, kernel, strides, dilations, pads[:count],
                         bool(n.attr("storage_order", 0)))
    table = s.expand(s.const(table), (*dims[:2], *out, table.shape[-1]))
    spatial = s.squeeze(s.emit(GatherElements(-1), table, best), (-1,))
    planes = np.arange(dims[0] * dims[1], dtype=np.int64) * math.prod(sizes)
    return s.add(spatial, s.const(planes.reshape(*dims[:2], *(1,) * count)))


def _tap_indices(sizes, out, kernel, strides, dilations, begins, column_major: bool):
    """[*out, taps]: the flat spatial index each window tap reads (padding never wins)."""
    count = len(sizes)
    flat = np.zeros([*out, *kernel], np.int64)
    order = reversed(range(count)) if column_major else range(count)
    scale = 1
    for i in reversed(list(order)):
        pos = np.arange(out[i])[:, None] * strides[i] + np.arange(kernel[i]) * dilations[i] \
            - begins[i]
        shape = [1] * (2 * count)
        shape[i], shape[count + i] = out[i], kernel[i]
        flat = flat + pos.reshape(shape) * scale
        scale *= sizes[i]
    return flat.reshape(*out, -1)


@converter("AveragePool")
def average_pool(n: NodeContext) -> int:
    return _pool(n, PoolKind.AVG, n.input(0))


@converter("LpPool")
def lp_pool(n: NodeContext) -> int:
    """(sum over the window of |x|^p)^(1/p): an average pool counting the zero padding,
    times the window size."""
    s = n.s
    x = n.input(0)
    p = float(n.attr("p", 2))
    kernel = _kernel(n)
    strides, pads, dilations, same = _window(n, x, kernel)
    if n.attr("ceil_mode", 0):
        raise n.fail("ceil_mode=1 is not supported")
    powered = _abs_pow(s, x, p)
    avg = s.emit(Pool(PoolKind.AVG, kernel, strides, pads, dilations, False, True, same),
                 powered)
    total = s.mul(avg, s.like(math.prod(kernel), avg))
    return _root(s, total, p)


def _abs_pow(s, x: int, p: float) -> int:
    if p == 2.0:
        return s.mul(x, x)
    a = s.unary(Activation.ABS, x)
    return a if p == 1.0 else s.binary(BinaryOp.POW, a, s.like(p, a))


def _root(s, x: int, p: float) -> int:
    if p == 1.0:
        return x
    if p == 2.0:
        return s.unary(Activation.SQRT, x)
    return s.binary(BinaryOp.POW, x, s.like(1.0 / p, x))


@converter("GlobalAveragePool")
def global_average_pool(n: NodeContext) -> int:
    return n.s.emit(GlobalPool(PoolKind.AVG), n.input(0))


@converter("GlobalMaxPool")
def global_max_pool(n: NodeContext) -> int:
    return n.s.emit(GlobalPool(PoolKind.MAX), n.input(0))


@converter("GlobalLpPool")
def global_lp_pool(n: NodeContext) -> int:
    s = n.s
    x = n.input(0)
    p = float(n.attr("p", 2))
    axes = tuple(range(2, s.rank(x)))
    if p in (1.0, 2.0):
        return s.reduce(ReduceOp.L1 if p == 1.0 else ReduceOp.L2, x, axes)
    return _root(s, s.reduce(ReduceOp.SUM, _abs_pow(s, x, p), axes), p)


@converter("MaxUnpool")
def max_unpool(n: NodeContext) -> int:
    """Scatter the values to their flat indices in zeros of the pooled input's shape, then
    pad that at the end to `output_shape` when one is given (ONNX's reference)."""
    s = n.s
    x, indices = n.input(0), n.s.cast(n.input(1), DType.I64)
    kernel = _kernel(n)
    shape = s.shape(x)
    strides = _per_axis(n, "strides", len(kernel), 1)
    pads = _per_axis(n, "pads", 2 * len(kernel), 0)
    if not shape.is_static:
        raise n.fail(f"needs a static input shape, got {shape}")
    count = len(kernel)
    dims = shape.static_dims
    inferred = (*dims[:2], *((d - 1) * st + k - pads[i] - pads[i + count] for i, (d, st, k)
                             in enumerate(zip(dims[2:], strides, kernel))))
    zeros = s.fill((math.prod(inferred),), 0, shape.dtype)
    flat = s.emit(ScatterElements(0), zeros, s.reshape(indices, (-1,)), s.reshape(x, (-1,)))
    y = s.reshape(flat, inferred)
    if not n.has(2):
        return y
    grow = s.sub(s.cast(n.input(2), DType.I64), s.const(np.array(inferred, np.int64)))
    width = s.emit(Concat(0), s.const(np.zeros(len(inferred), np.int64)), grow)
    return s.emit(Pad(PadMode.CONSTANT, None), y, width)


# -- normalisation -----------------------------------------------------------------------------
def _as_dtype(n: NodeContext, ids: Sequence[int], dtype: DType) -> list[int]:
    return [n.s.cast(i, dtype) for i in ids]


@converter("BatchNormalization")
def batch_norm(n: NodeContext):
    s = n.s
    x = n.input(0)
    dtype = s.dtype(x)
    params = _as_dtype(n, [n.input(i) for i in range(1, 5)], dtype)
    eps = float(n.attr("epsilon", 1e-5))
    training = bool(n.attr("training_mode", 0)) if n.opset >= 14 else \
        any(n.wants(i) for i in range(1, 5))
    if training:
        return _batch_norm_training(n, x, params, eps)
    if n.opset < 9 and not n.attr("spatial", 1):
        # per-activation statistics: parameters shaped like x without its batch axis
        scale, bias, mean, var = (s.unsqueeze(p, (0,)) for p in params)
        inv = s.div(scale, s.unary(Activation.SQRT, s.add(var, s.like(eps, var))))
        return [s.add(s.mul(s.sub(x, mean), inv), bias)]
    return [s.emit(BatchNormInference(eps), x, *params)]


def _batch_norm_training(n: NodeContext, x: int, params: list[int], eps: float):
    """Normalise with the batch's statistics; update the running ones with momentum."""
    s = n.s
    scale, bias, mean, var = params
    axes = [0, *range(2, s.rank(x))]
    batch_mean = s.reduce(ReduceOp.MEAN, x, axes, keepdims=False)
    centred = s.sub(x, s.unsqueeze(batch_mean, tuple(range(1, s.rank(x) - 1))))
    batch_var = s.reduce(ReduceOp.MEAN, s.mul(centred, centred), axes, keepdims=False)
    y = s.emit(BatchNormInference(eps), x, scale, bias, batch_mean, batch_var)
    momentum = float(n.attr("momentum", 0.9))

    def running(old: int, new: int) -> int:
        return s.add(s.mul(old, s.like(momentum, old)), s.mul(new, s.like(1 - momentum, new)))

    return [y, running(mean, batch_mean), running(var, batch_var)]


@converter("InstanceNormalization")
def instance_norm(n: NodeContext) -> int:
    x = n.input(0)
    params = _as_dtype(n, [n.input(1), n.input(2)], n.s.dtype(x))
    return n.s.emit(InstanceNorm(float(n.attr("epsilon", 1e-5))), x, *params)


@converter("LayerNormalization")
def layer_norm(n: NodeContext):
    s = n.s
    x = n.input(0)
    axis = n.attr("axis", -1)
    eps = float(n.attr("epsilon", 1e-5))
    dtype = s.dtype(x)
    params = _as_dtype(n, [n.input(1)] + ([n.input(2)] if n.has(2) else []), dtype)
    if not (n.wants(1) or n.wants(2)):
        return [s.emit(LayerNorm(axis, eps), x, *params)]
    # Mean and InvStdDev asked for: spelled out in the stash type (float32 by default)
    stash = DType.F32 if n.attr("stash_type", 1) == 1 else DType.F64
    axes = tuple(range(normalize_axis(axis, s.rank(x)), s.rank(x)))
    xs = s.cast(x, stash)
    mean = s.reduce(ReduceOp.MEAN, xs, axes)
    centred = s.sub(xs, mean)
    var = s.reduce(ReduceOp.MEAN, s.mul(centred, centred), axes)
    inv = s.unary(Activation.RSQRT, s.add(var, s.like(eps, var)))
    y = s.mul(s.cast(s.mul(centred, inv), dtype), params[0])
    if len(params) == 2:
        y = s.add(y, params[1])
    return [y, mean, inv]


@converter("LpNormalization")
def lp_normalization(n: NodeContext) -> int:
    s = n.s
    x = n.input(0)
    p = n.attr("p", 2)
    if p not in (1, 2):
        raise n.fail(f"p must be 1 or 2, got {p}")
    norm = s.reduce(ReduceOp.L1 if p == 1 else ReduceOp.L2, x, (n.attr("axis", -1),))
    zero = s.like(0, norm)
    # a zero vector stays zero (rather than 0 / 0)
    safe = s.where(s.compare(CompareOp.EQ, norm, zero), s.like(1, norm), norm)
    return s.div(x, safe)


@converter("LRN")
def lrn(n: NodeContext) -> int:
    """x / (bias + alpha / size * sum of x^2 over `size` neighbouring channels) ^ beta; the
    channel sum is an average pool over a new unit axis, counting the zero padding."""
    s = n.s
    x = n.input(0)
    size = n.attr("size")
    alpha, beta = float(n.attr("alpha", 1e-4)), float(n.attr("beta", 0.75))
    bias = float(n.attr("bias", 1.0))
    rank = s.rank(x)
    squares = s.unsqueeze(s.mul(x, x), (1,))
    kernel = (size,) + (1,) * (rank - 2)
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    pads = (lo,) + (0,) * (rank - 2) + (hi,) + (0,) * (rank - 2)
    avg = s.emit(Pool(PoolKind.AVG, kernel, (), pads, (), False, True), squares)
    total = s.squeeze(avg, (1,))
    base = s.add(s.like(bias, total), s.mul(total, s.like(alpha, total)))
    return s.div(x, s.binary(BinaryOp.POW, base, s.like(beta, base)))


# -- softmax family ----------------------------------------------------------------------------
def _along_axis(n: NodeContext, apply) -> int:
    """Apply a one-axis op the way the node's opset means it: before opset 13 the input is
    seen as 2-D [prod(dims[:axis]), prod(dims[axis:])] (one axis when axis is the last)."""
    s = n.s
    x = n.input(0)
    rank = s.rank(x)
    if n.opset >= 13:
        return apply(x, n.attr("axis", -1))
    axis = normalize_axis(n.attr("axis", 1), max(rank, 1))
    if axis >= rank - 1:
        return apply(x, -1)
    flat, shape = s.to_2d(x, axis)
    return s.reshape(apply(flat, -1), shape)


@converter("Softmax")
def softmax(n: NodeContext) -> int:
    return _along_axis(n, lambda x, axis: n.s.emit(Softmax(axis), x))


@converter("LogSoftmax")
def log_softmax(n: NodeContext) -> int:
    return _along_axis(n, lambda x, axis: n.s.emit(LogSoftmax(axis), x))


@converter("Hardmax")
def hardmax(n: NodeContext) -> int:
    """One-hot of the (first) largest element along the axis."""
    s = n.s

    def apply(x: int, axis: int) -> int:
        index = s.emit(ArgMax(axis, False), x)
        values = s.const(np.array([0, 1], s.dtype(x).numpy))
        return s.emit(OneHot(axis), index, s.dim(x, axis), values)

    return _along_axis(n, apply)
