"""Linear algebra: batched MatMul, GGUF-packed DequantMatMul, Einsum."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import ClassVar

from rlx.errors import ShapeError
from rlx.ir.dtype import DType
from rlx.ir.ops.base import Op, expect_dtype
from rlx.ir.shape import UNKNOWN, Shape, broadcast_dims

__all__ = ["MatMul", "QuantScheme", "DequantMatMul", "Einsum"]


@dataclass(frozen=True)
class MatMul(Op):
    """NumPy `matmul`: batch dims broadcast, 1-D operands promoted and squeezed."""

    arity: ClassVar = (2, 2)

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


class QuantScheme(enum.Enum):
    """Packed weight encodings DequantMatMul understands: (name, block elems, block bytes)."""

    GGUF_Q8_0 = ("gguf_q8_0", 32, 34)
    GGUF_TQ2_0 = ("gguf_tq2_0", 256, 66)

    def __init__(self, label: str, block_size: int, block_bytes: int):
        self.label = label
        self.block_size = block_size
        self.block_bytes = block_bytes

    @classmethod
    def parse(cls, text: str) -> QuantScheme:
        for scheme in cls:
            if scheme.label == text:
                return scheme
        raise ShapeError(f"unknown quant scheme {text!r}; expected gguf_q8_0 or gguf_tq2_0")

    def __str__(self) -> str:
        return self.label


@dataclass(frozen=True)
class DequantMatMul(Op):
    """`x @ W` where W is a GGUF block stream of W^T (the seed's "BT [N, K]" layout).

    Inputs `[x, packed]`: x is `[..., M, K]` float, packed is a flat u8 tensor of
    `N * K / block_size` blocks. `n` is recorded so the output shape `[..., M, N]` never
    depends on guessing; the stream is decoded whole, so blocks may straddle rows of K.
    """

    scheme: QuantScheme
    n: int
    arity: ClassVar = (2, 2)

    def infer(self, inputs):
        x, packed = inputs
        if packed.dtype is not DType.U8 or packed.rank != 1:
            raise ShapeError(f"DequantMatMul: packed weight must be 1-D u8, got {packed}")
        if not x.dtype.is_float:
            raise ShapeError(f"DequantMatMul: x must be floating point, got {x.dtype}")
        k = x.dims[-1]
        nbytes = packed.dims[0]
        if isinstance(k, int) and isinstance(nbytes, int):
            s = self.scheme
            if nbytes % s.block_bytes or nbytes // s.block_bytes * s.block_size != k * self.n:
                raise ShapeError(
                    f"DequantMatMul: {nbytes} bytes of {s} do not hold a [{self.n}, {k}] weight"
                )
        return Shape((*x.dims[:-1], self.n), x.dtype)


@dataclass(frozen=True)
class Einsum(Op):
    equation: str
    arity: ClassVar = (1, None)

    def infer(self, inputs):
        expect_dtype(self, inputs)
        eq = self.equation.replace(" ", "")
        lhs, _, rhs = eq.partition("->")
        terms = lhs.split(",")
        if len(terms) != len(inputs):
            raise ShapeError(f"Einsum {eq!r}: {len(terms)} operands, got {len(inputs)} inputs")
        sizes: dict[str, object] = {}
        ellipsis: tuple = ()
        for term, shape in zip(terms, inputs):
            letters = term.replace("...", "")
            n_ell = shape.rank - len(letters)
            dims = list(shape.dims)
            if "..." in term:
                pos = term.index("...")
                ell = tuple(dims[pos:pos + n_ell])
                ellipsis = broadcast_dims(ellipsis, ell)
                dims = dims[:pos] + dims[pos + n_ell:]
            elif n_ell:
                raise ShapeError(f"Einsum {eq!r}: term {term!r} does not fit {shape}")
            for letter, dim in zip(letters, dims):
                prev = sizes.get(letter)
                if prev is None or prev == 1:
                    sizes[letter] = dim
                elif isinstance(prev, int) and isinstance(dim, int) and dim not in (1, prev):
                    raise ShapeError(f"Einsum {eq!r}: dim {letter} is {prev} and {dim}")
        if "->" not in eq:
            counts = {c: lhs.count(c) for c in set(re.sub(r"[^a-zA-Z]", "", lhs))}
            rhs = ("..." if "..." in lhs else "") + "".join(
                sorted(c for c, n in counts.items() if n == 1)
            )
        out: list = []
        for part in re.split(r"(\.\.\.)", rhs):
            out.extend(ellipsis if part == "..." else [sizes[c] for c in part])
        return Shape(out, inputs[0].dtype)
