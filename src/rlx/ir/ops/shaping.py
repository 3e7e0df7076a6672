"""Shape and indexing ops with ONNX semantics: Reshape, Transpose, Concat, Slice, Gather, Pad, ...

Shape-like operands (a target shape, slice bounds, pads, repeats) come in two forms. When
the model holds them as constants they are attributes (the *static form*) and inference is
exact. When they are computed at run time the attribute is None and they are extra inputs
(the *dynamic form*): inference then still knows the output rank (from the operand's static
length) but reports `UNKNOWN` for the sizes it cannot know. Data-dependent sizes (NonZero,
Compress, Range, OneHot's depth) are always `UNKNOWN`.

`onnx_slice`, `slice_plan` and `reshape_target` are shared with the kernels so that
inference and execution cannot disagree.
"""

from __future__ import annotations

import enum
import math
from collections import Counter
from collections.abc import Sequence
from typing import ClassVar, TypeGuard

from rlx.errors import ShapeError
from rlx.ir.dtype import DType
from rlx.ir.ops.base import Op, expect_dtype, op_axis
from rlx.ir.shape import UNKNOWN, Dim, Shape, broadcast_dims
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = [
    "PadMode", "ScatterReduction", "DepthToSpaceMode",
    "Reshape", "Transpose", "Concat", "Slice", "Gather", "GatherElements", "GatherND",
    "ScatterND", "ScatterElements", "Expand", "Pad", "Tile", "Split", "Squeeze", "Unsqueeze",
    "Flatten", "ShapeOf", "Size", "Range", "Fill", "OneHot", "DepthToSpace", "SpaceToDepth",
    "Trilu", "NonZero", "Compress",
]

_INDEX_DTYPES = (DType.I32, DType.I64)

# Slice ends at or past this mean "to the end" (exporters write INT32_MAX or INT64_MAX), which
# lets inference keep a symbolic dim that is sliced whole.
_TO_END = 2**31 - 1


class PadMode(enum.Enum):
    CONSTANT = "constant"
    REFLECT = "reflect"
    EDGE = "edge"
    WRAP = "wrap"


class ScatterReduction(enum.Enum):
    """How ScatterND / ScatterElements combine an update with the value already there."""

    NONE = "none"
    ADD = "add"
    MUL = "mul"
    MAX = "max"
    MIN = "min"


class DepthToSpaceMode(enum.Enum):
    DCR = "dcr"  # depth-column-row: blocks outermost in the channel axis
    CRD = "crd"  # column-row-depth: channels outermost


# -- shared helpers ----------------------------------------------------------------------------
def _fail(op: Op, message: str) -> ShapeError:
    return ShapeError(f"{op.op_name}: {message}")


def _axes(op: Op, axes: Sequence[int], rank: int) -> list[int]:
    """Normalised, duplicate-free axes."""
    out = [op_axis(op, a, rank) for a in axes]
    if len(set(out)) != len(out):
        raise _fail(op, f"repeated axis in {tuple(axes)} for rank {rank}")
    return out


def _min_rank(op: Op, shape: Shape, rank: int, what: str = "input") -> None:
    if shape.rank < rank:
        raise _fail(op, f"{what} must have rank >= {rank}, got {shape}")


def _index_vector(op: Op, shape: Shape, what: str) -> Dim:
    """Check a 1-D integer operand (a shape, bounds, pads) and return its length."""
    if shape.rank != 1 or shape.dtype not in _INDEX_DTYPES:
        raise _fail(op, f"{what} must be a 1-D i32/i64 tensor, got {shape}")
    return shape.dims[0]


def _static_length(op: Op, shape: Shape, what: str) -> int:
    """Length of a dynamic shape-like operand; it fixes the output rank, so it must be static."""
    n = _index_vector(op, shape, what)
    if not isinstance(n, int):
        raise _fail(op, f"{what} sets the output rank, so its length must be static, got {shape}")
    return n


def _index_dtype(op: Op, shape: Shape, what: str = "indices") -> None:
    if shape.dtype not in _INDEX_DTYPES:
        raise _fail(op, f"{what} must be i32 or i64, got {shape.dtype}")


def _is_dynamic(op: Op, inputs: Sequence[Shape], attr: str, static: int,
                dynamic: Sequence[int]) -> bool:
    """Whether `op` runs in its dynamic form (attribute `attr` None, given as an input)."""
    dyn = getattr(op, attr) is None
    allowed = tuple(dynamic) if dyn else (static,)
    if len(inputs) not in allowed:
        form = f"{attr} as an input" if dyn else f"{attr} as an attribute"
        want = " or ".join(map(str, allowed))
        raise _fail(op, f"with {form} takes {want} inputs, got {len(inputs)}")
    return dyn


def _product(dims: Sequence[Dim]) -> Dim:
    """Product of dims: exact when static or 0, a lone symbol when the rest multiply to 1."""
    static = math.prod(d for d in dims if isinstance(d, int))
    symbols = [d for d in dims if isinstance(d, str)]
    if not symbols or static == 0:
        return static
    return symbols[0] if len(symbols) == 1 and static == 1 else UNKNOWN


def _sum(dims: Sequence[Dim]) -> Dim:
    """Sum of dims: exact when static, a lone symbol when the rest add up to 0."""
    static = sum(d for d in dims if isinstance(d, int))
    symbols = [d for d in dims if isinstance(d, str)]
    if not symbols:
        return static
    return symbols[0] if len(symbols) == 1 and static == 0 else UNKNOWN


def _known(dim: Dim) -> TypeGuard[int]:
    return isinstance(dim, int)


def _mismatch(a: Dim, b: Dim) -> bool:
    """Two dims that are both static and differ (symbols may bind to anything)."""
    return _known(a) and _known(b) and a != b


# -- Reshape, Transpose, Concat, Expand, Tile, Flatten, Squeeze, Unsqueeze ---------------------
def reshape_target(dims: Sequence[Dim], target: Sequence[int], allowzero: bool) -> list[Dim]:
    """ONNX Reshape's target with each 0 copied from `dims` (unless allowzero); -1 stays.

    Raises ValueError for a target ONNX rejects; shared by inference and the kernel.
    """
    if list(target).count(-1) > 1 or any(t < -1 for t in target):
        raise ValueError(f"bad target shape {tuple(target)}: at most one -1, no other negatives")
    if allowzero and 0 in target and -1 in target:
        raise ValueError(f"target {tuple(target)} has 0 and -1 with allowzero")
    if not allowzero and any(t == 0 and i >= len(dims) for i, t in enumerate(target)):
        raise ValueError(f"target {tuple(target)} copies a dim (0) past input rank {len(dims)}")
    return [dims[i] if t == 0 and not allowzero else t for i, t in enumerate(target)]


def _infer_minus_one(op: Op, dims: Sequence[Dim], target: Sequence[Dim]) -> Dim:
    """The dim a -1 stands for: input elements / other output dims, cancelling symbols."""
    known = [d for d in target if d != -1]
    n_in, n_out = (math.prod(d for d in ds if _known(d)) for ds in (dims, known))
    left = Counter(d for d in dims if not _known(d))
    left.subtract(d for d in known if not _known(d))
    if UNKNOWN in left or any(c < 0 for c in left.values()):
        return UNKNOWN
    symbols = list(left.elements())
    if not symbols:
        if n_out == 0 or n_in % n_out:
            raise _fail(op, f"cannot reshape {list(dims)} into {list(target)}")
        return n_in // n_out
    return symbols[0] if len(symbols) == 1 and n_in == n_out else UNKNOWN


@dataclass(frozen=True)
class Reshape(Op):
    """ONNX Reshape. Static form `[x]`; dynamic form (shape None) `[x, shape]`.

    A 0 in the target copies the input dim (unless `allowzero`), one -1 is inferred.
    """

    shape: tuple[int, ...] | None
    allowzero: bool = False
    arity: ClassVar = (1, 2)

    def infer(self, inputs):
        x = inputs[0]
        if _is_dynamic(self, inputs, "shape", 1, (2,)):
            return Shape([UNKNOWN] * _static_length(self, inputs[1], "shape"), x.dtype)
        assert self.shape is not None  # the static form
        try:
            out = reshape_target(x.dims, self.shape, self.allowzero)
        except ValueError as err:
            raise _fail(self, str(err)) from None
        if -1 in out:
            out[out.index(-1)] = _infer_minus_one(self, x.dims, out)
        elif x.is_static and all(map(_known, out)) and math.prod(out) != x.numel:
            raise _fail(self, f"cannot reshape {x} ({x.numel} elements) into {tuple(out)} "
                              f"({math.prod(out)} elements)")
        return Shape(out, x.dtype)


@dataclass(frozen=True)
class Transpose(Op):
    """Permute axes; `perm` None reverses them (ONNX default)."""

    perm: tuple[int, ...] | None = None

    def infer(self, inputs):
        (x,) = inputs
        perm = self.resolved_perm(x.rank)
        return x.with_dims(x.dims[p] for p in perm)

    def resolved_perm(self, rank: int) -> tuple[int, ...]:
        if self.perm is None:
            return tuple(reversed(range(rank)))
        perm = tuple(p + rank if p < 0 else p for p in self.perm)
        if sorted(perm) != list(range(rank)):
            raise _fail(self, f"perm {self.perm} is not a permutation of the {rank} axes")
        return perm


@dataclass(frozen=True)
class Concat(Op):
    """Join 1..N inputs of one dtype along `axis`; the other dims must agree."""

    axis: int
    arity: ClassVar = (1, None)

    def infer(self, inputs):
        expect_dtype(self, inputs)
        first = inputs[0]
        _min_rank(self, first, 1)
        axis = op_axis(self, self.axis, first.rank)
        dims = list(first.dims)
        for s in inputs[1:]:
            if s.rank != first.rank:
                raise _fail(self, f"inputs must share a rank, got {first} and {s}")
            for i, (a, b) in enumerate(zip(dims, s.dims)):
                if i != axis and _mismatch(a, b):
                    raise _fail(self, f"dim {i} differs off the concat axis {axis}: "
                                      f"{first} vs {s}")
                if i != axis and not _known(a):
                    dims[i] = b  # prefer a static size to a symbol
        dims[axis] = _sum([s.dims[axis] for s in inputs])
        return Shape(dims, first.dtype)


@dataclass(frozen=True)
class Expand(Op):
    """ONNX Expand: broadcast `x` with `shape` both ways. Dynamic form `[x, shape]`."""

    shape: tuple[int, ...] | None
    arity: ClassVar = (1, 2)

    def infer(self, inputs):
        x = inputs[0]
        if _is_dynamic(self, inputs, "shape", 1, (2,)):
            rank = max(x.rank, _static_length(self, inputs[1], "shape"))
            # a static dim other than 1 survives any legal shape entry (which is 1 or equal)
            pad = [1] * (rank - x.rank)
            return x.with_dims(
                d if _known(d) and d != 1 else UNKNOWN for d in (*pad, *x.dims))
        assert self.shape is not None  # the static form
        if any(d < 0 for d in self.shape):
            raise _fail(self, f"negative size in shape {self.shape}")
        try:
            return x.with_dims(broadcast_dims(x.dims, self.shape))
        except ShapeError as err:
            raise _fail(self, str(err)) from None


@dataclass(frozen=True)
class Tile(Op):
    """Repeat `x` `repeats[i]` times along each axis. Dynamic form `[x, repeats]`."""

    repeats: tuple[int, ...] | None
    arity: ClassVar = (1, 2)

    def infer(self, inputs):
        x = inputs[0]
        if _is_dynamic(self, inputs, "repeats", 1, (2,)):
            if _static_length(self, inputs[1], "repeats") != x.rank:
                raise _fail(self, f"repeats {inputs[1]} must have one entry per axis of {x}")
            return x.with_dims([UNKNOWN] * x.rank)
        assert self.repeats is not None  # the static form
        if len(self.repeats) != x.rank or any(r < 0 for r in self.repeats):
            raise _fail(self, f"repeats {self.repeats} must be {x.rank} non-negative counts")
        return x.with_dims(_product((d, r)) for d, r in zip(x.dims, self.repeats))


@dataclass(frozen=True)
class Flatten(Op):
    """Collapse to 2-D: `[prod(dims[:axis]), prod(dims[axis:])]`; axis may equal the rank."""

    axis: int = 1

    def infer(self, inputs):
        (x,) = inputs
        if not -x.rank <= self.axis <= x.rank:
            raise _fail(self, f"axis {self.axis} out of range for rank {x.rank}")
        axis = self.axis + x.rank if self.axis < 0 else self.axis
        return x.with_dims((_product(x.dims[:axis]), _product(x.dims[axis:])))


@dataclass(frozen=True)
class Squeeze(Op):
    """Drop size-1 axes: the listed ones, or every size-1 axis when `axes` is None. Dynamic
    form (axes None) `[x, axes]`: the output rank is known, its sizes are UNKNOWN."""

    axes: tuple[int, ...] | None = None
    arity: ClassVar = (1, 2)

    def infer(self, inputs):
        x = inputs[0]
        if self.axes is None and len(inputs) == 2:
            count = _static_length(self, inputs[1], "axes")
            if count > x.rank:
                raise _fail(self, f"{count} axes for rank {x.rank}")
            return x.with_dims([UNKNOWN] * (x.rank - count))
        _is_dynamic(self, inputs, "axes", 1, (1, 2))
        if self.axes is None:
            if not x.is_static:
                # a symbol might be 1 at run time: the output rank would not be known
                raise _fail(self, f"axes=None needs static dims to find the 1s, got {x}")
            return x.with_dims(d for d in x.dims if d != 1)
        axes = _axes(self, self.axes, x.rank)
        for a in axes:
            if _mismatch(x.dims[a], 1):
                raise _fail(self, f"axis {a} of {x} has size {x.dims[a]}, not 1")
        return x.with_dims(d for i, d in enumerate(x.dims) if i not in axes)


@dataclass(frozen=True)
class Unsqueeze(Op):
    """Insert size-1 axes; `axes` index the output (ONNX rule). Dynamic form (axes None)
    `[x, axes]`: the output rank is known, its sizes are UNKNOWN."""

    axes: tuple[int, ...] | None
    arity: ClassVar = (1, 2)

    def infer(self, inputs):
        x = inputs[0]
        if _is_dynamic(self, inputs, "axes", 1, (2,)):
            return x.with_dims([UNKNOWN] * (x.rank + _static_length(self, inputs[1], "axes")))
        assert self.axes is not None  # the static form
        rank = x.rank + len(self.axes)
        axes = set(_axes(self, self.axes, rank))
        rest = iter(x.dims)
        return x.with_dims(1 if i in axes else next(rest) for i in range(rank))


# -- Slice, Split, Pad -------------------------------------------------------------------------
def onnx_slice(start: int, end: int, step: int, dim: int) -> slice:
    """The Python slice that selects what ONNX Slice selects on an axis of size `dim`.

    ONNX clamps a negative-step start into [0, dim-1] where Python would select nothing, so
    the bounds are clamped here per the ONNX spec and an end before index 0 becomes None.
    """
    start += dim if start < 0 else 0
    end += dim if end < 0 else 0
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return slice(start, end if end >= 0 else None, step)


def slice_plan(rank: int, starts: Sequence[int], ends: Sequence[int],
               axes: Sequence[int] | None, steps: Sequence[int] | None
               ) -> list[tuple[int, int, int, int]]:
    """`(axis, start, end, step)` per sliced axis, axes normalised; ValueError if malformed.

    `axes` None means the leading axes, `steps` None means 1s (ONNX defaults).
    """
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ValueError(f"starts, ends, axes, steps differ in length: {len(starts)}, "
                         f"{len(ends)}, {len(axes)}, {len(steps)}")
    if any(not -rank <= a < rank for a in axes):
        raise ValueError(f"axes {tuple(axes)} out of range for rank {rank}")
    norm = [a % rank for a in axes]
    if len(set(norm)) != len(norm):
        raise ValueError(f"repeated axis in {tuple(axes)}")
    if 0 in steps:
        raise ValueError("a step is 0")
    return list(zip(norm, starts, ends, steps))


def _sliced_dim(dim: Dim, start: int, end: int, step: int) -> Dim:
    if isinstance(dim, int):
        return len(range(dim)[onnx_slice(start, end, step, dim)])
    return dim if (start, step) == (0, 1) and end >= _TO_END else UNKNOWN


@dataclass(frozen=True)
class Slice(Op):
    """ONNX Slice. Static form `[x]` with starts/ends (axes None = leading axes, steps None
    = 1s); dynamic form (all four None) `[x, starts, ends]` plus optional `axes`, `steps`."""

    starts: tuple[int, ...] | None = None
    ends: tuple[int, ...] | None = None
    axes: tuple[int, ...] | None = None
    steps: tuple[int, ...] | None = None
    arity: ClassVar = (1, 5)

    def infer(self, inputs):
        x = inputs[0]
        if (self.starts is None) != (self.ends is None) or (
                self.starts is None and (self.axes, self.steps) != (None, None)):
            raise _fail(self, "give starts and ends as attributes, or all bounds as inputs")
        if _is_dynamic(self, inputs, "starts", 1, (3, 4, 5)):
            for shape, what in zip(inputs[1:], ("starts", "ends", "axes", "steps")):
                _index_vector(self, shape, what)
            return x.with_dims([UNKNOWN] * x.rank)
        assert self.starts is not None and self.ends is not None  # the static form
        try:
            plan = slice_plan(x.rank, self.starts, self.ends, self.axes, self.steps)
        except ValueError as err:
            raise _fail(self, f"{err} (input {x})") from None
        dims = list(x.dims)
        for axis, start, end, step in plan:
            dims[axis] = _sliced_dim(dims[axis], start, end, step)
        return x.with_dims(dims)


@dataclass(frozen=True)
class Split(Op):
    """Cut `x` along `axis` into pieces of `sizes`; a tuple-valued node (read via TupleGet)."""

    axis: int
    sizes: tuple[int, ...]

    def infer(self, inputs):
        (x,) = inputs
        _min_rank(self, x, 1)
        axis = op_axis(self, self.axis, x.rank)
        if not self.sizes or any(s < 0 for s in self.sizes):
            raise _fail(self, f"sizes {self.sizes} must be one or more non-negative sizes")
        dim = x.dims[axis]
        if _mismatch(dim, sum(self.sizes)):
            raise _fail(self, f"sizes {self.sizes} sum to {sum(self.sizes)}, "
                              f"but axis {axis} of {x} has {dim}")
        return tuple(
            x.with_dims((*x.dims[:axis], s, *x.dims[axis + 1:])) for s in self.sizes)


@dataclass(frozen=True)
class Pad(Op):
    """ONNX Pad over all axes: `pads` = (begin_0, .., begin_n, end_0, .., end_n).

    Negative pads crop (before padding, as ONNX Runtime does). Dynamic form (pads None)
    `[x, pads]` or `[x, pads, value]` with a rank-0 value of x's dtype.
    """

    mode: PadMode = PadMode.CONSTANT
    pads: tuple[int, ...] | None = None
    value: float = 0.0
    arity: ClassVar = (1, 3)

    def infer(self, inputs):
        x = inputs[0]
        _min_rank(self, x, 1)  # a scalar has nothing to pad (and numpy cannot pad it)
        if _is_dynamic(self, inputs, "pads", 1, (2, 3)):
            if _mismatch(_index_vector(self, inputs[1], "pads"), 2 * x.rank):
                raise _fail(self, f"pads {inputs[1]} must have 2 * rank = {2 * x.rank} entries")
            if len(inputs) == 3 and (inputs[2].rank != 0 or inputs[2].dtype != x.dtype):
                raise _fail(self, f"value must be a {x.dtype} scalar, got {inputs[2]}")
            return x.with_dims([UNKNOWN] * x.rank)
        assert self.pads is not None  # the static form
        if len(self.pads) != 2 * x.rank:
            raise _fail(self, f"pads {self.pads} must have 2 * rank = {2 * x.rank} entries")
        dims = []
        for dim, begin, end in zip(x.dims, self.pads, self.pads[x.rank:]):
            if _known(dim) and dim + begin + end < 0:
                raise _fail(self, f"pads {self.pads} crop more than {x} holds")
            dims.append(dim + begin + end if _known(dim) else
                        dim if begin + end == 0 else UNKNOWN)
        return x.with_dims(dims)


# -- Gather and Scatter ------------------------------------------------------------------------
@dataclass(frozen=True)
class Gather(Op):
    """ONNX Gather `[data, indices]`: take `indices` (negative wrap) along `axis`."""

    axis: int = 0
    arity: ClassVar = (2, 2)

    def infer(self, inputs):
        data, indices = inputs
        _min_rank(self, data, 1, "data")
        _index_dtype(self, indices)
        axis = op_axis(self, self.axis, data.rank)
        return data.with_dims((*data.dims[:axis], *indices.dims, *data.dims[axis + 1:]))


def _elements_check(op: Op, data: Shape, indices: Shape, axis: int) -> int:
    """Shared checks of GatherElements / ScatterElements; returns the normalised axis."""
    _min_rank(op, data, 1, "data")
    _index_dtype(op, indices)
    axis = op_axis(op, axis, data.rank)
    if indices.rank != data.rank:
        raise _fail(op, f"indices {indices} must have the rank of data {data}")
    for i, (d, n) in enumerate(zip(data.dims, indices.dims)):
        if i != axis and _known(d) and _known(n) and n > d:
            raise _fail(op, f"indices {indices} exceed data {data} on axis {i}")
    return axis


@dataclass(frozen=True)
class GatherElements(Op):
    """ONNX GatherElements: `out[..i..] = data[..indices[..i..]..]` along `axis`."""

    axis: int = 0
    arity: ClassVar = (2, 2)

    def infer(self, inputs):
        data, indices = inputs
        _elements_check(self, data, indices, self.axis)
        return indices.with_dtype(data.dtype)


def _nd_tuple_len(op: Op, data: Shape, indices: Shape, batch_dims: int) -> int:
    """Shared checks of GatherND / ScatterND: the static length of each index tuple."""
    _index_dtype(op, indices)
    _min_rank(op, indices, batch_dims + 1, "indices")
    m = indices.dims[-1]
    if not isinstance(m, int):
        raise _fail(op, f"the last dim of indices {indices} must be static")
    if not 1 <= m <= data.rank - batch_dims:
        raise _fail(op, f"index tuples of length {m} do not fit data {data}"
                        f"{f' after {batch_dims} batch dims' if batch_dims else ''}")
    for i in range(batch_dims):
        if _mismatch(data.dims[i], indices.dims[i]):
            raise _fail(op, f"batch dim {i} differs: data {data}, indices {indices}")
    return m


@dataclass(frozen=True)
class GatherND(Op):
    """ONNX GatherND: index tuples in the last dim of `indices` pick slices of `data`."""

    batch_dims: int = 0
    arity: ClassVar = (2, 2)

    def infer(self, inputs):
        data, indices = inputs
        if self.batch_dims < 0:
            raise _fail(self, f"batch_dims {self.batch_dims} is negative")
        m = _nd_tuple_len(self, data, indices, self.batch_dims)
        return data.with_dims((*indices.dims[:-1], *data.dims[self.batch_dims + m:]))


def _check_updates(op: Op, data: Shape, updates: Shape, want: Sequence[Dim]) -> None:
    expect_dtype(op, [data, updates])
    if len(want) != updates.rank or any(map(_mismatch, want, updates.dims)):
        raise _fail(op, f"updates {updates} must have dims {list(want)}")


@dataclass(frozen=True)
class ScatterND(Op):
    """ONNX ScatterND `[data, indices, updates]`: a copy of data with slices replaced or
    combined (`reduction`) at the index tuples."""

    reduction: ScatterReduction = ScatterReduction.NONE
    arity: ClassVar = (3, 3)

    def infer(self, inputs):
        data, indices, updates = inputs
        m = _nd_tuple_len(self, data, indices, 0)
        _check_updates(self, data, updates, (*indices.dims[:-1], *data.dims[m:]))
        return data


@dataclass(frozen=True)
class ScatterElements(Op):
    """ONNX ScatterElements `[data, indices, updates]`: the inverse of GatherElements."""

    axis: int = 0
    reduction: ScatterReduction = ScatterReduction.NONE
    arity: ClassVar = (3, 3)

    def infer(self, inputs):
        data, indices, updates = inputs
        _elements_check(self, data, indices, self.axis)
        _check_updates(self, data, updates, indices.dims)
        return data


# -- shape queries and generators --------------------------------------------------------------
@dataclass(frozen=True)
class ShapeOf(Op):
    """ONNX Shape: the input's dims `[start:end]` (Python slice clamping) as a 1-D i64."""

    start: int = 0
    end: int | None = None

    def infer(self, inputs):
        (x,) = inputs
        return Shape((len(range(x.rank)[self.start:self.end]),), DType.I64)


@dataclass(frozen=True)
class Size(Op):
    """The input's element count as an i64 scalar."""

    def infer(self, inputs):
        return Shape((), DType.I64)


@dataclass(frozen=True)
class Range(Op):
    """ONNX Range `[start, limit, delta]` (rank-0, one dtype): `start + i * delta` while
    short of limit; the length is data-dependent."""

    arity: ClassVar = (3, 3)

    def infer(self, inputs):
        expect_dtype(self, inputs)
        if any(s.rank != 0 for s in inputs) or inputs[0].dtype is DType.BOOL:
            raise _fail(self, f"needs rank-0 numeric inputs, got {', '.join(map(str, inputs))}")
        return Shape((UNKNOWN,), inputs[0].dtype)


@dataclass(frozen=True)
class Fill(Op):
    """ONNX ConstantOfShape: a tensor of `shape` filled with `value`. Static form has no
    inputs; dynamic form (shape None) reads the shape from a 1-D integer input."""

    value: float
    dtype: DType
    shape: tuple[int, ...] | None = None
    arity: ClassVar = (0, 1)

    def infer(self, inputs):
        if _is_dynamic(self, inputs, "shape", 0, (1,)):
            return Shape([UNKNOWN] * _static_length(self, inputs[0], "shape"), self.dtype)
        assert self.shape is not None  # the static form
        if any(d < 0 for d in self.shape):
            raise _fail(self, f"negative size in shape {self.shape}")
        return Shape(self.shape, self.dtype)


@dataclass(frozen=True)
class OneHot(Op):
    """ONNX OneHot `[indices, depth, values=(off, on)]`: a new axis of length depth (run
    time, so UNKNOWN) at `axis`; negative indices count from depth."""

    axis: int = -1
    arity: ClassVar = (3, 3)

    def infer(self, inputs):
        indices, depth, values = inputs
        if indices.dtype is DType.BOOL or depth.dtype is DType.BOOL:
            raise _fail(self, f"indices and depth must be numeric, got {indices}, {depth}")
        if depth.rank > 1 or _mismatch(_product(depth.dims), 1):
            raise _fail(self, f"depth must hold one value, got {depth}")
        if values.rank != 1 or _mismatch(values.dims[0], 2):
            raise _fail(self, f"values must be [off, on], got {values}")
        axis = op_axis(self, self.axis, indices.rank + 1)
        dims = list(indices.dims)
        dims.insert(axis, UNKNOWN)
        return Shape(dims, values.dtype)


# -- layout ops on images and matrices ---------------------------------------------------------
def _divide(op: Op, dim: Dim, by: int, what: str) -> Dim:
    if not isinstance(dim, int):
        return UNKNOWN
    if dim % by:
        raise _fail(op, f"{what} {dim} is not divisible by {by}")
    return dim // by


def _check_image(op: Op, x: Shape, blocksize: int) -> None:
    if x.rank != 4:
        raise _fail(op, f"input must be 4-D NCHW, got {x}")
    if blocksize < 1:
        raise _fail(op, f"blocksize {blocksize} must be >= 1")


@dataclass(frozen=True)
class DepthToSpace(Op):
    """ONNX DepthToSpace on NCHW: channels `C` -> `C / b^2`, spatial dims times `b`."""

    blocksize: int
    mode: DepthToSpaceMode = DepthToSpaceMode.DCR

    def infer(self, inputs):
        (x,) = inputs
        b = self.blocksize
        _check_image(self, x, b)
        n, c, h, w = x.dims
        return x.with_dims((n, _divide(self, c, b * b, "channels"),
                            _product((h, b)), _product((w, b))))


@dataclass(frozen=True)
class SpaceToDepth(Op):
    """ONNX SpaceToDepth on NCHW: `b x b` spatial blocks move into channels."""

    blocksize: int

    def infer(self, inputs):
        (x,) = inputs
        b = self.blocksize
        _check_image(self, x, b)
        n, c, h, w = x.dims
        return x.with_dims((n, _product((c, b * b)), _divide(self, h, b, "height"),
                            _divide(self, w, b, "width")))


@dataclass(frozen=True)
class Trilu(Op):
    """Upper (or lower) triangle of the last two axes, from diagonal `k`; the rest zeroed."""

    upper: bool = True
    k: int = 0

    def infer(self, inputs):
        (x,) = inputs
        _min_rank(self, x, 2)
        return x


@dataclass(frozen=True)
class NonZero(Op):
    """Coordinates of the non-zero elements: i64 `[rank, count]` (count data-dependent)."""

    def infer(self, inputs):
        return Shape((inputs[0].rank, UNKNOWN), DType.I64)


@dataclass(frozen=True)
class Compress(Op):
    """ONNX Compress `[x, cond]`: keep the slices along `axis` where the 1-D bool cond is
    true (x flattened when axis is None); the kept length is data-dependent."""

    axis: int | None = None
    arity: ClassVar = (2, 2)

    def infer(self, inputs):
        x, cond = inputs
        if cond.rank != 1 or cond.dtype is not DType.BOOL:
            raise _fail(self, f"condition must be a 1-D bool tensor, got {cond}")
        if self.axis is None:
            return x.with_dims((UNKNOWN,))
        _min_rank(self, x, 1)
        axis = op_axis(self, self.axis, x.rank)
        return x.with_dims((*x.dims[:axis], UNKNOWN, *x.dims[axis + 1:]))
