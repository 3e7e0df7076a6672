"""Einsum (NumPy / ONNX semantics): a family of its own, imported by the graphs that have one
(a few exporters' attention), not by every graph with a MatMul (issue 35)."""

from __future__ import annotations

import re
from typing import ClassVar

from rlx.errors import ShapeError
from rlx.ir.ops.base import Op, expect_dtype
from rlx.ir.shape import Dim, Shape, broadcast_dims
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = ["Einsum"]

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
