"""algebraic_simplify: each rule, the cases that must not fire, and output remapping."""

from __future__ import annotations

import numpy as np
import pytest

from rlx.ir import (
    Activation,
    Binary,
    BinaryOp,
    Cast,
    DType,
    Graph,
    Identity,
    Reshape,
    Shape,
    Squeeze,
    Transpose,
    Unary,
    Unsqueeze,
)
from rlx.passes import algebraic_simplify, eliminate_dead_code
from tests.passes.common import assert_same_results, checked, ops_of


def _binary(op: BinaryOp, const: np.ndarray, const_first: bool, x_dims=(2, 3)) -> Graph:
    g = Graph("bin")
    x = g.input("x", Shape(x_dims))
    c = g.constant(const, name="c")
    y = g.add_node(Binary(op), (c, x) if const_first else (x, c), name="y")
    g.set_outputs([g.add_node(Unary(Activation.EXP), (y,), name="out"), y])
    return g


@pytest.mark.parametrize("op, value, const_first", [
    (BinaryOp.MUL, 1, False), (BinaryOp.MUL, 1, True), (BinaryOp.ADD, 0, False),
    (BinaryOp.ADD, 0, True), (BinaryOp.SUB, 0, False), (BinaryOp.DIV, 1, False),
])
def test_neutral_constants_are_removed(op, value, const_first):
    g = _binary(op, np.full((2, 3), value, np.float32), const_first)
    new, count = checked(algebraic_simplify, g)
    assert count == 1 and "Binary" not in ops_of(new)
    assert new.find("y") is None  # the removed node's name goes with it
    assert new.find("out").inputs == (new.find("x").id,)
    assert new.outputs[1] == new.find("x").id  # output 1 now reads x, same position
    assert_same_results(g, new)


@pytest.mark.parametrize("op, const, const_first, x_dims", [
    (BinaryOp.MUL, np.zeros((2, 3)), False, (2, 3)),  # x*0 is NaN for inf: never folded
    (BinaryOp.SUB, np.zeros((2, 3)), True, (2, 3)),  # 0 - x is -x
    (BinaryOp.DIV, np.ones((2, 3)), True, (2, 3)),  # 1 / x
    (BinaryOp.MUL, np.ones((4, 2, 3)), False, (2, 3)),  # broadcasting grows the output
    (BinaryOp.ADD, np.array([0, 0, 1]), False, (2, 3)),  # not all zeros
    (BinaryOp.MUL, np.ones((2, 3)), False, ("n", 3)),  # the constant may broadcast n = 1
])
def test_non_neutral_cases_are_kept(op, const, const_first, x_dims):
    g = _binary(op, const.astype(np.float32), const_first, x_dims)
    new, count = checked(algebraic_simplify, g)
    assert new is g and count == 0


def _chain(x_dims, *ops, dtype=DType.F32) -> Graph:
    """x -> op1 -> op2 -> ... -> relu, with the last op also a graph output."""
    g = Graph("chain")
    v = g.input("x", Shape(x_dims, dtype))
    for i, op in enumerate(ops):
        v = g.add_node(op, (v,), name=f"op{i}")
    g.set_outputs([g.add_node(Unary(Activation.ABS), (v,), name="out"), v])
    return g


@pytest.mark.parametrize("graph, ops, count", [
    (_chain((2, 3, 4), Transpose((1, 0, 2)), Transpose((1, 0, 2))), [], 1),
    (_chain((2, 3), Transpose(), Transpose((1, 0))), [], 1),
    (_chain((2, 3, 4), Transpose((2, 0, 1)), Transpose((2, 0, 1))), ["Transpose"], 1),
    (_chain((2, 3, 4), Transpose((0, 1, 2))), [], 1),
    (_chain((2, 3, 4), Transpose((1, 2, 0)), Transpose((0, 2, 1)), Transpose((2, 1, 0))),
     ["Transpose"], 2),
    (_chain((2, 3, 4), Reshape((6, 4)), Reshape((4, 6))), ["Reshape"], 1),
    (_chain((2, 3, 4), Reshape((2, 12)), Reshape((0, 3, -1))), [], 1),
    (_chain((2, 3, 0), Reshape((6, 0), True), Reshape((3, 0, 2), True)), ["Reshape"], 1),
    (_chain((2, 3), Reshape((2, 3))), [], 1),
    (_chain((2, 3), Cast(DType.F32)), [], 1),
    (_chain((2, 3), Identity(), Identity()), [], 2),
    (_chain((2, 3), Unsqueeze((0, -1)), Squeeze((3, 0))), [], 1),
])
def test_shape_rules(graph, ops, count):
    new, n = checked(algebraic_simplify, graph)
    assert n == count
    live, _ = eliminate_dead_code(new)  # the bypassed inner nodes are dead now
    assert [o for o in ops_of(live) if o not in ("Input", "Unary")] == ops
    assert_same_results(graph, new)


def test_a_composed_node_takes_the_outer_name():
    g = _chain((2, 3, 4), Transpose((2, 0, 1)), Transpose((2, 0, 1)))
    new, _ = eliminate_dead_code(checked(algebraic_simplify, g)[0])
    (t,) = [n for n in new.nodes() if isinstance(n.op, Transpose)]
    assert t.name == "op1" and t.op.perm == (1, 2, 0) and t.inputs == (0,)
    assert new.outputs[1] == t.id


@pytest.mark.parametrize("graph", [
    _chain((2, 3), Transpose()),
    _chain((2, 3, 4), Reshape((6, 4))),
    _chain((2, 3), Cast(DType.F64)),
    _chain((1, 3), Unsqueeze((0,)), Squeeze((1,))),  # another axis (same values: not proven)
    _chain((1, 3), Unsqueeze((0,)), Squeeze()),  # axes=None squeezes the old 1 too
    _chain((2, 3), Unsqueeze((0,))),
])
def test_shape_ops_that_do_something_are_kept(graph):
    new, count = checked(algebraic_simplify, graph)
    assert new is graph and count == 0
