"""Neural-network ops: softmax and layer normalisation, a transformer's (the per-channel ops
of image models are `rlx.ir.ops.channelwise`', convolution and pooling
`rlx.ir.ops.windows`', resize `rlx.ir.ops.resize`').

Semantics are ONNX's. The ONNX importer resolves opset quirks (optional inputs given as
constants) into explicit attributes, so every op here is fully spelled out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rlx.errors import ShapeError
from rlx.ir.ops.base import Op, expect_dtype, op_axis
from rlx.ir.shape import UNKNOWN, Shape, broadcast_dims
from rlx.record import dataclass  # dataclasses', cheaper to create

__all__ = ["Softmax", "LogSoftmax", "LayerNorm"]


def check_unidirectional(op: Op, what: str, x: Shape, other: Shape) -> None:
    """`other` must broadcast to `x` without changing `x`'s shape (ONNX unidirectional)."""
    try:
        fits = other.rank <= x.rank and all(
            d in (xd, UNKNOWN) for d, xd in zip(broadcast_dims(x.dims, other.dims), x.dims))
    except ShapeError:
        fits = False
    if not fits:
        raise ShapeError(f"{op.op_name}: {what} {other} does not broadcast to {x}")


# -- softmax and normalisation ---------------------------------------------------------------
def _infer_along_axis(op: Op, axis: int, inputs: Sequence[Shape]) -> Shape:
    (x,) = inputs
    expect_dtype(op, inputs, floating=True)
    if x.rank == 0:
        raise ShapeError(f"{op.op_name}: needs rank >= 1, got {x}")
    op_axis(op, axis, x.rank)
    return x


@dataclass(frozen=True)
class Softmax(Op):
    """Softmax along one axis (ONNX opset 13+)."""

    axis: int = -1

    def infer(self, inputs):
        return _infer_along_axis(self, self.axis, inputs)


@dataclass(frozen=True)
class LogSoftmax(Op):
    """log(softmax(x)) along one axis (ONNX opset 13+), without forming the softmax."""

    axis: int = -1

    def infer(self, inputs):
        return _infer_along_axis(self, self.axis, inputs)


@dataclass(frozen=True)
class LayerNorm(Op):
    """ONNX LayerNormalization (first output): standardise over axes `axis..rank-1`, then
    `* scale (+ bias)`; inputs `[x, scale]` or `[x, scale, bias]`, both broadcasting to x."""

    axis: int = -1
    epsilon: float = 1e-5
    arity: ClassVar = (2, 3)

    def infer(self, inputs):
        expect_dtype(self, inputs, floating=True)
        x = inputs[0]
        op_axis(self, self.axis, x.rank)
        for what, p in zip(("scale", "bias"), inputs[1:]):
            check_unidirectional(self, what, x, p)
        return x
