"""resolve_shapes: run-time shape arithmetic becomes constants and static-form ops; results
are bit-identical to the unresolved graph (same kernels, same values)."""

from __future__ import annotations

import numpy as np
import pytest

from rlx.ir import (
    BinaryOp,
    Concat,
    CumSum,
    DType,
    Expand,
    Fill,
    Gather,
    Graph,
    If,
    Pad,
    PadMode,
    Reduce,
    ReduceOp,
    Reshape,
    Resize,
    ResizeMode,
    Shape,
    ShapeOf,
    Size,
    Slice,
    Squeeze,
    Tile,
    TopK,
    Unsqueeze,
)
from rlx.ir.rewrite import constant_value
from rlx.passes.shape_resolution import resolve_shapes
from tests.passes.common import assert_same_results, checked, ops_of, run


def _i64(g: Graph, values) -> int:
    return g.constant(np.asarray(values, np.int64))


def test_shape_chain_resolves_in_one_sweep():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as exporters write a flatten."""
    g = Graph("chain")
    x = g.input("x", Shape((2, 3, 4)))
    batch = g.add_node(Gather(0), (g.add_node(ShapeOf(), (x,)), _i64(g, 0)))
    target = g.add_node(Concat(0), (g.add_node(Unsqueeze((0,)), (batch,)), _i64(g, [-1])))
    y = g.add_node(Reshape(None), (x, target))
    g.add_node(Size(), (y,))
    g.set_outputs([y])
    new, count = checked(resolve_shapes, g)
    assert count >= 4
    out = new.node(new.outputs[0])
    assert out.op == Reshape((2, -1)) and out.shape.dims == (2, 12)
    assert "ShapeOf" not in ops_of(new)
    assert_same_results(g, new)


def test_sharper_dims_let_later_shape_queries_resolve():
    g = Graph("downstream")
    x = g.input("x", Shape((4, 6)))
    t = g.add_node(Tile(None), (x, _i64(g, [2, 1])))  # dims unknown until resolved
    assert g.node(t).shape.dims == ("?", "?")
    rows = g.add_node(ShapeOf(0, 1), (t,))
    flat = g.add_node(Reshape(None), (t, g.add_node(Concat(0), (rows, _i64(g, [-1])))))
    g.set_outputs([flat])
    new, _ = checked(resolve_shapes, g)
    out = new.node(new.outputs[0])
    assert out.op == Reshape((8, -1)) and out.shape.dims == (8, 6)
    assert_same_results(g, new)


@pytest.mark.parametrize("build,expected", [
    (lambda g, x: g.add_node(Expand(None), (x, _i64(g, [3, 1, 5]))), Expand((3, 1, 5))),
    (lambda g, x: g.add_node(Slice(), (x, _i64(g, [1]), _i64(g, [4]), _i64(g, [-1]),
                                       _i64(g, [2]))), Slice((1,), (4,), (-1,), (2,))),
    (lambda g, x: g.add_node(Squeeze(None), (g.add_node(Unsqueeze(None), (x, _i64(g, [0]))),
                                             _i64(g, [0]))), Squeeze((0,))),
    (lambda g, x: g.add_node(Pad(PadMode.CONSTANT, None), (x, _i64(g, [0, 1, 1, 0]),
                                                          g.constant(np.float32(2.5)))),
     Pad(PadMode.CONSTANT, (0, 1, 1, 0), 2.5)),
    (lambda g, x: g.add_node(Reduce(ReduceOp.SUM, None, False), (x, _i64(g, [-1]))),
     Reduce(ReduceOp.SUM, (-1,), False)),
    (lambda g, x: g.add_node(Reduce(ReduceOp.MAX, None, True, True),
                             (x, _i64(g, np.zeros(0, np.int64)))),
     Reduce(ReduceOp.MAX, (), True, True)),
    (lambda g, x: g.unpack(g.add_node(TopK(None), (x, g.constant(np.int64(2)))))[0],
     TopK(2, -1)),
    (lambda g, x: g.add_node(CumSum(None, True), (x, g.constant(np.int64(1)))),
     CumSum(1, True)),
    (lambda g, x: g.add_node(Resize(None, mode=ResizeMode.LINEAR, operands=("scales",)),
                             (x, g.constant(np.array([1, 2], np.float32)))),
     Resize((2, 10), (1.0, 2.0), mode=ResizeMode.LINEAR)),
])
def test_dynamic_forms_take_their_static_form(build, expected):
    g = Graph("dynamic")
    x = g.input("x", Shape((2, 5)))
    g.set_outputs([build(g, x)])
    new, count = checked(resolve_shapes, g)
    assert count >= 1
    resolved = [n.op for n in new.nodes() if type(n.op) is type(expected)]
    assert expected in resolved, resolved
    assert_same_results(g, new)


def test_fill_of_a_known_shape():
    g = Graph("fill")
    x = g.input("x", Shape((3, 2)))
    zeros = g.add_node(Fill(0.0, DType.F32), (g.add_node(ShapeOf(), (x,)),))
    g.set_outputs([g.binary(BinaryOp.ADD, x, zeros)])
    new, _ = checked(resolve_shapes, g)
    assert Fill(0.0, DType.F32, (3, 2)) in [n.op for n in new.nodes()]
    assert_same_results(g, new)


def test_non_finite_pad_value_stays_an_input():
    g = Graph("pad_inf")
    x = g.input("x", Shape((2, 2)))
    y = g.add_node(Pad(PadMode.CONSTANT, None), (x, _i64(g, [1, 0, 0, 1]),
                                                 g.constant(np.float32(-np.inf))))
    g.set_outputs([y])
    new, _ = checked(resolve_shapes, g)
    assert new.node(new.outputs[0]).op.pads is None
    assert_same_results(g, new)


def test_a_symbolic_target_is_spelled_with_placeholders():
    """Reshape(x, Shape(x)) with a symbolic batch: the batch is copied (0), the rest known;
    the bit-identical results at two batches are in tests/passes/test_symbolic_shapes.py."""
    g = Graph("symbolic")
    x = g.input("x", Shape(("batch", 3)))
    g.set_outputs([g.add_node(Reshape(None), (x, g.add_node(ShapeOf(), (x,))))])
    new, count = checked(resolve_shapes, g)
    out = new.node(new.outputs[0])
    assert count == 1 and out.op == Reshape((0, 3)) and out.shape.dims == ("batch", 3)


def test_an_unrelated_symbolic_target_stays_dynamic():
    """Two sizes that are not x's own dims at their positions: no exact placeholder form."""
    g = Graph("symbolic")
    x = g.input("x", Shape(("a", "b")))
    target = g.add_node(Gather(0), (g.add_node(ShapeOf(), (x,)), _i64(g, [1, 0])))
    g.set_outputs([g.add_node(Reshape(None), (x, target))])
    new, _ = checked(resolve_shapes, g)
    assert new.node(new.outputs[0]).op == Reshape(None)


def test_subgraphs_are_resolved():
    body = Graph("then")
    inner = body.input("v", Shape((2, 3)))
    body.set_outputs([body.add_node(Reshape(None), (inner, body.add_node(ShapeOf(), (inner,))))])
    g = Graph("outer")
    x = g.input("x", Shape((2, 3)))
    c = g.input("c", Shape((), DType.BOOL))
    branch = g.add_node(If(body, body), (c, x))
    g.set_outputs(g.unpack(branch))
    new, count = checked(resolve_shapes, g)
    assert count >= 1
    then = next(n for n in new.nodes() if isinstance(n.op, If)).op.then_branch
    assert "ShapeOf" not in ops_of(then)
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "c": np.array(True)}
    np.testing.assert_array_equal(run(new, feeds)[0], run(g, feeds)[0])


def test_nothing_to_resolve_returns_the_same_graph():
    g = Graph("static")
    x = g.input("x", Shape((2, 3)))
    g.set_outputs([g.add_node(Reshape((3, 2)), (x,))])
    new, count = checked(resolve_shapes, g)
    assert new is g and count == 0


def test_dynamic_form_shape_arithmetic_is_followed_too():
    """Slice and Unsqueeze taking their bounds and axes as inputs (so their lengths are not
    known to inference): their values still are, and the static dims they pick fold."""
    g = Graph("dynamic forms")
    x = g.input("x", Shape(("batch", 3, 4)))
    shape = g.add_node(ShapeOf(), (x,))
    rest = g.add_node(Slice(), (shape, _i64(g, [1]), _i64(g, [3])))
    lead = g.add_node(Unsqueeze(None), (g.add_node(Gather(0), (shape, _i64(g, 0))),
                                        _i64(g, [0])))
    picked = g.add_node(Gather(0), (g.add_node(Concat(0), (lead, rest)), _i64(g, [1, 2])))
    g.set_outputs([picked])
    new, _ = checked(resolve_shapes, g)
    assert constant_value(new.node(new.outputs[0])).tolist() == [3, 4]
    feeds = {"x": np.zeros((2, 3, 4), np.float32)}
    np.testing.assert_array_equal(run(g, feeds)[0], [3, 4])


def test_an_expand_to_its_own_symbolic_dims_keeps_them_with_1s():
    """Expand(x [batch, 1], [x.shape[0], 4]): the batch entry becomes 1 (broadcasting keeps
    x's dim), so the Expand is static and the results equal at two batches."""
    g = Graph("expand")
    x = g.input("x", Shape(("batch", 1)))
    batch = g.add_node(Gather(0), (g.add_node(ShapeOf(), (x,)), _i64(g, [0])))
    y = g.add_node(Expand(None), (x, g.add_node(Concat(0), (batch, _i64(g, [4])))))
    g.set_outputs([y])
    new, _ = checked(resolve_shapes, g)
    out = new.node(new.outputs[0])
    assert out.op == Expand((1, 4)) and out.shape.dims == ("batch", 4)
    for rows in (1, 3):
        feeds = {"x": np.arange(rows, dtype=np.float32).reshape(rows, 1)}
        np.testing.assert_array_equal(run(new, feeds)[0], np.broadcast_to(feeds["x"], (rows, 4)))
