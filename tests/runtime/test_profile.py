"""`profile_ops` and `CompiledGraph.run_timed`: every step is timed once per run, the
timed run computes what `run` computes, and the op-type table accounts for every node."""

from __future__ import annotations

import numpy as np

from rlx.ir import DType, Graph, Shape
from rlx.ir.ops.elementwise import Activation, BinaryOp
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


def test_run_timed_matches_run_and_times_each_step():
    compiled = Session().compile(_mlp())
    outputs, seconds = compiled.run_timed(FEEDS)
    np.testing.assert_array_equal(outputs[0], compiled.run(FEEDS)[0])
    assert len(seconds) == len(compiled.steps) == 5
    assert all(s >= 0 for s in seconds)


def test_profile_groups_nodes_by_op_kind():
    profile = profile_ops(Session().compile(_mlp()), FEEDS, repeat=3)
    assert profile.runs == 3 and len(profile.nodes) == 5
    counts = {r.op_type: r.count for r in profile.by_op_type()}
    assert counts == {"MatMul": 2, "Binary(add)": 2, "Unary(relu)": 1}
    rows = profile.by_op_type()
    assert [r.seconds for r in rows] == sorted((r.seconds for r in rows), reverse=True)
    assert abs(sum(r.seconds for r in rows) - profile.total_seconds) < 1e-12
    assert abs(sum(r.share(profile.total_seconds) for r in rows) - 1) < 1e-9
    slowest = profile.slowest(2)
    assert len(slowest) == 2 and slowest[0].seconds >= slowest[1].seconds
    assert slowest[0].seconds == max(n.seconds for n in profile.nodes)
