"""Buffer reuse (`rlx.runtime.reuse`): elementwise chains write into the buffer of an input
that dies there, and never into one that is still readable (a graph input or output, a
constant, a view read later, a value read twice). Results are checked against float64
numpy on random synthetic chains; reuse is counted from the plan and by buffer identity."""

from __future__ import annotations

import numpy as np
import pytest

from rlx.ir import DType, Graph, Shape
from rlx.ir.ops.elementwise import Activation, BinaryOp, Clamp
from rlx.ir.ops.linalg import MatMul
from rlx.ir.ops.shaping import Reshape, Transpose
from rlx.runtime import Session

F32 = DType.F32
SHAPE = (4, 8, 16)

UNARY64 = {
    Activation.RELU: lambda x: np.maximum(x, 0),
    Activation.SIGMOID: lambda x: 1 / (1 + np.exp(-x)),
    Activation.TANH: np.tanh,
    Activation.SILU: lambda x: x / (1 + np.exp(-x)),
    Activation.NEG: np.negative,
    Activation.ABS: np.abs,
    Activation.HARD_SWISH: lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
}
BINARY64 = {BinaryOp.ADD: np.add, BinaryOp.SUB: np.subtract, BinaryOp.MUL: np.multiply,
            BinaryOp.MAX: np.maximum, BinaryOp.MIN: np.minimum}


def _random_chain(seed: int, length: int):
    """x @ w (a fresh buffer), then `length` random elementwise ops, each reading the last
    value and sometimes an earlier one, a constant row (broadcast) or the input. Returns
    the graph, its feeds and a float64 function computing the same."""
    rng = np.random.default_rng(seed)
    g = Graph(f"chain{seed}")
    x = g.input("x", Shape(SHAPE, F32))
    w = rng.standard_normal((SHAPE[-1], SHAPE[-1])).astype(np.float32) / 4
    values = [g.add_node(MatMul(), [x, g.constant(w)])]
    ops = []
    for _ in range(length):
        r = rng.integers(4)
        if r == 0:
            kind = list(UNARY64)[rng.integers(len(UNARY64))]
            values.append(g.unary(kind, values[-1]))
            ops.append(("u", kind))
        elif r == 3:
            values.append(g.add_node(Clamp(-2.0, 2.0), [values[-1]]))
            ops.append(("clip",))
        else:
            op = list(BINARY64)[rng.integers(len(BINARY64))]
            pick = rng.integers(3)
            if pick == 0:
                row = rng.standard_normal(SHAPE[-1]).astype(np.float32)
                other, ref = g.constant(row), ("const", row)
            elif pick == 1:
                j = int(rng.integers(len(values)))
                other, ref = values[j], ("value", j)
            else:
                other, ref = x, ("input",)
            values.append(g.binary(op, values[-1], other))
            ops.append(("b", op, ref))
    g.set_outputs([values[-1], values[len(values) // 2]])

    def reference(xv):
        xv = xv.astype(np.float64)
        vals = [xv @ w.astype(np.float64)]
        for item in ops:
            if item[0] == "u":
                vals.append(UNARY64[item[1]](vals[-1]))
            elif item[0] == "clip":
                vals.append(np.clip(vals[-1], -2, 2))
            else:
                ref = item[2]
                if ref[0] == "const":
                    other = ref[1].astype(np.float64)
                else:
                    other = vals[ref[1]] if ref[0] == "value" else xv
                vals.append(BINARY64[item[1]](vals[-1], other))
        return [vals[-1], vals[len(vals) // 2]]

    feeds = {"x": rng.standard_normal(SHAPE).astype(np.float32)}
    return g, feeds, reference


@pytest.mark.parametrize("seed", range(40))
def test_random_chains_match_float64(seed):
    graph, feeds, reference = _random_chain(seed, length=3 + seed % 12)
    compiled = Session().compile(graph)
    x_before = feeds["x"].copy()
    for _ in range(2):  # a second run must not see the first run's buffers
        got = compiled.run(feeds)
        for g, w in zip(got, reference(feeds["x"])):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(feeds["x"], x_before)  # the caller's input untouched


def test_a_long_chain_runs_in_one_buffer():
    g = Graph("long")
    x = g.input("x", Shape(SHAPE, F32))
    v = g.add_node(MatMul(), [x, g.constant(np.eye(SHAPE[-1], dtype=np.float32))])
    kinds = [Activation.SIGMOID, Activation.TANH, Activation.RELU, Activation.NEG] * 5
    for kind in kinds:
        v = g.unary(kind, v)
    g.set_outputs([v])
    compiled = Session().compile(graph := g)
    assert len(compiled.reuses) == len(kinds)  # every elementwise step reuses
    xv = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    want = xv.astype(np.float64)
    for kind in kinds:
        want = UNARY64[kind](want)
    np.testing.assert_allclose(compiled.run({"x": xv})[0], want, rtol=1e-5, atol=1e-6)
    assert graph is compiled.graph


def test_no_reuse_of_inputs_constants_outputs_or_live_views():
    g = Graph("guarded")
    x = g.input("x", Shape(SHAPE, F32))
    c = g.constant(np.ones(SHAPE, np.float32))
    a = g.unary(Activation.TANH, x)  # x: a graph input
    b = g.binary(BinaryOp.ADD, c, a)  # c: a constant (a is reusable)
    view = g.add_node(Transpose((0, 2, 1)), [b])  # a view of b, read after b's last use
    flat = g.add_node(Reshape((4, 128)), [b])
    d = g.unary(Activation.SIGMOID, b)  # b dies here, but its views are read below
    e = g.binary(BinaryOp.MUL, flat, g.add_node(Reshape((4, 128)), [d]))
    out_kept = g.unary(Activation.RELU, e)
    f = g.unary(Activation.NEG, out_kept)  # out_kept is a graph output: not reused
    g.set_outputs([f, out_kept, view])
    compiled = Session().compile(g)
    reused = {compiled.graph.node(n).inputs[k] for n, k in compiled.reuses.items()}
    assert x not in reused and c not in reused and out_kept not in reused
    assert b not in reused  # its transpose and reshape are still to be read
    assert a in reused
    xv = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    got_f, got_kept, got_view = compiled.run({"x": xv})
    bb = 1 + np.tanh(xv.astype(np.float64))
    ee = bb.reshape(4, 128) * (1 / (1 + np.exp(-bb))).reshape(4, 128)
    np.testing.assert_allclose(got_kept, np.maximum(ee, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_f, -np.maximum(ee, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_view, bb.transpose(0, 2, 1), rtol=1e-5, atol=1e-6)


def test_a_value_read_twice_by_the_step_is_not_reused():
    g = Graph("square")
    x = g.input("x", Shape(SHAPE, F32))
    a = g.unary(Activation.TANH, x)
    sq = g.binary(BinaryOp.MUL, a, a)
    g.set_outputs([sq])
    compiled = Session().compile(g)
    assert sq not in compiled.reuses
    xv = np.random.default_rng(2).standard_normal(SHAPE).astype(np.float32)
    np.testing.assert_allclose(compiled.run({"x": xv})[0], np.tanh(xv) ** 2, rtol=1e-6)


def test_a_broadcast_input_is_not_the_output_buffer():
    g = Graph("broadcast")
    x = g.input("x", Shape((1, 16), F32))
    y = g.input("y", Shape(SHAPE, F32))
    a = g.unary(Activation.TANH, x)  # [1, 16]: smaller than the [4, 8, 16] result
    s = g.binary(BinaryOp.ADD, a, y)
    g.set_outputs([s])
    compiled = Session().compile(g)
    assert s not in compiled.reuses
    rng = np.random.default_rng(3)
    xv, yv = rng.standard_normal((1, 16), np.float32), rng.standard_normal(SHAPE, np.float32)
    np.testing.assert_allclose(compiled.run({"x": xv, "y": yv})[0], np.tanh(xv) + yv,
                               rtol=1e-6)


def test_random_chains_mostly_reuse():
    steps = reused = 0
    for seed in range(40):
        graph, _, _ = _random_chain(seed, length=3 + seed % 12)
        compiled = Session().compile(graph)
        steps += len(compiled.steps) - 1  # the MatMul writes a new buffer
        reused += len(compiled.reuses)
    assert reused >= steps // 3, (reused, steps)


def test_a_reused_relu_matches_float64_at_every_size():
    """A Relu writing into its producer's buffer (`kernels.elementwise._relu_into_step`):
    NaN, infinities and signed zeros as float64 numpy gives them, at more distinct sizes of
    a dynamic dim than it caches zeros for, and past one block (the blockwise path)."""
    from rlx.kernels.blockwise import BLOCK
    from rlx.kernels.elementwise import _RELU_SHAPES

    g = Graph("relu sizes")
    x = g.input("x", Shape(("n", 4), F32))
    out = g.unary(Activation.RELU, g.unary(Activation.NEG, x))  # NEG: a fresh buffer
    g.set_outputs([out])
    compiled = Session().compile(g)
    assert out in compiled.reuses
    rng = np.random.default_rng(4)
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0], np.float32)
    for n in [*range(1, _RELU_SHAPES + 3), BLOCK // 4 + 1]:
        xv = rng.standard_normal((n, 4)).astype(np.float32)
        xv.reshape(-1)[:5] = special[:min(5, xv.size)]
        (got,) = compiled.run({"x": xv})
        want = np.maximum(-xv.astype(np.float64), 0).astype(np.float32)
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want))
