"""Linear algebra: batched MatMul (Einsum is `rlx.ir.ops.einsum`, DFT `rlx.ir.ops.spectral`,
DequantMatMul `rlx.ir.ops.dequant`)."""

from __future__ import annotations

from typing import ClassVar

from rlx.errors import ShapeError
from rlx.ir.ops.base import Op, expect_dtype
from rlx.ir.shape import Shape, broadcast_dims
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = ["MatMul"]


@dataclass(frozen=True)
class MatMul(Op):
    """NumPy `matmul`: batch dims broadcast, 1-D operands promoted and squeezed.

    `mlas_blocks`: sum K in the blocks onnxruntime's SGEMM (MLAS) uses, added in order, so
    that a product rounds as onnxruntime's does; the importer sets it where a quantised
    graph requantises the product (a MatMul or Gemm reading a DequantizeLinear), where one
    rounding becomes a whole step. Elsewhere BLAS sums K in one product, which is faster."""

    mlas_blocks: bool = False
    arity: ClassVar = (2, 2)

    def attrs(self) -> dict[str, object]:
        return {"mlas_blocks": True} if self.mlas_blocks else {}

    def infer(self, inputs):
        a, b = inputs
        expect_dtype(self, inputs)
        if a.rank == 0 or b.rank == 0:
            raise ShapeError("MatMul: operands must have rank >= 1")
        ad = a.dims if a.rank > 1 else (1, *a.dims)
        bd = b.dims if b.rank > 1 else (*b.dims, 1)
        k1, k2 = ad[-1], bd[-2]
        if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
            raise ShapeError(f"MatMul: inner dims differ, {a} x {b}")
        try:
            batch = broadcast_dims(ad[:-2], bd[:-2])
        except ShapeError as err:
            raise ShapeError(f"MatMul: {err}") from None
        dims = (*batch, *([ad[-2]] if a.rank > 1 else []), *([bd[-1]] if b.rank > 1 else []))
        return Shape(dims, a.dtype)
