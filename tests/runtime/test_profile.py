"""`profile_ops`: every node that runs is timed, subgraph nodes included and apart from
their control-flow node, and the op-type table accounts for every node."""

from __future__ import annotations

import numpy as np

from rlx.ir import DType, Graph, Shape
from rlx.ir.ops.control import If
from rlx.ir.ops.elementwise import Activation, BinaryOp
from rlx.ir.ops.logic import Compare, CompareOp
from rlx.ir.ops.reduce import Reduce, ReduceOp
from rlx.runtime import Session
from rlx.runtime.profile import profile_ops


def _mlp() -> Graph:
    rng = np.random.default_rng(0)
    g = Graph("mlp")
    x = g.input("x", Shape((2, 8), DType.F32))
    w1, b1 = g.constant(rng.random((8, 4), np.float32)), g.constant(rng.random(4, np.float32))
    w2, b2 = g.constant(rng.random((4, 3), np.float32)), g.constant(rng.random(3, np.float32))
    h = g.unary(Activation.RELU, g.binary(BinaryOp.ADD, g.matmul(x, w1), b1))
    g.set_outputs([g.binary(BinaryOp.ADD, g.matmul(h, w2), b2)])
    return g


FEEDS = {"x": np.arange(16, dtype=np.float32).reshape(2, 8) / 16}


def test_profile_groups_nodes_by_op_kind():
    profile = profile_ops(Session().compile(_mlp()), FEEDS, repeat=3)
    assert profile.runs == 3 and len(profile.nodes) == 5
    counts = {r.op_type: r.count for r in profile.by_op_type()}
    assert counts == {"MatMul": 2, "Add": 2, "Relu": 1}  # ONNX op types
    rows = profile.by_op_type()
    assert [r.seconds for r in rows] == sorted((r.seconds for r in rows), reverse=True)
    assert abs(sum(r.seconds for r in rows) - profile.total_seconds) < 1e-12
    assert abs(sum(r.share(profile.total_seconds) for r in rows) - 1) < 1e-9
    slowest = profile.slowest(2)
    assert len(slowest) == 2 and slowest[0].seconds >= slowest[1].seconds
    assert slowest[0].seconds == max(n.seconds for n in profile.nodes)


def _if_graph() -> Graph:
    """out = If(x.sum() > 0, then: relu(x) + 1, else: -x)."""
    def branch(name: str, build) -> Graph:
        b = Graph(name)
        b.set_outputs([build(b, b.input("x", Shape((2, 8), DType.F32)))])
        return b

    then = branch("then", lambda b, x: b.binary(BinaryOp.ADD, b.unary(Activation.RELU, x),
                                               b.constant(np.float32(1))))
    other = branch("else", lambda b, x: b.unary(Activation.NEG, x))
    g = Graph("branchy")
    x = g.input("x", Shape((2, 8), DType.F32))
    total = g.add_node(Reduce(ReduceOp.SUM, axes=(0, 1), keepdims=False), [x])
    cond = g.add_node(Compare(CompareOp.GT), [total, g.constant(np.float32(0))])
    (out,) = g.unpack(g.add_node(If(then, other), [cond, x]))
    g.set_outputs([out])
    return g


def test_profile_descends_into_the_branch_taken():
    compiled = Session().compile(_if_graph())
    np.testing.assert_array_equal(compiled.run(FEEDS)[0], np.maximum(FEEDS["x"], 0) + 1)
    profile = profile_ops(compiled, FEEDS, repeat=3)
    labels = [n.label for n in profile.nodes]
    ops = [n.op for n in profile.nodes]
    # the then branch ran (x sums > 0): its two nodes are listed under its name
    assert sum("then" in label for label in labels) == 2
    assert not any("else" in label for label in labels)
    assert {"Relu", "Add", "If", "ReduceSum", "Greater"} <= set(ops)
    assert "Neg" not in ops
    assert all(n.seconds >= 0 for n in profile.nodes)
