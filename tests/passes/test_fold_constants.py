"""fold_constants: constant-only nodes become constants; growth, inputs and packing refuse."""

from __future__ import annotations

import numpy as np

from rlx.codecs import Encoding, quantize_q8_0
from rlx.ir import (
    Activation,
    BinaryOp,
    DequantMatMul,
    DType,
    Expand,
    Gather,
    Graph,
    If,
    Shape,
    Split,
    Transpose,
    Unary,
)
from rlx.ir.ops.sources import Constant
from rlx.passes import fold_constants
from tests.passes.common import assert_same_results, checked, ops_of, run

RNG = np.random.default_rng(3)


def test_a_constant_subgraph_folds_in_one_pass_under_the_last_name():
    g = Graph("fold")
    x = g.input("x", Shape([3, 2]))
    a = g.constant(RNG.standard_normal((2, 3)).astype(np.float32), name="a")
    b = g.constant(RNG.standard_normal((2, 3)).astype(np.float32), name="b")
    s = g.binary(BinaryOp.ADD, a, b)
    t = g.add_node(Transpose(), (s,), name="t")
    e = g.add_node(Unary(Activation.EXP), (t,), name="e")
    g.set_outputs([g.binary(BinaryOp.MUL, x, e), e])
    new, count = checked(fold_constants, g)
    assert count == 3  # add, transpose, exp; the Mul reads the input x
    e_new = new.find("e")
    assert isinstance(e_new.op, Constant) and e_new.shape == Shape([3, 2])
    np.testing.assert_array_equal(e_new.op.array(e_new.shape),
                                  np.exp((g.find("a").op.array(Shape([2, 3])) +
                                          g.find("b").op.array(Shape([2, 3]))).T))
    assert ops_of(new).count("Binary") == 1 and new.outputs[1] == e_new.id
    assert_same_results(g, new)


def test_nothing_to_fold_returns_the_same_graph():
    g = Graph("none")
    x = g.input("x", Shape([2]))
    g.set_outputs([g.binary(BinaryOp.ADD, x, g.constant(np.ones(2, np.float32)))])
    new, count = checked(fold_constants, g)
    assert new is g and count == 0


def test_growing_results_are_refused(caplog):
    g = Graph("grow")
    scalar = g.constant(np.float32(2.0), name="scalar")
    big = g.add_node(Expand((1024, 1024)), (scalar,), name="big")
    small = g.add_node(Expand((4, 3)), (scalar,), name="small")
    g.set_outputs([big, small])
    with caplog.at_level("INFO", logger="rlx.passes.constant_folding"):
        new, count = checked(fold_constants, g)
    assert count == 1 and ops_of(new) == ["Constant", "Expand", "Constant"]
    assert "'big' (Expand) not folded" in caplog.text and "grow" in caplog.text
    np.testing.assert_array_equal(run(new, {})[1], np.full((4, 3), 2, np.float32))


def test_tuple_valued_nodes_fold_through_their_tuple_gets():
    g = Graph("split")
    x = g.input("x", Shape([2]))
    c = g.constant(np.arange(5, dtype=np.float32), name="c")
    parts = g.unpack(g.add_node(Split(0, (2, 3)), (c,), name="split"))
    g.set_outputs([g.binary(BinaryOp.ADD, x, parts[0]), parts[1]])
    new, count = checked(fold_constants, g)
    assert count == 2
    out = new.node(new.outputs[1])
    assert isinstance(out.op, Constant)
    np.testing.assert_array_equal(out.op.array(out.shape), [2, 3, 4])
    assert_same_results(g, new)


def test_packed_matmuls_and_control_flow_are_not_folded():
    g = Graph("kept")
    w = RNG.standard_normal((32, 2)).astype(np.float32)
    x = g.constant(np.ones((1, 32), np.float32), name="x")
    packed = g.constant(quantize_q8_0(np.ascontiguousarray(w.T)), name="w")
    mm = g.add_node(DequantMatMul(Encoding.GGUF_Q8_0, 2), (x, packed), name="mm")
    branch = Graph("branch")
    branch.set_outputs([branch.input("v", Shape([1, 32]))])
    cond = g.constant(np.array(True), name="cond")
    (chosen,) = g.unpack(g.add_node(If(branch, branch), (cond, x)))
    g.set_outputs([mm, chosen])
    new, count = checked(fold_constants, g)
    assert new is g and count == 0


def test_a_failing_kernel_leaves_the_node_for_run_time(caplog):
    g = Graph("bad")
    data = g.constant(np.arange(3, dtype=np.float32))
    idx = g.constant(np.array([7], np.int64))
    g.set_outputs([g.add_node(Gather(0), (data, idx), name="gather")])
    with caplog.at_level("WARNING", logger="rlx.passes.constant_folding"):
        new, count = checked(fold_constants, g)
    assert new is g and count == 0 and "'gather' (Gather) not folded" in caplog.text


def test_integer_and_bool_results_keep_their_dtype():
    g = Graph("ints")
    a = g.constant(np.array([5, -3], np.int32))
    b = g.constant(np.array([2, 2], np.int32))
    q = g.binary(BinaryOp.DIV, a, b)
    g.set_outputs([q, g.add_node(Unary(Activation.IS_NAN),
                                 (g.constant(np.array([np.nan, 1], np.float32)),))])
    new, count = checked(fold_constants, g)
    assert count == 2
    assert [new.node(o).shape.dtype for o in new.outputs] == [DType.I32, DType.BOOL]
    assert_same_results(g, new)


def test_large_folds_of_one_weight_by_equal_ops_are_one_constant():
    """An LSTM's weight transposed once per cell: the deferred folds (results of 1 MiB or
    more are computed when read) carried their node's id and name, so no two were the same
    and captcha-crnn's exact file held 40 copies of two weights (268 MB from a 19 MB model)."""
    from rlx.deferred import DEFER_MIN_BYTES, Computed
    from rlx.passes import dedupe_identical_constants

    g = Graph("cells")
    x = g.input("x", Shape([1, 1024]))
    w_value = RNG.standard_normal((256, 1024)).astype(np.float32)
    assert w_value.nbytes >= DEFER_MIN_BYTES
    w = g.constant(w_value, name="w")
    outs = [g.add_node(Transpose(), (w,), name=f"cell{i}.t") for i in range(3)]
    g.set_outputs([g.matmul(x, t) for t in outs])
    folded, count = checked(fold_constants, g)
    assert count == 3
    payloads = [folded.find(f"cell{i}.t").op.data for i in range(3)]
    assert all(isinstance(p, Computed) for p in payloads)
    assert payloads[0].same(payloads[1])
    assert payloads[0].fingerprint() == payloads[2].fingerprint()
    merged, _ = dedupe_identical_constants(folded)
    assert len({merged.node(o).inputs[1] for o in merged.outputs}) == 1  # one weight read
    xs = {"x": RNG.standard_normal((1, 1024)).astype(np.float32)}
    want = xs["x"].astype(np.float64) @ w_value.T.astype(np.float64)
    for got in run(merged, xs):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
