"""Shape and indexing ops. Shape-like operands known at import (initializers, Constant
nodes) give the static form of an op; others its dynamic form. Opset differences in where
operands live (attributes before opset 10/11/13/18, inputs after) are resolved here."""

from __future__ import annotations

import numpy as np

from rlx.ir import (
    BinaryOp,
    CompareOp,
    Compress,
    Concat,
    CumSum,
    DepthToSpace,
    DepthToSpaceMode,
    DType,
    Flatten,
    GatherElements,
    GatherND,
    NonZero,
    OneHot,
    Pad,
    PadMode,
    Range,
    ScatterElements,
    ScatterND,
    ScatterReduction,
    Size,
    Slice,
    SpaceToDepth,
    Split,
    Squeeze,
    Tile,
    Trilu,
    Unsqueeze,
)
from rlx.onnx.node import NodeContext
from rlx.onnx.registry import converter
from rlx.onnx.tensors import dtype_of

__all__ = [
    "constant", "reshape", "flatten", "transpose", "concat", "expand", "tile", "squeeze",
    "unsqueeze", "shape", "size", "range_", "constant_of_shape", "eye_like", "slice_", "split",
    "gather", "gather_elements", "gather_nd", "scatter_nd", "scatter_elements",
    "tensor_scatter", "one_hot", "non_zero", "compress", "depth_to_space", "space_to_depth",
    "trilu", "reverse_sequence", "pad",
]


@converter("Constant")
def constant(n: NodeContext) -> int:
    for name in ("value", "sparse_value"):
        if name in n.attrs:
            return n.s.const(n.attrs[name])
    typed = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
             "value_ints": np.int64}
    for name, dtype in typed.items():
        if name in n.attrs:
            return n.s.const(np.asarray(n.attrs[name], dtype))
    if "value_string" in n.attrs or "value_strings" in n.attrs:
        raise n.fail("string constants are not supported by rlx")
    raise n.fail("has no value attribute")


@converter("Reshape")
def reshape(n: NodeContext) -> int:
    target = n.static_ints(1)
    return n.s.reshape(n.input(0), target if target is not None else n.input(1),
                       bool(n.attr("allowzero", 0)))


@converter("Flatten")
def flatten(n: NodeContext) -> int:
    return n.s.emit(Flatten(n.attr("axis", 1)), n.input(0))


@converter("Transpose")
def transpose(n: NodeContext) -> int:
    x = n.input(0)
    perm = n.attr("perm")
    return n.s.transpose(x, perm if perm is not None else tuple(reversed(range(n.s.rank(x)))))


@converter("Concat")
def concat(n: NodeContext) -> int:
    if "axis" not in n.attrs:
        raise n.fail("attribute axis is required")
    return n.s.emit(Concat(n.attr("axis")), *n.all_inputs())


@converter("Expand")
def expand(n: NodeContext) -> int:
    target = n.static_ints(1)
    return n.s.expand(n.input(0), target if target is not None else n.input(1))


@converter("Tile")
def tile(n: NodeContext) -> int:
    repeats = n.static_ints(1)
    if repeats is not None:
        return n.s.emit(Tile(repeats), n.input(0))
    return n.s.emit(Tile(None), n.input(0), n.input(1))


def _axes(n: NodeContext, position: int) -> tuple[int, ...] | None:
    """Axes from the attribute (before opset 13) or a known input; None when absent (the
    callers take axes known only at run time as an input of the op's dynamic form)."""
    if n.opset < 13:
        axes = n.attr("axes")
        return None if axes is None else tuple(axes)
    return n.static_ints(position) if n.has(position) else None


@converter("Squeeze")
def squeeze(n: NodeContext) -> int:
    x = n.input(0)
    if n.opset >= 13 and n.has(1) and n.static(1) is None:
        return n.s.emit(Squeeze(None), x, n.input(1))
    axes = _axes(n, 1)
    shape = n.s.shape(x)
    if axes is None and not shape.is_static:
        # squeeze what is known to be 1; a symbolic dim is taken as not 1 (else the rank
        # would depend on the data)
        axes = tuple(i for i, d in enumerate(shape.dims) if d == 1)
    return n.s.emit(Squeeze(axes), x)


@converter("Unsqueeze")
def unsqueeze(n: NodeContext) -> int:
    x = n.input(0)
    if n.opset >= 13 and n.static(1) is None:
        return n.s.emit(Unsqueeze(None), x, n.input(1))
    axes = _axes(n, 1)
    if axes is None:
        raise n.fail("axes are required")
    return n.s.emit(Unsqueeze(axes), x)


@converter("Shape")
def shape(n: NodeContext) -> int:
    return n.s.shape_of(n.input(0), n.attr("start", 0), n.attr("end"))


@converter("Size")
def size(n: NodeContext) -> int:
    x = n.input(0)
    numel = n.s.shape(x).numel
    return n.s.scalar(numel, DType.I64) if numel is not None else n.s.emit(Size(), x)


@converter("Range")
def range_(n: NodeContext) -> int:
    # ONNX wants scalars; function bodies pass one-element vectors too
    bounds = [n.input(i) for i in range(3)]
    return n.s.emit(Range(), *(n.s.reshape(b, ()) if n.s.rank(b) else b for b in bounds))


@converter("ConstantOfShape")
def constant_of_shape(n: NodeContext) -> int:
    value = n.attr("value")
    value = np.zeros(1, np.float32) if value is None else value
    if value.size != 1:
        raise n.fail(f"value must hold one element, got shape {list(value.shape)}")
    target = n.static_ints(0)
    dtype = DType.from_numpy(value.dtype)
    return n.s.fill(target if target is not None else n.input(0), value.reshape(()).item(),
                    dtype)


@converter("EyeLike")
def eye_like(n: NodeContext) -> int:
    x = n.input(0)
    dtype = dtype_of(n.attr("dtype"), n.label) if "dtype" in n.attrs else n.s.dtype(x)
    shape = n.s.shape(x)
    if shape.rank != 2 or not shape.is_static:
        raise n.fail(f"input must be a 2-D tensor of static shape, got {shape}")
    rows, cols = shape.static_dims
    return n.s.const(np.eye(rows, cols, n.attr("k", 0), dtype=dtype.numpy))


# -- slicing and splitting ---------------------------------------------------------------------
@converter("Slice")
def slice_(n: NodeContext) -> int:
    x = n.input(0)
    if n.opset < 10:
        axes = n.attr("axes")
        return n.s.emit(Slice(tuple(n.attr("starts")), tuple(n.attr("ends")),
                              None if axes is None else tuple(axes)), x)
    given = [n.has(i) for i in range(1, 5)]
    bounds = [n.static_ints(i) if g else None for i, g in zip(range(1, 5), given)]
    if all(b is not None for b, g in zip(bounds, given) if g):
        return n.s.emit(Slice(*bounds), x)
    operands = [n.input(1), n.input(2)]
    if given[3]:
        operands += [n.input(3) if given[2] else _leading_axes(n, operands[0]), n.input(4)]
    elif given[2]:
        operands.append(n.input(3))
    return n.s.emit(Slice(), x, *operands)


def _leading_axes(n: NodeContext, starts: int) -> int:
    """ONNX's default axes [0, len(starts)) as a node, for a Slice given steps but no axes."""
    s = n.s
    length = s.shape(starts).dims[0]
    if isinstance(length, int):
        return s.const(np.arange(length, dtype=np.int64))
    return s.emit(Range(), s.scalar(0, DType.I64), s.reshape(s.shape_of(starts), ()),
                  s.scalar(1, DType.I64))


@converter("Split")
def split(n: NodeContext):
    x = n.input(0)
    axis = n.attr("axis", 0)
    count = len(n.outputs)
    sizes = tuple(n.attr("split")) if n.opset < 13 and n.attr("split") else \
        n.static_ints(1) if n.opset >= 13 and n.has(1) else None
    if sizes is None and n.opset >= 13 and n.has(1):
        return _split_at_run_time(n, x, axis, n.input(1), count)
    dim = n.s.shape(x).dims[axis % max(n.s.rank(x), 1)]
    if sizes is None:
        count = n.attr("num_outputs", count)
        if not isinstance(dim, int):
            return _split_evenly_at_run_time(n, x, axis, count)
        chunk = -(-dim // count)  # the last part is smaller when uneven (opset 18)
        sizes = tuple(min(chunk, max(dim - i * chunk, 0)) for i in range(count))
    node = n.s.emit(Split(axis, sizes), x)
    return n.s.parts(node)


def _split_at_run_time(n: NodeContext, x: int, axis: int, sizes: int, count: int):
    """Split with sizes known only at run time: one dynamic Slice per part."""
    s = n.s
    sizes = s.cast(sizes, DType.I64)
    ends = s.emit(CumSum(0), sizes)
    starts = s.sub(ends, sizes)
    axes = s.const(np.array([axis], np.int64))
    return [s.emit(Slice(), x, s.slice(starts, (i,), (i + 1,), (0,)),
                   s.slice(ends, (i,), (i + 1,), (0,)), axes) for i in range(count)]


def _split_evenly_at_run_time(n: NodeContext, x: int, axis: int, count: int):
    """Equal parts of ceil(dim / count) (the last smaller) of a dim known at run time."""
    s = n.s
    dim = s.reshape(s.shape_of(x, axis % s.rank(x), axis % s.rank(x) + 1), (1,))
    chunk = s.div(s.add(dim, s.const(np.array([count - 1], np.int64))),
                  s.const(np.array([count], np.int64)))
    axes = s.const(np.array([axis], np.int64))
    bounds = [s.binary(BinaryOp.MIN, s.mul(chunk, s.const(np.array([i], np.int64))), dim)
              for i in range(count + 1)]
    return [s.emit(Slice(), x, bounds[i], bounds[i + 1], axes) for i in range(count)]


# -- gather and scatter ------------------------------------------------------------------------
@converter("Gather")
def gather(n: NodeContext) -> int:
    return n.s.gather(n.input(0), n.input(1), n.attr("axis", 0))


@converter("GatherElements")
def gather_elements(n: NodeContext) -> int:
    return n.s.emit(GatherElements(n.attr("axis", 0)), n.input(0), n.input(1))


@converter("GatherND")
def gather_nd(n: NodeContext) -> int:
    return n.s.emit(GatherND(n.attr("batch_dims", 0)), n.input(0), n.input(1))


def _reduction(n: NodeContext) -> ScatterReduction:
    return n.enum_attr(ScatterReduction, "reduction", "none")


@converter("ScatterND")
def scatter_nd(n: NodeContext) -> int:
    return n.s.emit(ScatterND(_reduction(n)), n.input(0), n.input(1), n.input(2))


@converter("ScatterElements", "Scatter")
def scatter_elements(n: NodeContext) -> int:
    return n.s.emit(ScatterElements(n.attr("axis", 0), _reduction(n)),
                    n.input(0), n.input(1), n.input(2))


@converter("TensorScatter")
def tensor_scatter(n: NodeContext) -> int:
    """Write `update` into the cache along `axis` from each batch's write index (wrapping
    around the cache in circular mode): one ScatterElements."""
    s = n.s
    cache, update = n.input(0), n.input(1)
    rank = s.rank(cache)
    axis = n.attr("axis", -2) % rank
    mode = n.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise n.fail(f"unknown mode {mode!r}")
    start = s.cast(n.input(2), DType.I64) if n.has(2) else \
        s.fill(s.shape_of(cache, 0, 1), 0, DType.I64)
    start = s.reshape(start, [-1] + [1] * (rank - 1))
    zero, one = s.scalar(0, DType.I64), s.scalar(1, DType.I64)
    steps = s.emit(Range(), zero, s.dim(update, axis), one)
    steps = s.reshape(steps, [-1 if a == axis else 1 for a in range(rank)])
    index = s.add(start, steps)
    if mode == "circular":
        index = s.binary(BinaryOp.MOD, index, s.dim(cache, axis))
    index = s.expand(index, s.shape_of(update))
    return s.emit(ScatterElements(axis), cache, index, update)


@converter("OneHot")
def one_hot(n: NodeContext) -> int:
    return n.s.emit(OneHot(n.attr("axis", -1)), n.input(0), n.input(1), n.input(2))


@converter("NonZero")
def non_zero(n: NodeContext) -> int:
    return n.s.emit(NonZero(), n.input(0))


@converter("Compress")
def compress(n: NodeContext) -> int:
    return n.s.emit(Compress(n.attr("axis")), n.input(0), n.input(1))


# -- layout ------------------------------------------------------------------------------------
@converter("DepthToSpace")
def depth_to_space(n: NodeContext) -> int:
    mode = n.enum_attr(DepthToSpaceMode, "mode", "DCR", exact=False)
    return n.s.emit(DepthToSpace(n.attr("blocksize"), mode), n.input(0))


@converter("SpaceToDepth")
def space_to_depth(n: NodeContext) -> int:
    x, b = n.input(0), n.attr("blocksize")
    if n.attr("mode", "DCR") == "DCR":
        return n.s.emit(SpaceToDepth(b), x)
    # CRD (opset 25+): channels outermost, the inverse of DepthToSpace's CRD mode
    s = n.s
    shape = s.shape(x)
    if shape.rank != 4 or not shape.is_static:
        raise n.fail(f"mode CRD needs a static 4-D input, got {shape}")
    batch, c, h, w = shape.static_dims
    blocks = s.reshape(x, (batch, c, h // b, b, w // b, b))
    return s.reshape(s.transpose(blocks, (0, 1, 3, 5, 2, 4)), (batch, c * b * b, h // b, w // b))


@converter("Trilu")
def trilu(n: NodeContext) -> int:
    x, upper = n.input(0), bool(n.attr("upper", 1))
    k = n.static_scalar(1, 0) if n.static(1) is not None or not n.has(1) else None
    if k is not None:
        return n.s.emit(Trilu(upper, int(k)), x)
    # k known at run time: keep element (i, j) where j - i >= k (upper) or <= k (lower)
    s = n.s
    rows, cols = (_arange(s, x, a) for a in (-2, -1))
    offset = s.sub(s.unsqueeze(cols, (0,)), s.unsqueeze(rows, (1,)))
    k = s.reshape(s.cast(n.input(1), DType.I64), ())
    keep = s.compare(CompareOp.GE if upper else CompareOp.LE, offset, k)
    return s.where(keep, x, s.like(0, x))


def _arange(s, x: int, axis: int) -> int:
    """[0, 1, ..., dim - 1] for x's dim `axis` (a constant when the dim is static)."""
    dim = s.shape(x).dims[axis]
    if isinstance(dim, int):
        return s.const(np.arange(dim, dtype=np.int64))
    return s.emit(Range(), s.scalar(0, DType.I64), s.dim(x, axis), s.scalar(1, DType.I64))


@converter("ReverseSequence")
def reverse_sequence(n: NodeContext) -> int:
    """Gather along time with index `len - 1 - t` inside each sequence, `t` past its end."""
    s = n.s
    x, lens = n.input(0), s.cast(n.input(1), DType.I64)
    time_axis = n.attr("time_axis", 0)  # batch_axis is then the other of the two
    t = _arange(s, x, time_axis)
    t = s.unsqueeze(t, (1,) if time_axis == 0 else (0,))  # [T, 1] or [1, T]
    lens = s.unsqueeze(lens, (0,) if time_axis == 0 else (1,))
    index = s.where(s.compare(CompareOp.LT, t, lens),
                    s.sub(s.sub(lens, s.scalar(1, DType.I64)), t), t)
    trailing = tuple(range(2, s.rank(x)))
    index = s.expand(s.unsqueeze(index, trailing), s.shape_of(x))
    return s.emit(GatherElements(time_axis), x, index)


# -- padding -----------------------------------------------------------------------------------
@converter("Pad")
def pad(n: NodeContext) -> int:
    s = n.s
    x = n.input(0)
    rank = s.rank(x)
    mode = n.enum_attr(PadMode, "mode", "constant")
    if n.opset < 11:
        return s.emit(Pad(mode, tuple(n.attr("pads")), float(n.attr("value", 0.0))), x)
    pads = _full_pads(n, rank)
    value = n.static(2) if n.has(2) else np.zeros((), s.dtype(x).numpy)
    if isinstance(pads, tuple) and value is not None and np.isfinite(value).all() and \
            abs(float(value.reshape(()).item())) < 2 ** 53:
        return s.emit(Pad(mode, pads, float(value.reshape(()).item())), x)
    operands = [s.shape_tensor(pads)]
    if mode is PadMode.CONSTANT and n.has(2):
        operands.append(s.reshape(n.input(2), ()))
    return s.emit(Pad(mode, None), x, *operands)


def _full_pads(n: NodeContext, rank: int) -> tuple[int, ...] | int:
    """Pads over every axis (begins then ends): static when known, else a node."""
    s = n.s
    pads, axes = n.static_ints(1), n.static_ints(3) if n.has(3) else tuple(range(rank))
    if pads is not None and axes is not None:
        full = [0] * (2 * rank)
        for i, a in enumerate(axes):
            full[a % rank], full[a % rank + rank] = pads[i], pads[i + len(axes)]
        return tuple(full)
    pad_values = s.cast(n.input(1), DType.I64)
    if not n.has(3):
        return pad_values
    # scatter the given axes' pads into zeros: index a (begin) and a + rank (end)
    given = s.cast(n.input(3), DType.I64)
    r = s.scalar(rank, DType.I64)
    given = s.where(s.compare(CompareOp.LT, given, s.scalar(0, DType.I64)), s.add(given, r),
                    given)
    index = s.emit(Concat(0), given, s.add(given, r))
    return s.emit(ScatterElements(0), s.fill((2 * rank,), 0, DType.I64), index, pad_values)
