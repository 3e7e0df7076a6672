"""Block ops with ONNX semantics, which lay an array out anew: Pad, Tile, DepthToSpace,
SpaceToDepth.

A family of their own, apart from `rlx.ir.ops.shaping`: most graphs have none once their
pads are folded into convolutions, and a graph without them imports neither these classes
nor their kernels (issue 35). Pad and Tile take their operand as an attribute (the static
form) or as an extra input (the dynamic form), as the shaping ops do.
"""

from __future__ import annotations

import enum
from typing import ClassVar

from rlx.ir.ops.base import Op
from rlx.ir.ops.shaping import (
    check_min_rank,
    dims_mismatch,
    dims_product,
    index_vector_length,
    is_dynamic,
    is_known,
    op_error,
    static_length,
)
from rlx.ir.shape import UNKNOWN, Dim, Shape
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = ["PadMode", "DepthToSpaceMode", "Pad", "Tile", "DepthToSpace", "SpaceToDepth"]


class PadMode(enum.Enum):
    CONSTANT = "constant"
    REFLECT = "reflect"
    EDGE = "edge"
    WRAP = "wrap"


class DepthToSpaceMode(enum.Enum):
    DCR = "dcr"  # depth-column-row: blocks outermost in the channel axis
    CRD = "crd"  # column-row-depth: channels outermost


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
        check_min_rank(self, x, 1)  # a scalar has nothing to pad (and numpy cannot pad it)
        if is_dynamic(self, inputs, "pads", 1, (2, 3)):
            if dims_mismatch(index_vector_length(self, inputs[1], "pads"), 2 * x.rank):
                raise op_error(self, f"pads {inputs[1]} must have 2 * rank = {2 * x.rank} entries")
            if len(inputs) == 3 and (inputs[2].rank != 0 or inputs[2].dtype != x.dtype):
                raise op_error(self, f"value must be a {x.dtype} scalar, got {inputs[2]}")
            return x.with_dims([UNKNOWN] * x.rank)
        assert self.pads is not None  # the static form
        if len(self.pads) != 2 * x.rank:
            raise op_error(self, f"pads {self.pads} must have 2 * rank = {2 * x.rank} entries")
        dims = []
        for dim, begin, end in zip(x.dims, self.pads, self.pads[x.rank:]):
            if is_known(dim) and dim + begin + end < 0:
                raise op_error(self, f"pads {self.pads} crop more than {x} holds")
            dims.append(dim + begin + end if is_known(dim) else
                        dim if begin + end == 0 else UNKNOWN)
        return x.with_dims(dims)


@dataclass(frozen=True)
class Tile(Op):
    """Repeat `x` `repeats[i]` times along each axis. Dynamic form `[x, repeats]`."""

    repeats: tuple[int, ...] | None
    arity: ClassVar = (1, 2)

    def infer(self, inputs):
        x = inputs[0]
        if is_dynamic(self, inputs, "repeats", 1, (2,)):
            if static_length(self, inputs[1], "repeats") != x.rank:
                raise op_error(self, f"repeats {inputs[1]} must have one entry per axis of {x}")
            return x.with_dims([UNKNOWN] * x.rank)
        assert self.repeats is not None  # the static form
        if len(self.repeats) != x.rank or any(r < 0 for r in self.repeats):
            raise op_error(self, f"repeats {self.repeats} must be {x.rank} non-negative counts")
        return x.with_dims(dims_product((d, r)) for d, r in zip(x.dims, self.repeats))


# -- depth and space on images ----------------------------------------------------------------
def _divide(op: Op, dim: Dim, by: int, what: str) -> Dim:
    if not isinstance(dim, int):
        return UNKNOWN
    if dim % by:
        raise op_error(op, f"{what} {dim} is not divisible by {by}")
    return dim // by


def _check_image(op: Op, x: Shape, blocksize: int) -> None:
    if x.rank != 4:
        raise op_error(op, f"input must be 4-D NCHW, got {x}")
    if blocksize < 1:
        raise op_error(op, f"blocksize {blocksize} must be >= 1")


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
                            dims_product((h, b)), dims_product((w, b))))


@dataclass(frozen=True)
class SpaceToDepth(Op):
    """ONNX SpaceToDepth on NCHW: `b x b` spatial blocks move into channels."""

    blocksize: int

    def infer(self, inputs):
        (x,) = inputs
        b = self.blocksize
        _check_image(self, x, b)
        n, c, h, w = x.dims
        return x.with_dims((n, dims_product((c, b * b)), _divide(self, h, b, "height"),
                            _divide(self, w, b, "width")))
