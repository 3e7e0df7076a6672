"""The float32 activation formulas (erf, exact GELU, sigmoid, SiLU, Mish, tanh-GELU,
HardSwish) against float64 references (`math.erf` / `math.erfc` per element), over wide
ranges, on arrays larger than one block (`blockwise`), with `out` a new array, another
buffer, or the input itself; and their cost counted in NumPy passes, not seconds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlx.ir.ops.elementwise import Activation as A
from rlx.ir.ops.elementwise import Unary
from rlx.kernels import BUILDERS
from rlx.kernels.blockwise import BLOCK
from rlx.kernels.elementwise import erf
from tests.support import build_op_graph

ERF64 = np.vectorize(math.erf)
ERFC64 = np.vectorize(math.erfc)

REFERENCES = {
    A.ERF: lambda x: ERF64(x),
    A.GELU: lambda x: x * 0.5 * ERFC64(-x / math.sqrt(2)),
    A.SIGMOID: lambda x: 1 / (1 + np.exp(-x)),
    A.SILU: lambda x: x / (1 + np.exp(-x)),
    A.MISH: lambda x: x * np.tanh(np.logaddexp(0, x)),
    A.GELU_APPROX: lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (
        x + 0.044715 * x ** 3))),
    A.HARD_SWISH: lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
}


def _x(n: int = 3 * BLOCK + 123) -> np.ndarray:
    """Wide-range float32 values: a dense grid over [-12, 12], tiny and huge magnitudes."""
    grid = np.linspace(-12, 12, n - 40)
    special = [0.0, -0.0, 1e-30, -1e-30, 1e-7, -1e-7, 3.79, 3.8, 3.81, -3.8, 8.9, 9.1, 11,
               -11, -13, 13, 20, -20, 88, -88, 89, -89, 1e4, -1e4, 1e30, -1e30]
    return np.concatenate([grid, special, np.zeros(40 - len(special))]).astype(np.float32)


def _step(kind: A, shape):
    graph, _ = build_op_graph(Unary(kind), [np.zeros(shape, np.float32)])
    return BUILDERS[Unary](graph.node(graph.outputs[0]), None)


@pytest.mark.parametrize("kind", list(REFERENCES))
@pytest.mark.parametrize("where", ["new", "other", "self"])
def test_float32_formula_matches_float64(kind, where):
    x = _x()
    with np.errstate(all="ignore"):
        want = REFERENCES[kind](x.astype(np.float64))
    step = _step(kind, x.shape)
    arg = x.copy()
    out = {"new": None, "other": np.empty_like(x), "self": arg}[where]
    with np.errstate(all="raise"):  # no warnings from the formulas themselves
        got = step(arg, out=out) if out is not None else step(arg)
    assert got.dtype == np.float32 and got.shape == x.shape
    if out is not None:
        assert got is out
    # rtol 1e-6 with an absolute floor of 1e-6 of the value's scale (|x| * 1e-6 for the
    # x * f(x) products, where f's error near 0 and 1 is what float32 can represent)
    scale = np.maximum(np.abs(x.astype(np.float64)) if kind is not A.ERF else 0, 1e-7)
    err = np.abs(got.astype(np.float64) - want)
    assert np.all(np.isfinite(got)), x[~np.isfinite(got)]
    assert np.all(err <= 2e-6 * np.abs(want) + 1e-6 * scale), x[np.argmax(err)]


def test_erf_relative_error_under_1e6_and_exact_limits():
    x = np.concatenate([np.linspace(-6, 6, 200001), np.geomspace(1e-30, 1, 1000)])
    x = x.astype(np.float32)
    want = ERF64(x.astype(np.float64))
    got = erf(x).astype(np.float64)
    rel = np.abs(got - want) / np.abs(want).clip(1e-45)
    assert rel.max() < 1e-6
    assert list(erf(np.float32([np.inf, -np.inf, 0.0]))) == [1.0, -1.0, 0.0]
    assert np.isnan(erf(np.float32([np.nan])))[0]


def test_float64_erf_stays_float64_accurate():
    x = np.linspace(-6, 6, 10001)
    np.testing.assert_allclose(erf(x), ERF64(x), rtol=2e-7, atol=1e-12)


class _Counter:
    """Counts NumPy ufunc calls made through `np.<name>` while installed."""

    NAMES = ("multiply", "add", "divide", "clip", "exp", "negative", "reciprocal", "tanh",
             "abs", "minimum", "maximum", "heaviside", "empty")

    def __init__(self, monkeypatch):
        self.calls = 0
        for name in self.NAMES:
            real = getattr(np, name)
            monkeypatch.setattr(np, name, self._wrap(real))

    def _wrap(self, real):
        def call(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)
        return call


@pytest.mark.parametrize("kind, most", [(A.ERF, 25), (A.GELU, 30), (A.SIGMOID, 5),
                                        (A.SILU, 6), (A.MISH, 8)])
def test_formula_cost_in_passes_per_block(monkeypatch, kind, most):
    """Cost counted deterministically: NumPy calls per block (each one pass over the block,
    in cache), against the float64 series erf's ~60 full-size passes."""
    x = _x(4 * BLOCK)
    step = _step(kind, x.shape)
    counter = _Counter(monkeypatch)
    step(x)
    assert counter.calls <= 4 * most + 8
