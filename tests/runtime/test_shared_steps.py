"""Nodes alike share one built step (`SHARED_STEPS`): nodes of one op object, shape and
arity run the same step object, others (a Conv, whose caches follow its weights) one each,
and every result still matches float64 numpy, also when the shared steps write into
their dying inputs' buffers. Counted from `CompiledGraph.loop`, checked against float64."""

from __future__ import annotations

import gc

import numpy as np

from rlx.ir import DType, Graph, Shape
from rlx.ir.ops.elementwise import Activation, Binary, BinaryOp, Unary
from rlx.ir.ops.shaping import Reshape
from rlx.ir.ops.windows import Conv
from rlx.runtime import Session

F32 = DType.F32
RNG = np.random.default_rng(7)


def _silu64(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-x))


def _runs_by_node(compiled) -> dict[int, object]:
    return {out: run for run, _, _, out, _ in compiled.loop}


def test_nodes_of_one_op_shape_and_arity_share_their_step():
    silu, add = Unary(Activation.SILU), Binary(BinaryOp.ADD)
    g = Graph("alike")
    x = g.input("x", Shape((2, 8), F32))
    y = g.input("y", Shape((4, 4), F32))
    a = g.add_node(silu, [x])
    b = g.add_node(silu, [g.add_node(add, [a, x])])  # reuses the Add's buffer
    c = g.add_node(silu, [y])  # another shape: a step of its own
    d = g.add_node(Unary(Activation.SILU), [x])  # an equal op, another object: its own
    twin = g.add_node(silu, [x])
    flat = g.add_node(Reshape((4, 4)), [b])
    g.set_outputs([g.add_node(add, [flat, c]), d, twin])
    compiled = Session().compile(g)
    runs = _runs_by_node(compiled)
    assert b in compiled.reuses
    assert runs[a] is runs[twin]
    assert runs[a] is not runs[c] and runs[a] is not runs[d]
    xv = RNG.standard_normal((2, 8)).astype(np.float32)
    yv = RNG.standard_normal((4, 4)).astype(np.float32)
    x64, y64 = xv.astype(np.float64), yv.astype(np.float64)
    want = _silu64(_silu64(x64) + x64).reshape(4, 4) + _silu64(y64)
    for _ in range(2):  # the second run finds the steps' caches filled
        out, *silu_x = compiled.run({"x": xv, "y": yv})
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
        for got in silu_x:
            np.testing.assert_allclose(got, _silu64(x64), rtol=1e-5, atol=1e-6)


def test_the_reusing_wrappers_of_one_shared_step_are_one():
    silu, mul = Unary(Activation.SILU), Binary(BinaryOp.MUL)
    g = Graph("wrappers")
    x = g.input("x", Shape((3, 5), F32))
    v, outs = x, []
    for _ in range(3):
        v = g.add_node(silu, [g.add_node(mul, [v, x])])  # each SiLU reuses its Mul's buffer
        outs.append(v)
    g.set_outputs([v])
    compiled = Session().compile(g)
    runs = _runs_by_node(compiled)
    assert all(o in compiled.reuses for o in outs)
    assert len({id(runs[o]) for o in outs}) == 1
    xv = RNG.standard_normal((3, 5)).astype(np.float32)
    x64, want = xv.astype(np.float64), xv.astype(np.float64)
    for _ in range(3):
        want = _silu64(want * x64)
    np.testing.assert_allclose(compiled.run({"x": xv})[0], want, rtol=1e-5, atol=1e-6)


def test_convs_of_one_op_keep_a_step_each_for_their_own_weights():
    """A 1x1 Conv is a product over channels: float64 einsum is its reference."""
    conv = Conv()
    g = Graph("convs")
    x = g.input("x", Shape((1, 4, 3, 3), F32))
    weights = [RNG.standard_normal((4, 4, 1, 1)).astype(np.float32) for _ in range(2)]
    first = g.add_node(conv, [x, g.constant(weights[0])])
    second = g.add_node(conv, [first, g.constant(weights[1])])
    g.set_outputs([second])
    compiled = Session().compile(g)
    runs = _runs_by_node(compiled)
    assert runs[first] is not runs[second]
    xv = RNG.standard_normal((1, 4, 3, 3)).astype(np.float32)
    want = xv.astype(np.float64)
    for w in weights:
        want = np.einsum("nchw,mc->nmhw", want, w[:, :, 0, 0].astype(np.float64))
    for _ in range(2):
        np.testing.assert_allclose(compiled.run({"x": xv})[0], want, rtol=1e-5, atol=1e-5)


def test_a_dropped_compiled_graph_is_freed_at_once():
    """No reference cycle holds a compiled graph's steps once it is dropped (a wrapper of
    its bound run method, kept on it, held them until the cyclic collector ran)."""
    g = Graph("drop")
    x = g.input("x", Shape((2, 2), F32))
    g.set_outputs([g.unary(Activation.SILU, x)])
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        compiled = Session().compile(g)
        compiled.run({"x": np.ones((2, 2), np.float32)})
        del compiled
        assert gc.collect() == 0
    finally:
        if enabled:
            gc.enable()
