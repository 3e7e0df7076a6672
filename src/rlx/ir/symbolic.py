"""Symbolic dims as expressions: `width`, `floor(width/4)`, `2*seq + 1`, `batch*heads`.

A `SymDim` is a polynomial with integer coefficients over *atoms*: a dim's name, an
`opaque` stand-in for a dim inference could not determine, or the floor of a polynomial
divided by a positive integer. Sums, products and such floors are normalised (like terms
collected, `floor(floor(p/a)/b)` is `floor(p/(a*b))`, an exact division divides), so two
computations of one size usually compare equal; when they do not, they are only taken
as different sizes, which is never wrong.

`dim` turns one back into an IR `Dim`: its int, its text when every atom is a name, else
`UNKNOWN` (an opaque atom names nothing a graph can bind).
"""

from __future__ import annotations

import re
from collections import Counter

from rlx.ir.shape import UNKNOWN, Dim
from rlx.record import dataclass

__all__ = ["SymDim"]

_PLAIN = re.compile(r"[A-Za-z_][\w.]*|\?[\d.]+")


@dataclass(frozen=True)
class Floor:
    """The atom floor(num / den), `den` > 1, `num` not a multiple of it."""

    num: SymDim
    den: int

    def __str__(self) -> str:
        num = str(self.num)
        return f"floor({num if _PLAIN.fullmatch(num) else f'({num})'}/{self.den})"


Atom = str | Floor
Monomial = tuple[Atom, ...]  # atoms multiplied, sorted by text (repeated for a power)


@dataclass(frozen=True)
class SymDim:
    """A polynomial over dim atoms: `terms` are (monomial, non-zero coefficient), sorted."""

    terms: tuple[tuple[Monomial, int], ...]

    @classmethod
    def const(cls, value: int) -> SymDim:
        return cls((((), int(value)),) if value else ())

    @classmethod
    def atom(cls, atom: Atom) -> SymDim:
        return cls((((atom,), 1),))

    @classmethod
    def opaque(cls, key: str) -> SymDim:
        """A dim of unknown size, equal only to itself (`key` says whose dim it is)."""
        return cls.atom(f"{UNKNOWN}{key}")

    @classmethod
    def of(cls, dim: Dim, key: str) -> SymDim:
        """An IR dim: its value, its name, or for `UNKNOWN` an opaque atom keyed by `key`."""
        if isinstance(dim, int):
            return cls.const(dim)
        return cls.opaque(key) if dim == UNKNOWN else cls.atom(dim)

    @classmethod
    def _collect(cls, pairs) -> SymDim:
        total: Counter[Monomial] = Counter()
        for mono, coeff in pairs:
            total[mono] += coeff
        return cls(tuple(sorted(((m, c) for m, c in total.items() if c),
                                key=lambda t: (-len(t[0]), _text(t[0])))))

    @property
    def value(self) -> int | None:
        """The int it is, or None when it depends on an atom."""
        if not self.terms:
            return 0
        (mono, coeff), *rest = self.terms
        return coeff if not mono and not rest else None

    @property
    def nonnegative(self) -> bool:
        """Provably >= 0: every coefficient is (atoms are sizes, never negative)."""
        return all(c >= 0 for _, c in self.terms)

    def __add__(self, other: SymDim) -> SymDim:
        return SymDim._collect((*self.terms, *other.terms))

    def __sub__(self, other: SymDim) -> SymDim:
        return self + other * SymDim.const(-1)

    def __mul__(self, other: SymDim) -> SymDim:
        return SymDim._collect((tuple(sorted(m1 + m2, key=str)), c1 * c2)
                               for m1, c1 in self.terms for m2, c2 in other.terms)

    def floordiv(self, k: int) -> SymDim:
        """floor(self / k) for a positive int `k` (ONNX's integer Div truncates: the same
        for the non-negative sizes it is used on)."""
        if k <= 0:
            raise ValueError(f"floor division by {k}")
        if self.value is not None:
            return SymDim.const(self.value // k)
        if all(c % k == 0 for _, c in self.terms):
            return SymDim(tuple((m, c // k) for m, c in self.terms))
        inner = self.terms[0][0][0] if len(self.terms) == 1 and self.terms[0][1] == 1 \
            and len(self.terms[0][0]) == 1 else None
        if isinstance(inner, Floor):  # floor(floor(p/a)/b) = floor(p/(a*b))
            return inner.num.floordiv(inner.den * k)
        return SymDim.atom(Floor(self, k))

    def dim(self) -> Dim:
        """The IR dim: an int, a name or expression of names, or `UNKNOWN`."""
        value = self.value
        if value is not None:
            return value
        return UNKNOWN if UNKNOWN in str(self) else str(self)

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        text = ""
        for mono, coeff in self.terms:
            factors = [str(a) if isinstance(a, Floor) or _PLAIN.fullmatch(a) else f"({a})"
                       for a in mono]
            if abs(coeff) != 1 or not factors:
                factors.insert(0, str(abs(coeff)))
            sign = "-" if coeff < 0 else "+"
            text += ("-" if sign == "-" else "") if not text else f" {sign} "
            text += "*".join(factors)
        return text


def _text(mono: Monomial) -> tuple[str, ...]:
    return tuple(map(str, mono))
