"""Shape ops with ONNX semantics: Reshape, Transpose, Expand, Flatten, Squeeze, Unsqueeze,
Gather: the re-layouts and the embedding lookup a transformer's graph has.

Shape-like operands (a target shape, slice bounds, pads, repeats) come in two forms. When
the model holds them as constants they are attributes (the *static form*) and inference is
exact. When they are computed at run time the attribute is None and they are extra inputs
(the *dynamic form*): inference then still knows the output rank (from the operand's static
length) but reports `UNKNOWN` for the sizes it cannot know. Data-dependent sizes (Range,
and NonZero, Compress, OneHot's depth in `rlx.ir.ops.indexing`) are always `UNKNOWN`.

The other shape ops are families of their own, imported only by graphs that use them (issue
35): `rlx.ir.ops.slicing` (Slice, Split, Concat), `rlx.ir.ops.generators` (ShapeOf, Size,
Range, Fill), `rlx.ir.ops.indexing` (element gathers and scatters, masks) and
`rlx.ir.ops.blocks` (Pad, Tile, depth <-> space). The checks of shape-like operands below
are shared with them. `reshape_target` is shared with the kernels so that inference and
execution cannot disagree.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import ClassVar, TypeGuard

from rlx.errors import ShapeError
from rlx.ir.dtype import DType
from rlx.ir.ops.base import Op, op_axis
from rlx.ir.shape import UNKNOWN, Dim, Shape, broadcast_dims
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = ["Reshape", "Transpose", "Gather", "Expand", "Squeeze", "Unsqueeze", "Flatten"]

_INDEX_DTYPES = (DType.I32, DType.I64)


# -- checks of shape-like operands (shared with the indexing and blocks families) ------------
def op_error(op: Op, message: str) -> ShapeError:
    return ShapeError(f"{op.op_name}: {message}")


def _axes(op: Op, axes: Sequence[int], rank: int) -> list[int]:
    """Normalised, duplicate-free axes."""
    out = [op_axis(op, a, rank) for a in axes]
    if len(set(out)) != len(out):
        raise op_error(op, f"repeated axis in {tuple(axes)} for rank {rank}")
    return out


def check_min_rank(op: Op, shape: Shape, rank: int, what: str = "input") -> None:
    if shape.rank < rank:
        raise op_error(op, f"{what} must have rank >= {rank}, got {shape}")


def index_vector_length(op: Op, shape: Shape, what: str) -> Dim:
    """Check a 1-D integer operand (a shape, bounds, pads) and return its length."""
    if shape.rank != 1 or shape.dtype not in _INDEX_DTYPES:
        raise op_error(op, f"{what} must be a 1-D i32/i64 tensor, got {shape}")
    return shape.dims[0]


def static_length(op: Op, shape: Shape, what: str) -> int:
    """Length of a dynamic shape-like operand; it fixes the output rank, so it must be static."""
    n = index_vector_length(op, shape, what)
    if not isinstance(n, int):
        raise op_error(op, f"{what} sets the output rank, so its length must be static, "
                          f"got {shape}")
    return n


def check_index_dtype(op: Op, shape: Shape, what: str = "indices") -> None:
    if shape.dtype not in _INDEX_DTYPES:
        raise op_error(op, f"{what} must be i32 or i64, got {shape.dtype}")


def is_dynamic(op: Op, inputs: Sequence[Shape], attr: str, static: int,
                dynamic: Sequence[int]) -> bool:
    """Whether `op` runs in its dynamic form (attribute `attr` None, given as an input)."""
    dyn = getattr(op, attr) is None
    allowed = tuple(dynamic) if dyn else (static,)
    if len(inputs) not in allowed:
        form = f"{attr} as an input" if dyn else f"{attr} as an attribute"
        want = " or ".join(map(str, allowed))
        raise op_error(op, f"with {form} takes {want} inputs, got {len(inputs)}")
    return dyn


def dims_product(dims: Sequence[Dim]) -> Dim:
    """Product of dims: exact when static or 0, a lone symbol when the rest multiply to 1."""
    static = math.prod(d for d in dims if isinstance(d, int))
    symbols = [d for d in dims if isinstance(d, str)]
    if not symbols or static == 0:
        return static
    return symbols[0] if len(symbols) == 1 and static == 1 else UNKNOWN


def is_known(dim: Dim) -> TypeGuard[int]:
    return isinstance(dim, int)


def dims_mismatch(a: Dim, b: Dim) -> bool:
    """Two dims that are both static and differ (symbols may bind to anything)."""
    return is_known(a) and is_known(b) and a != b


# -- Reshape, Transpose, Expand, Flatten, Squeeze, Unsqueeze -----------------------------------
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
    n_in, n_out = (math.prod(d for d in ds if is_known(d)) for ds in (dims, known))
    left = Counter(d for d in dims if not is_known(d))
    left.subtract(d for d in known if not is_known(d))
    if UNKNOWN in left or any(c < 0 for c in left.values()):
        return UNKNOWN
    symbols = list(left.elements())
    if not symbols:
        if n_out == 0 or n_in % n_out:
            raise op_error(op, f"cannot reshape {list(dims)} into {list(target)}")
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
        if is_dynamic(self, inputs, "shape", 1, (2,)):
            return Shape([UNKNOWN] * static_length(self, inputs[1], "shape"), x.dtype)
        assert self.shape is not None  # the static form
        try:
            out = reshape_target(x.dims, self.shape, self.allowzero)
        except ValueError as err:
            raise op_error(self, str(err)) from None
        if -1 in out:
            out[out.index(-1)] = _infer_minus_one(self, x.dims, out)
        elif x.is_static and all(map(is_known, out)) and math.prod(out) != x.numel:
            raise op_error(self, f"cannot reshape {x} ({x.numel} elements) into {tuple(out)} "
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
            raise op_error(self, f"perm {self.perm} is not a permutation of the {rank} axes")
        return perm


@dataclass(frozen=True)
class Expand(Op):
    """ONNX Expand: broadcast `x` with `shape` both ways. Dynamic form `[x, shape]`."""

    shape: tuple[int, ...] | None
    arity: ClassVar = (1, 2)

    def infer(self, inputs):
        x = inputs[0]
        if is_dynamic(self, inputs, "shape", 1, (2,)):
            rank = max(x.rank, static_length(self, inputs[1], "shape"))
            # a static dim other than 1 survives any legal shape entry (which is 1 or equal)
            pad = [1] * (rank - x.rank)
            return x.with_dims(
                d if is_known(d) and d != 1 else UNKNOWN for d in (*pad, *x.dims))
        assert self.shape is not None  # the static form
        if any(d < 0 for d in self.shape):
            raise op_error(self, f"negative size in shape {self.shape}")
        try:
            return x.with_dims(broadcast_dims(x.dims, self.shape))
        except ShapeError as err:
            raise op_error(self, str(err)) from None


@dataclass(frozen=True)
class Flatten(Op):
    """Collapse to 2-D: `[prod(dims[:axis]), prod(dims[axis:])]`; axis may equal the rank."""

    axis: int = 1

    def infer(self, inputs):
        (x,) = inputs
        if not -x.rank <= self.axis <= x.rank:
            raise op_error(self, f"axis {self.axis} out of range for rank {x.rank}")
        axis = self.axis + x.rank if self.axis < 0 else self.axis
        return x.with_dims((dims_product(x.dims[:axis]), dims_product(x.dims[axis:])))


@dataclass(frozen=True)
class Squeeze(Op):
    """Drop size-1 axes: the listed ones, or every size-1 axis when `axes` is None. Dynamic
    form (axes None) `[x, axes]`: the output rank is known, its sizes are UNKNOWN."""

    axes: tuple[int, ...] | None = None
    arity: ClassVar = (1, 2)

    def infer(self, inputs):
        x = inputs[0]
        if self.axes is None and len(inputs) == 2:
            count = static_length(self, inputs[1], "axes")
            if count > x.rank:
                raise op_error(self, f"{count} axes for rank {x.rank}")
            return x.with_dims([UNKNOWN] * (x.rank - count))
        is_dynamic(self, inputs, "axes", 1, (1, 2))
        if self.axes is None:
            if not x.is_static:
                # a symbol might be 1 at run time: the output rank would not be known
                raise op_error(self, f"axes=None needs static dims to find the 1s, got {x}")
            return x.with_dims(d for d in x.dims if d != 1)
        axes = _axes(self, self.axes, x.rank)
        for a in axes:
            if dims_mismatch(x.dims[a], 1):
                raise op_error(self, f"axis {a} of {x} has size {x.dims[a]}, not 1")
        return x.with_dims(d for i, d in enumerate(x.dims) if i not in axes)


@dataclass(frozen=True)
class Unsqueeze(Op):
    """Insert size-1 axes; `axes` index the output (ONNX rule). Dynamic form (axes None)
    `[x, axes]`: the output rank is known, its sizes are UNKNOWN."""

    axes: tuple[int, ...] | None
    arity: ClassVar = (1, 2)

    def infer(self, inputs):
        x = inputs[0]
        if is_dynamic(self, inputs, "axes", 1, (2,)):
            return x.with_dims([UNKNOWN] * (x.rank + static_length(self, inputs[1], "axes")))
        assert self.axes is not None  # the static form
        rank = x.rank + len(self.axes)
        axes = set(_axes(self, self.axes, rank))
        rest = iter(x.dims)
        return x.with_dims(1 if i in axes else next(rest) for i in range(rank))


# -- Gather ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Gather(Op):
    """ONNX Gather `[data, indices]`: take `indices` (negative wrap) along `axis`."""

    axis: int = 0
    arity: ClassVar = (2, 2)

    def infer(self, inputs):
        data, indices = inputs
        check_min_rank(self, data, 1, "data")
        check_index_dtype(self, indices)
        axis = op_axis(self, self.axis, data.rank)
        return data.with_dims((*data.dims[:axis], *indices.dims, *data.dims[axis + 1:]))
