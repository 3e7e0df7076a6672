"""SymDim: sums, products and floors of dim expressions are normalised, and their text
evaluates (as Python, floor as math.floor) to what integer arithmetic gives."""

from __future__ import annotations

import math
import random

import pytest

from rlx.ir.shape import UNKNOWN
from rlx.ir.symbolic import SymDim

NAMES = ("batch", "seq", "width")


def _random_expression(rng: random.Random, depth: int) -> tuple[SymDim, object]:
    """(SymDim, function of the sizes computing the same with Python ints)."""
    if depth == 0 or rng.random() < 0.3:
        if rng.random() < 0.5:
            name = rng.choice(NAMES)
            return SymDim.atom(name), lambda env, n=name: env[n]
        k = rng.randint(0, 5)
        return SymDim.const(k), lambda env, k=k: k
    a, fa = _random_expression(rng, depth - 1)
    kind = rng.choice(("add", "mul", "floordiv"))
    if kind == "floordiv" and a.nonnegative:
        k = rng.randint(1, 6)
        return a.floordiv(k), lambda env: fa(env) // k
    b, fb = _random_expression(rng, depth - 1)
    if kind == "add":
        return a + b, lambda env: fa(env) + fb(env)
    return a * b, lambda env: fa(env) * fb(env)


@pytest.mark.parametrize("seed", range(40))
def test_expressions_evaluate_like_integer_arithmetic(seed):
    rng = random.Random(seed)
    dim, reference = _random_expression(rng, 4)
    for _ in range(5):
        env = {n: rng.randint(0, 40) for n in NAMES}
        got = eval(str(dim), {"floor": math.floor}, dict(env))  # noqa: S307 (our own text)
        assert got == reference(env), str(dim)


def test_normal_forms():
    w, s = SymDim.atom("width"), SymDim.atom("seq")
    two, one = SymDim.const(2), SymDim.const(1)
    assert str(two * s + one) == "2*seq + 1"
    assert w.floordiv(2).floordiv(2) == w.floordiv(4) and str(w.floordiv(4)) == "floor(width/4)"
    assert (w * SymDim.const(8)).floordiv(4) == two * w
    assert s * w == w * s and (s + w) - w == s
    assert (w - w).value == 0 and (two * w - one).dim() == "2*width - 1"


def test_an_unknown_dim_names_nothing():
    opaque = SymDim.of(UNKNOWN, "7.1")
    assert opaque == SymDim.opaque("7.1") != SymDim.opaque("7.2")
    assert (opaque * SymDim.atom("batch")).dim() == UNKNOWN
    assert SymDim.of(3, "x").value == 3 and SymDim.of("batch", "x").dim() == "batch"
