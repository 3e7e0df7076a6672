"""specialize: bound Params become same-named Constants; bad bindings raise BindingError."""

from __future__ import annotations

import numpy as np
import pytest

from rlx.errors import BindingError
from rlx.ir import BinaryOp, DType, Graph, Shape
from rlx.ir.ops.sources import Constant, Param
from rlx.passes import specialize
from tests.passes.common import checked, random_feeds, run


def _mul_graph(shape=(4,)) -> Graph:
    """The seed's `x * w` graph, with a second, unbound param `b` added."""
    g = Graph("mul_bake")
    x = g.input("x", Shape(shape))
    w = g.param("w", Shape(shape))
    b = g.param("b", Shape(shape))
    y = g.binary(BinaryOp.MUL, x, w)
    g.set_outputs([g.binary(BinaryOp.ADD, y, b)])
    return g


def test_bound_param_becomes_named_constant_in_place_zero_copy():
    g = _mul_graph()
    w = np.array([1, 2, 3, 4], np.float32)
    new, count = checked(specialize, g, {"w": w})
    assert count == 1
    node = new.node(g.find("w").id)
    assert node.name == "w" and isinstance(node.op, Constant)
    assert node.shape == Shape([4], DType.F32)
    assert np.shares_memory(node.op.data, w)
    assert isinstance(new.find("b").op, Param)  # unbound params stay
    both, _ = checked(specialize, new, {"b": np.full(4, 0.5, np.float32)})
    feeds = random_feeds(g)
    (out,) = run(both, feeds)
    np.testing.assert_array_equal(out, feeds["x"] * w + np.float32(0.5))


def test_nothing_bound_returns_the_same_graph():
    g = _mul_graph()
    new, count = checked(specialize, g, {"not_a_param": np.zeros(4, np.float32)})
    assert new is g and count == 0


def test_lists_and_flat_bindings_are_accepted():
    g = _mul_graph((2, 2))
    new, _ = checked(specialize, g, {"w": [1, 2, 3, 4]})
    values = new.find("w").op.array(new.find("w").shape)
    np.testing.assert_array_equal(values, [[1, 2], [3, 4]])
    new, _ = checked(specialize, g, {"w": np.arange(4, dtype=np.float32)})
    assert new.find("w").shape.dims == (2, 2)


def test_big_endian_binding_is_stored_little_endian():
    g = _mul_graph()
    new, _ = checked(specialize, g, {"w": np.arange(4, dtype=">f4")})
    node = new.find("w")
    np.testing.assert_array_equal(node.op.array(node.shape), np.arange(4, dtype=np.float32))


def test_symbolic_dims_take_the_binding_shape():
    g = Graph("sym")
    w = g.param("w", Shape(["n", 3]))
    g.set_outputs([w])
    new, _ = checked(specialize, g, {"w": np.zeros((5, 3), np.float32)})
    assert new.find("w").shape == Shape([5, 3])


@pytest.mark.parametrize("value, match", [
    (np.zeros(5, np.float32), r"'w'.*shape.*expected f32\[4\] \(4 elements\), got f32\[5\]"),
    (np.zeros(4, np.float64), r"'w'.*dtype f64.*expected f32\[4\].*got f64\[4\]"),
    (np.zeros((2, 2), np.float32), r"'w'.*shape.*got f32\[2, 2\]"),
    ([[1, 2], [3]], r"'w'.*cannot convert"),
])
def test_bad_bindings_raise_naming_the_param(value, match):
    with pytest.raises(BindingError, match=match):
        specialize(_mul_graph(), {"w": value})


@pytest.mark.parametrize("dims, value", [
    (["n", 3], np.zeros((5, 4), np.float32)),  # static dim differs
    (["n", "n"], np.zeros((2, 3), np.float32)),  # one symbol, two sizes
    (["n", 3], np.zeros(15, np.float32)),  # flat cannot fix a symbol
])
def test_symbolic_mismatches_raise(dims, value):
    g = Graph("sym")
    g.set_outputs([g.param("w", Shape(dims))])
    with pytest.raises(BindingError, match="'w'"):
        specialize(g, {"w": value})
