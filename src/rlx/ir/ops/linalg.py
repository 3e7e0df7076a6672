"""Linear algebra: batched MatMul, GGUF- and MLX-packed DequantMatMul, Einsum, DFT."""

from __future__ import annotations

import re
from typing import ClassVar

from rlx.codecs.encodings import Encoding
from rlx.errors import ShapeError
from rlx.ir.dtype import DType
from rlx.ir.ops.base import Op, expect_dtype, op_axis
from rlx.ir.shape import Dim, Shape, broadcast_dims
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = ["MatMul", "PACKED_SCHEMES", "DequantMatMul", "Einsum", "DFT", "dequant_inputs"]


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


PACKED_SCHEMES: tuple[Encoding, ...] = tuple(e for e in Encoding if e.is_block_quantized)
"""The weight encodings DequantMatMul runs: the block encodings of `rlx.codecs` (`Encoding`
members with `is_block_quantized`). The codec table is the one place their block layouts
are written; a new block codec is a new scheme without touching the IR."""


def dequant_inputs(scheme: Encoding) -> int:
    """DequantMatMul's inputs: [x, packed] for GGUF, [x, codes, scales(, biases)] for MLX
    (rlx.codecs.mlx: a block is one quantization group of the codes stream)."""
    return 4 if scheme.value.startswith("mlx_affine") else 3 if scheme.is_mlx else 2


@dataclass(frozen=True)
class DequantMatMul(Op):
    """`x @ W` where W is a GGUF block stream of W^T (the seed's "BT [N, K]" layout).

    Inputs `[x, packed]`: x is `[..., M, K]` float, packed is a flat u8 tensor of
    `N * K / block_size` blocks. `n` is recorded so the output shape `[..., M, N]` never
    depends on guessing; the stream is decoded whole, so blocks may straddle rows of K.
    MLX schemes take `[x, codes, scales, biases]` (affine) or `[x, codes, scales]` (fp
    modes): the codes of W^T row by row, and one scale (and bias) per group along K.
    """

    scheme: Encoding
    n: int
    arity: ClassVar = (2, 4)

    def __post_init__(self) -> None:
        if self.scheme not in PACKED_SCHEMES:
            names = ", ".join(str(s) for s in PACKED_SCHEMES)
            raise ShapeError(f"DequantMatMul: {self.scheme} is not a block encoding; "
                             f"expected one of {names}")

    def infer(self, inputs):
        if len(inputs) != dequant_inputs(self.scheme):
            raise ShapeError(f"DequantMatMul: {self.scheme} takes {dequant_inputs(self.scheme)} "
                             f"inputs, got {len(inputs)}")
        x, packed = inputs[:2]
        if self.scheme.is_mlx:
            self._check_groups(packed, inputs[2:])
        if packed.dtype is not DType.U8 or packed.rank != 1:
            raise ShapeError(f"DequantMatMul: packed weight must be 1-D u8, got {packed}")
        if not x.dtype.is_float:
            raise ShapeError(f"DequantMatMul: x must be floating point, got {x.dtype}")
        if x.rank == 0:
            raise ShapeError("DequantMatMul: x must have rank >= 1, got a scalar")
        k = x.dims[-1]
        nbytes = packed.dims[0]
        if isinstance(k, int) and isinstance(nbytes, int):
            s = self.scheme
            if nbytes % s.block_bytes or nbytes // s.block_bytes * s.block_size != k * self.n:
                raise ShapeError(
                    f"DequantMatMul: {nbytes} bytes of {s} do not hold a [{self.n}, {k}] weight"
                )
        return Shape((*x.dims[:-1], self.n), x.dtype)

    def _check_groups(self, codes: Shape, parts) -> None:
        """MLX: scales (and biases) are [N, groups], one per group of the codes."""
        scales = parts[0]
        want = DType.U8 if not self.scheme.label.startswith("mlx_affine") else None
        if scales.rank != 2 or scales.dims[0] != self.n or (
                want is not None and scales.dtype is not want) or (
                want is None and not scales.dtype.is_float):
            raise ShapeError(f"DequantMatMul {self.scheme}: scales must be "
                             f"[{self.n}, groups] {want or 'float'}, got {scales}")
        for bias in parts[1:]:
            if bias.dims != scales.dims or not bias.dtype.is_float:
                raise ShapeError(f"DequantMatMul {self.scheme}: biases must be float "
                                 f"{list(scales.dims)}, got {bias}")
        groups, nbytes = scales.dims[1], codes.dims[0] if codes.rank == 1 else None
        if isinstance(groups, int) and isinstance(nbytes, int) and \
                nbytes != self.n * groups * self.scheme.block_bytes:
            raise ShapeError(f"DequantMatMul {self.scheme}: {nbytes} code bytes do not match "
                             f"{self.n} x {groups} groups")


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
