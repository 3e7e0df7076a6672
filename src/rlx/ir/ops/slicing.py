"""Slice, Split and Concat with ONNX semantics: cutting a tensor along its axes and joining
tensors along one, a family of its own so that a graph without them (a transformer's, whose
shapes were fixed at bake) imports none of it (issue 35).

`onnx_slice` and `slice_plan` are shared with the kernels (`rlx.kernels.slicing`) so that
inference and execution cannot disagree; the checks of shape-like operands are
`rlx.ir.ops.shaping`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rlx.ir.ops.base import Op, expect_dtype, op_axis
from rlx.ir.ops.shaping import (
    check_min_rank,
    dims_mismatch,
    index_vector_length,
    is_dynamic,
    is_known,
    op_error,
)
from rlx.ir.shape import UNKNOWN, Dim, Shape
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = ["Slice", "Split", "Concat"]

# Slice ends at or past this mean "to the end" (exporters write INT32_MAX or INT64_MAX), which
# lets inference keep a symbolic dim that is sliced whole.
_TO_END = 2**31 - 1


def _sum(dims: Sequence[Dim]) -> Dim:
    """Sum of dims: exact when static, a lone symbol when the rest add up to 0."""
    static = sum(d for d in dims if isinstance(d, int))
    symbols = [d for d in dims if isinstance(d, str)]
    if not symbols:
        return static
    return symbols[0] if len(symbols) == 1 and static == 0 else UNKNOWN


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
            raise op_error(self, "give starts and ends as attributes, or all bounds as inputs")
        if is_dynamic(self, inputs, "starts", 1, (3, 4, 5)):
            for shape, what in zip(inputs[1:], ("starts", "ends", "axes", "steps")):
                index_vector_length(self, shape, what)
            return x.with_dims([UNKNOWN] * x.rank)
        assert self.starts is not None and self.ends is not None  # the static form
        try:
            plan = slice_plan(x.rank, self.starts, self.ends, self.axes, self.steps)
        except ValueError as err:
            raise op_error(self, f"{err} (input {x})") from None
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
        check_min_rank(self, x, 1)
        axis = op_axis(self, self.axis, x.rank)
        if not self.sizes or any(s < 0 for s in self.sizes):
            raise op_error(self, f"sizes {self.sizes} must be one or more non-negative sizes")
        dim = x.dims[axis]
        if dims_mismatch(dim, sum(self.sizes)):
            raise op_error(self, f"sizes {self.sizes} sum to {sum(self.sizes)}, "
                              f"but axis {axis} of {x} has {dim}")
        return tuple(
            x.with_dims((*x.dims[:axis], s, *x.dims[axis + 1:])) for s in self.sizes)


@dataclass(frozen=True)
class Concat(Op):
    """Join 1..N inputs of one dtype along `axis`; the other dims must agree."""

    axis: int
    arity: ClassVar = (1, None)

    def infer(self, inputs):
        expect_dtype(self, inputs)
        first = inputs[0]
        check_min_rank(self, first, 1)
        axis = op_axis(self, self.axis, first.rank)
        dims = list(first.dims)
        for s in inputs[1:]:
            if s.rank != first.rank:
                raise op_error(self, f"inputs must share a rank, got {first} and {s}")
            for i, (a, b) in enumerate(zip(dims, s.dims)):
                if i != axis and dims_mismatch(a, b):
                    raise op_error(self, f"dim {i} differs off the concat axis {axis}: "
                                      f"{first} vs {s}")
                if i != axis and not is_known(a):
                    dims[i] = b  # prefer a static size to a symbol
        dims[axis] = _sum([s.dims[axis] for s in inputs])
        return Shape(dims, first.dtype)
