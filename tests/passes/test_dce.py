"""eliminate_dead_code: keep what the outputs read, plus every Input."""

from __future__ import annotations

import numpy as np

from rlx.ir import Activation, BinaryOp, Graph, Shape, Unary
from rlx.passes import eliminate_dead_code
from tests.passes.common import assert_same_results, checked


def test_dead_nodes_go_inputs_and_names_stay():
    g = Graph("dce")
    x = g.input("x", Shape([3]))
    g.input("unused", Shape([2]))
    dead_c = g.constant(np.ones(3, np.float32), name="dead_c")
    g.binary(BinaryOp.ADD, x, dead_c)  # dead
    c = g.constant(np.full(3, 2, np.float32), name="c")
    g.unary(Activation.EXP, x)  # dead
    y = g.add_node(Unary(Activation.RELU), (x,), name="y")
    out = g.binary(BinaryOp.MUL, y, c)
    g.set_outputs([out, x])
    new, removed = checked(eliminate_dead_code, g)
    assert removed == 3
    assert [n.name for n in new.nodes()] == ["x", "unused", "c", "y", None]
    assert [new.node(o).name for o in new.outputs] == [None, "x"]
    assert new.node(new.outputs[0]).inputs == (new.find("y").id, new.find("c").id)
    assert_same_results(g, new)


def test_nothing_dead_returns_the_same_graph():
    g = Graph("live")
    x = g.input("x", Shape([3]))
    g.input("also_kept", Shape([1]))
    g.set_outputs([g.unary(Activation.EXP, x)])
    new, removed = checked(eliminate_dead_code, g)
    assert new is g and removed == 0
