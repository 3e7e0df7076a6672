"""Linear algebra: batched MatMul, Einsum, DFT (DequantMatMul is `rlx.ir.ops.dequant`)."""

from __future__ import annotations

import re
from typing import ClassVar

from rlx.errors import ShapeError
from rlx.ir.ops.base import Op, expect_dtype, op_axis
from rlx.ir.shape import Dim, Shape, broadcast_dims
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = ["MatMul", "Einsum", "DFT"]


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


_TERM = r"[a-zA-Z]*(\.\.\.)?[a-zA-Z]*"  # compiled (and cached by re) on first use


@dataclass(frozen=True)
class Einsum(Op):
    """NumPy / ONNX einsum, e.g. `"bij,bjk->bik"`.

    Without `->` the output is `...` (when used) followed by the labels that appear once,
    sorted. Dims of size 1 broadcast against the same label elsewhere, as do ellipsis dims.
    """

    equation: str
    arity: ClassVar = (1, None)

    def infer(self, inputs):
        expect_dtype(self, inputs)
        eq = self.equation.replace(" ", "")
        lhs, arrow, rhs = eq.partition("->")
        terms = lhs.split(",")
        bad = [t for t in (*terms, rhs) if not re.fullmatch(_TERM, t)]
        if bad:
            raise ShapeError(f"Einsum {eq!r}: bad term {bad[0]!r} (letters and one '...')")
        if len(terms) != len(inputs):
            raise ShapeError(f"Einsum {eq!r}: {len(terms)} operands, got {len(inputs)} inputs")
        sizes: dict[str, Dim] = {}
        ellipsis: tuple[Dim, ...] = ()
        for term, shape in zip(terms, inputs):
            ell, dims = _split_term(eq, term, shape)
            try:
                ellipsis = broadcast_dims(ellipsis, ell)
            except ShapeError as err:
                raise ShapeError(f"Einsum {eq!r}: '...' dims: {err}") from None
            for letter, dim in zip(term.replace("...", ""), dims):
                prev = sizes.get(letter)
                if prev is None or prev == 1:
                    sizes[letter] = dim
                elif isinstance(prev, int) and isinstance(dim, int) and dim not in (1, prev):
                    raise ShapeError(f"Einsum {eq!r}: dim {letter} is {prev} and {dim}")
        if not arrow:
            once = sorted(c for c in sizes if lhs.count(c) == 1)
            rhs = ("..." if "..." in lhs else "") + "".join(once)
        labels = rhs.replace("...", "")
        if len(set(labels)) != len(labels):
            raise ShapeError(f"Einsum {eq!r}: repeated output label in {rhs!r}")
        missing = sorted(set(labels) - set(sizes))
        if missing:
            raise ShapeError(f"Einsum {eq!r}: output label {missing[0]} is in no operand")
        out: list[Dim] = []
        for part in re.split(r"(\.\.\.)", rhs):
            out.extend(ellipsis if part == "..." else [sizes[c] for c in part])
        return Shape(out, inputs[0].dtype)


def _split_term(eq: str, term: str, shape: Shape) -> tuple[tuple[Dim, ...], tuple[Dim, ...]]:
    """The dims of `shape` under the term's `...`, and those under its letters."""
    n_ell = shape.rank - len(term.replace("...", ""))
    pos = term.find("...")
    if n_ell < 0 or (n_ell and pos < 0):
        raise ShapeError(f"Einsum {eq!r}: term {term!r} does not fit {shape}")
    if pos < 0:
        return (), shape.dims
    return shape.dims[pos:pos + n_ell], shape.dims[:pos] + shape.dims[pos + n_ell:]


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
