"""rlx.ir.rewrite: the graph-rebuilding helper every pass uses."""

from __future__ import annotations

import numpy as np
import pytest

from rlx.errors import GraphError
from rlx.ir import Activation, BinaryOp, DType, Graph, Shape, Unary, verify
from rlx.ir.ops.sources import Constant
from rlx.ir.rewrite import Rewriter, constant_value, rewrite_nodes
from tests.passes.common import assert_unchanged, snapshot


def _graph() -> Graph:
    g = Graph("g")
    x = g.input("x", Shape([2, 3]))
    c = g.constant(np.ones((2, 3), np.float32), name="c")
    y = g.binary(BinaryOp.ADD, x, c)
    r = g.add_node(Unary(Activation.RELU), (y,), name="r")
    g.set_outputs([r, y])
    return g


def test_copying_everything_returns_the_same_graph(monkeypatch):
    g = _graph()
    added = []
    monkeypatch.setattr(Graph, "add_node", lambda *args, **kwargs: added.append(args))
    new, count = rewrite_nodes(g, lambda rw, node: False)
    assert new is g and count == 0
    assert added == []  # a pass that changes nothing builds no graph


def test_the_first_change_copies_the_unchanged_prefix():
    g = _graph()

    def negate_relu(rw: Rewriter, node) -> bool:
        if node.name != "r":
            # before any change, the new graph reads as the source
            assert all(rw.node(i) is g.node(i) for i in node.inputs)
            return False
        rw.substitute(node, Unary(Activation.NEG), rw.inputs(node), node.shape)
        return True

    new, count = rewrite_nodes(g, negate_relu)
    verify(new)
    assert count == 1 and new is not g
    assert [(n.op, n.inputs, n.name) for n in new.nodes()][:3] == \
        [(n.op, n.inputs, n.name) for n in g.nodes()][:3]
    assert new.node(3).op == Unary(Activation.NEG) and new.outputs == g.outputs


def test_replace_remaps_readers_and_outputs_and_keeps_names():
    g = _graph()
    before = snapshot(g)

    def fold_add(rw: Rewriter, node) -> bool:
        if node.id != 2:
            return False
        rw.replace(node.id, rw.id(node.inputs[0]))  # y := x
        return True

    new, count = rewrite_nodes(g, fold_add)
    assert_unchanged(g, before)
    verify(new)
    assert count == 1 and new is not g
    assert [n.name for n in new.nodes()] == ["x", "c", "r"]
    assert new.outputs == [2, 0]  # output 1 (y) now reads x, at the same position
    assert new.node(2).inputs == (0,)


def test_substitute_gives_the_new_node_the_old_name():
    g = _graph()
    rw = Rewriter(g)
    for node in g.nodes():
        if node.name == "r":
            rw.substitute(node, node.op, rw.inputs(node), node.shape)
        else:
            rw.copy(node)
    new = rw.finish()
    assert new is not g and new.find("r").id == 3


def test_dropped_nodes_cannot_be_read():
    g = _graph()
    rw = Rewriter(g)
    rw.copy(g.node(0))
    rw.drop(1)
    with pytest.raises(GraphError, match="dropped"):
        rw.copy(g.node(2))


def test_fresh_name_avoids_both_graphs():
    g = _graph()
    rw = Rewriter(g)
    rw.copy(g.node(0))
    assert rw.fresh_name("new") == "new"
    assert rw.fresh_name("r") == "r.1"  # "r" is a later source node: still taken
    rw.emit_constant(np.zeros(1, np.float32), "r.1")
    assert rw.fresh_name("r") == "r.2"


def test_constant_value():
    g = _graph()
    assert constant_value(g.node(0)) is None
    value = constant_value(g.node(1))
    assert value.shape == (2, 3) and value.dtype == np.float32 and not value.flags.writeable
    stripped = g.add_node(Constant(b""), (), Shape([4], DType.F32))
    assert constant_value(g.node(stripped)) is None
    empty = g.add_node(Constant(b""), (), Shape([0], DType.F32))
    assert constant_value(g.node(empty)).shape == (0,)
