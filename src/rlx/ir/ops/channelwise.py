"""Per-channel ops of image models: BatchNormInference, InstanceNorm, PRelu (ONNX semantics).

A family of its own: a transformer's graph has none of them, and a CNN's batch norms are
folded into its convolutions at bake (`rlx.passes.batchnorm_folding`), so most loads import
none of it (issue 35).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rlx.errors import ShapeError
from rlx.ir.dtype import DType
from rlx.ir.ops.base import Op, check_image, check_vector, expect_dtype
from rlx.ir.ops.nn import check_unidirectional
from rlx.ir.shape import Shape
from rlx.record import dataclass  # dataclasses', cheaper to create

__all__ = ["BatchNormInference", "InstanceNorm", "PRelu"]


def _check_channel_params(op: Op, inputs: Sequence[Shape], names: Sequence[str]) -> Shape:
    expect_dtype(op, inputs, floating=True)
    x = inputs[0]
    for what, p in zip(names, inputs[1:]):
        check_vector(op, what, p, x.dims[1])
    return x


@dataclass(frozen=True)
class BatchNormInference(Op):
    """ONNX BatchNormalization in inference mode: inputs `[x, scale, bias, mean, var]`, the
    last four `[C]` over channel axis 1 of x `[N, C, ...]`."""

    epsilon: float = 1e-5
    arity: ClassVar = (5, 5)

    def infer(self, inputs):
        check_image(self, inputs[0], min_rank=2)
        return _check_channel_params(self, inputs, ("scale", "bias", "mean", "var"))


@dataclass(frozen=True)
class InstanceNorm(Op):
    """ONNX InstanceNormalization: standardise each (n, c) over the spatial dims, then
    `* scale + bias` per channel; inputs `[x, scale, bias]`."""

    epsilon: float = 1e-5
    arity: ClassVar = (3, 3)

    def infer(self, inputs):
        check_image(self, inputs[0])
        return _check_channel_params(self, inputs, ("scale", "bias"))


@dataclass(frozen=True)
class PRelu(Op):
    """`x < 0 ? slope * x : x`, slope broadcasting to x (ONNX PRelu, unidirectional)."""

    arity: ClassVar = (2, 2)

    def infer(self, inputs):
        expect_dtype(self, inputs)
        x, slope = inputs
        if x.dtype is DType.BOOL:
            raise ShapeError("PRelu: needs a numeric input, got bool")
        check_unidirectional(self, "slope", x, slope)
        return x
