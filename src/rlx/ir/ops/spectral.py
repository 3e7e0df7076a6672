"""DFT (ONNX semantics): the discrete Fourier transform of audio front ends, a family of its
own so that graphs without one import none of it (issue 35)."""

from __future__ import annotations

from rlx.errors import ShapeError
from rlx.ir.ops.base import Op, expect_dtype, op_axis
from rlx.ir.shape import Shape
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = ["DFT"]


@dataclass(frozen=True)
class DFT(Op):
    """ONNX DFT of a static length: x `[..., 1 or 2]` is a real or complex (real, imaginary)
    signal, transformed along `axis` (any but the last) over `length` points, the signal
    cropped or zero-padded to them. Forward, inverse (with 1/length) or, inverse and
    one-sided, the real signal of a one-sided spectrum (irfft); a one-sided forward keeps
    the length // 2 + 1 first bins. Computed as onnx.reference does: a fast Fourier
    transform in the signal's precision."""

    axis: int
    length: int
    inverse: bool = False
    onesided: bool = False

    def infer(self, inputs):
        (x,) = inputs
        expect_dtype(self, inputs, floating=True)
        if x.rank < 2 or x.dims[-1] not in (1, 2) and isinstance(x.dims[-1], int):
            raise ShapeError(f"DFT: x must be [..., 1 or 2], got {x}")
        axis = op_axis(self, self.axis, x.rank)
        if axis == x.rank - 1:
            raise ShapeError(f"DFT: axis {self.axis} is the real/imaginary axis of {x}")
        if self.length < 0:  # 0 imports (a branch of a run-time axis that cannot run)
            raise ShapeError(f"DFT: length must be >= 0, got {self.length}")
        bins = self.length // 2 + 1 if self.onesided and not self.inverse else self.length
        parts = 1 if self.inverse and self.onesided else 2
        return Shape((*x.dims[:axis], bins, *x.dims[axis + 1:-1], parts), x.dtype)
