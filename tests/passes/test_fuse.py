"""`fuse_patterns`: exporter-spelled HardSwish, tanh-GELU and convolution biases become one
node, which computes what the chain did (float64 numpy / ONNX's reference evaluator), and
look-alikes (other constants, a link read elsewhere, broadcasting) are left alone."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlx.ir import DType, Graph, Shape
from rlx.ir.ops.elementwise import Activation, BinaryOp, Clamp, Unary
from rlx.ir.ops.windows import Conv
from rlx.passes import eliminate_dead_code, fuse_patterns
from rlx.runtime import Session
from tests.passes.common import checked
from tests.support import onnx_reference

RNG = np.random.default_rng(0)
X = (RNG.standard_normal((2, 3, 5, 7)) * 4).astype(np.float32)  # spans hard-swish's knees
F32 = DType.F32


def _graph(build) -> Graph:
    g = Graph("chain")
    x = g.input("x", Shape(X.shape, F32))
    g.set_outputs([build(g, x)])
    return g


def _c(g: Graph, value: float) -> int:
    return g.constant(np.float32(value))


def _bin(g: Graph, op: BinaryOp, a: int, b: int) -> int:
    return g.binary(op, a, b)


def _fused(graph: Graph) -> tuple[Graph, int]:
    new, count = checked(fuse_patterns, graph)
    new, _ = eliminate_dead_code(new)
    return new, count


def _ops(graph: Graph) -> list[str]:
    return [type(n.op).__name__ for n in graph.nodes()
            if type(n.op).__name__ not in ("Input", "Constant")]


def _run(graph: Graph) -> np.ndarray:
    return Session().compile(graph).run({"x": X})[0]


def _hard_swish64(x):
    x = x.astype(np.float64)
    return x * np.clip(x + 3, 0, 6) / 6


def _clip6(g: Graph, y: int) -> int:
    return g.add_node(Clamp(0.0, 6.0), [y])


HARD_SWISH_FORMS = {
    "(x * clip(x+3)) / 6": lambda g, x: _bin(g, BinaryOp.DIV, _bin(
        g, BinaryOp.MUL, x, _clip6(g, _bin(g, BinaryOp.ADD, x, _c(g, 3)))), _c(g, 6)),
    "(clip(3+x) * x) * 1/6": lambda g, x: _bin(g, BinaryOp.MUL, _bin(
        g, BinaryOp.MUL, _clip6(g, _bin(g, BinaryOp.ADD, _c(g, 3), x)), x), _c(g, 1 / 6)),
    "1/6 * (x * clip(x+3))": lambda g, x: _bin(g, BinaryOp.MUL, _c(g, 1 / 6), _bin(
        g, BinaryOp.MUL, x, _clip6(g, _bin(g, BinaryOp.ADD, x, _c(g, 3))))),
}


def _gelu64(x):
    x = x.astype(np.float64)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _tanh_part(g: Graph, x: int, cube) -> int:
    poly = _bin(g, BinaryOp.ADD, x, _bin(g, BinaryOp.MUL, cube(g, x), _c(g, 0.044715)))
    inner = _bin(g, BinaryOp.MUL, poly, _c(g, math.sqrt(2 / math.pi)))
    return _bin(g, BinaryOp.ADD, g.unary(Activation.TANH, inner), _c(g, 1.0))


def _pow3(g, x):
    return _bin(g, BinaryOp.POW, x, _c(g, 3.0))


def _mul3(g, x):
    return _bin(g, BinaryOp.MUL, x, _bin(g, BinaryOp.MUL, x, x))


GELU_FORMS = {
    "(0.5 x) (1 + tanh), pow": lambda g, x: _bin(
        g, BinaryOp.MUL, _bin(g, BinaryOp.MUL, x, _c(g, 0.5)), _tanh_part(g, x, _pow3)),
    "x (0.5 (1 + tanh)), x*x*x": lambda g, x: _bin(
        g, BinaryOp.MUL, x, _bin(g, BinaryOp.MUL, _c(g, 0.5), _tanh_part(g, x, _mul3))),
}

def _erf_gelu64(x):
    x = x.astype(np.float64)
    return np.array([v * 0.5 * math.erfc(-v / math.sqrt(2)) for v in x.ravel()]).reshape(x.shape)


def _one_plus_erf(g: Graph, x: int, scaled) -> int:
    return _bin(g, BinaryOp.ADD, _c(g, 1.0), g.unary(Activation.ERF, scaled(g, x)))


def _div_sqrt2(g, x):
    return _bin(g, BinaryOp.DIV, x, _c(g, math.sqrt(2)))


def _mul_inv_sqrt2(g, x):
    return _bin(g, BinaryOp.MUL, _c(g, 1 / math.sqrt(2)), x)


ERF_GELU_FORMS = {  # the groupings exporters write (PyTorch: the third)
    "(x * 0.5) * (1 + erf(x / sqrt2))": lambda g, x: _bin(
        g, BinaryOp.MUL, _bin(g, BinaryOp.MUL, x, _c(g, 0.5)), _one_plus_erf(g, x, _div_sqrt2)),
    "x * (0.5 * (1 + erf(1/sqrt2 * x)))": lambda g, x: _bin(
        g, BinaryOp.MUL, x, _bin(g, BinaryOp.MUL, _c(g, 0.5), _one_plus_erf(
            g, x, _mul_inv_sqrt2))),
    "((1 + erf(x / sqrt2)) * x) * 0.5": lambda g, x: _bin(
        g, BinaryOp.MUL, _bin(g, BinaryOp.MUL, _one_plus_erf(g, x, _div_sqrt2), x),
        _c(g, 0.5)),
    "(x * (1 + erf(x / sqrt2))) / 2": lambda g, x: _bin(
        g, BinaryOp.DIV, _bin(g, BinaryOp.MUL, x, _one_plus_erf(g, x, _div_sqrt2)), _c(g, 2)),
    "0.5 * ((1 + erf(x * 1/sqrt2)) * x)": lambda g, x: _bin(
        g, BinaryOp.MUL, _c(g, 0.5), _bin(g, BinaryOp.MUL, _one_plus_erf(
            g, x, lambda g, x: _bin(g, BinaryOp.MUL, x, _c(g, 1 / math.sqrt(2)))), x)),
}


def _silu64(x):
    x = x.astype(np.float64)
    return x / (1 + np.exp(-x))


def _mish64(x):
    x = x.astype(np.float64)
    return x * np.tanh(np.log1p(np.exp(x)))


ACTIVATION_PRODUCTS = {
    "x * sigmoid(x)": (Activation.SILU, _silu64, lambda g, x: _bin(
        g, BinaryOp.MUL, x, g.unary(Activation.SIGMOID, x))),
    "sigmoid(x) * x": (Activation.SILU, _silu64, lambda g, x: _bin(
        g, BinaryOp.MUL, g.unary(Activation.SIGMOID, x), x)),
    "x * tanh(softplus(x))": (Activation.MISH, _mish64, lambda g, x: _bin(
        g, BinaryOp.MUL, x, g.unary(Activation.TANH, g.unary(Activation.SOFTPLUS, x)))),
    "tanh(log(exp(x) + 1)) * x": (Activation.MISH, _mish64, lambda g, x: _bin(
        g, BinaryOp.MUL, g.unary(Activation.TANH, g.unary(Activation.LOG, _bin(
            g, BinaryOp.ADD, g.unary(Activation.EXP, x), _c(g, 1.0)))), x)),
}

CHAINS = [  # (form, builder, the op it is, float64 reference, tolerance)
    *((f, b, Activation.HARD_SWISH, _hard_swish64, 1e-6) for f, b in HARD_SWISH_FORMS.items()),
    *((f, b, Activation.GELU_APPROX, _gelu64, 1e-5) for f, b in GELU_FORMS.items()),
    *((f, b, Activation.GELU, _erf_gelu64, 2e-6) for f, b in ERF_GELU_FORMS.items()),
    *((f, b, kind, ref, 2e-6) for f, (kind, ref, b) in ACTIVATION_PRODUCTS.items()),
]


@pytest.mark.parametrize("form, build, kind, reference, tol", CHAINS, ids=[c[0] for c in CHAINS])
def test_chains_become_one_op(form, build, kind, reference, tol):
    fused, count = _fused(_graph(build))
    assert count == 1 and _ops(fused) == ["Unary"]
    assert fused.node(fused.outputs[0]).op == Unary(kind)
    np.testing.assert_allclose(_run(fused), reference(X), rtol=tol, atol=1e-6)


def test_gelu_with_another_scale_is_not_gelu():
    graph = _graph(lambda g, x: _bin(g, BinaryOp.MUL, _bin(g, BinaryOp.MUL, x, _c(g, 0.6)),
                                     _one_plus_erf(g, x, _div_sqrt2)))
    assert fuse_patterns(graph) == (graph, 0)


def test_silu_of_another_value_is_not_silu():
    def build(g, x):
        y = g.unary(Activation.EXP, x)
        return _bin(g, BinaryOp.MUL, x, g.unary(Activation.SIGMOID, y))
    graph = _graph(build)
    assert fuse_patterns(graph) == (graph, 0)


def test_a_sigmoid_read_elsewhere_is_not_fused():
    def build(g, x):
        s = g.unary(Activation.SIGMOID, x)
        return _bin(g, BinaryOp.ADD, _bin(g, BinaryOp.MUL, x, s), s)
    graph = _graph(build)
    assert fuse_patterns(graph) == (graph, 0)


def test_other_constants_are_not_hard_swish():
    graph = _graph(lambda g, x: _bin(g, BinaryOp.DIV, _bin(
        g, BinaryOp.MUL, x, _clip6(g, _bin(g, BinaryOp.ADD, x, _c(g, 2)))), _c(g, 6)))
    assert fuse_patterns(graph) == (graph, 0)


def test_a_link_read_elsewhere_is_not_fused():
    """The clamp is a second output: fusing would not remove it, so nothing is gained."""
    g = Graph("shared")
    x = g.input("x", Shape(X.shape, F32))
    clamp = _clip6(g, _bin(g, BinaryOp.ADD, x, _c(g, 3)))
    g.set_outputs([_bin(g, BinaryOp.DIV, _bin(g, BinaryOp.MUL, x, clamp), _c(g, 6)), clamp])
    assert fuse_patterns(g) == (g, 0)


def test_broadcasting_chain_is_not_fused():
    """x [7] against a [5, 7] clamp input: the product broadcasts, hard_swish(x) would not."""
    g = Graph("broadcast")
    x = g.input("x", Shape((7,), F32))
    wide = _bin(g, BinaryOp.ADD, g.constant(np.zeros((5, 7), np.float32)), x)
    clamp = _clip6(g, _bin(g, BinaryOp.ADD, wide, _c(g, 3)))
    g.set_outputs([_bin(g, BinaryOp.DIV, _bin(g, BinaryOp.MUL, x, clamp), _c(g, 6))])
    assert fuse_patterns(g)[1] == 0


W = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
B = RNG.standard_normal(4).astype(np.float32)


@pytest.mark.parametrize("has_bias", [False, True])
@pytest.mark.parametrize("add_shape", [(1, 4, 1, 1), (4, 1, 1), (1,)])
def test_a_per_channel_add_after_conv_becomes_its_bias(has_bias, add_shape):
    add = RNG.standard_normal(add_shape).astype(np.float32)

    def build(g, x):
        inputs = [x, g.constant(W)] + ([g.constant(B)] if has_bias else [])
        conv = g.add_node(Conv(pads=(1, 1, 1, 1)), inputs)
        return g.binary(BinaryOp.ADD, conv, g.constant(add))

    fused, count = _fused(_graph(build))
    assert count == 1 and _ops(fused) == ["Conv"]
    (conv,) = [n for n in fused.nodes() if isinstance(n.op, Conv)]
    assert len(conv.inputs) == 3
    (expected,) = onnx_reference("Conv", [X, W, B if has_bias else None], pads=[1, 1, 1, 1])
    np.testing.assert_allclose(_run(fused), expected + add, rtol=1e-5, atol=1e-5)


def test_an_add_varying_over_space_is_not_a_bias():
    add = RNG.standard_normal((1, 1, 5, 7)).astype(np.float32)

    def build(g, x):
        conv = g.add_node(Conv(pads=(1, 1, 1, 1)), [x, g.constant(W)])
        return g.binary(BinaryOp.ADD, conv, g.constant(add))

    graph = _graph(build)
    assert fuse_patterns(graph) == (graph, 0)
