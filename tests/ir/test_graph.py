"""Graph builder: ids, names, inference on construction, and clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from rlx.errors import GraphError, ShapeError
from rlx.ir import (
    Activation,
    Binary,
    BinaryOp,
    Constant,
    DType,
    Graph,
    Input,
    MatMul,
    Shape,
    TupleGet,
    format_graph,
)


def test_builder_returns_ids_in_order_and_infers_shapes():
    g = Graph("m")
    x = g.input("x", Shape(["batch", 4]))
    w = g.param("w", Shape([4, 3]))
    y = g.matmul(x, w)
    z = g.unary(Activation.RELU, y)
    g.set_outputs([z])
    assert (x, w, y, z) == (0, 1, 2, 3)
    assert len(g) == 4 and g.outputs == [3]
    assert g.node(y).shape == Shape(["batch", 3])
    assert g.node(x).name == "x" and isinstance(g.node(x).op, Input)
    assert [n.id for n in g.nodes()] == [0, 1, 2, 3]
    assert g.find("w").id == w and g.find("nope") is None


def test_constant_from_array_takes_its_shape_and_dtype():
    g = Graph()
    c = g.constant(np.arange(6, dtype=np.int64).reshape(2, 3), name="c")
    node = g.node(c)
    assert node.shape == Shape([2, 3], DType.I64)
    np.testing.assert_array_equal(node.op.array(node.shape), np.arange(6).reshape(2, 3))


def test_constant_is_a_view_of_its_buffer():
    buf = bytearray(np.arange(4, dtype=np.float32).tobytes())
    op = Constant(memoryview(buf))
    buf[0:4] = np.float32(9).tobytes()
    assert op.array(Shape([4]))[0] == 9  # no copy was taken


def test_constant_from_bytes_needs_a_shape_that_fits():
    g = Graph()
    with pytest.raises(GraphError, match="needs a shape"):
        g.constant(b"\0" * 8)
    with pytest.raises(ShapeError, match="do not fill"):
        g.constant(b"\0" * 8, Shape([3]))


def test_duplicate_names_are_refused():
    g = Graph("m")
    g.input("x", Shape([1]))
    with pytest.raises(GraphError, match="duplicate node name 'x'"):
        g.param("x", Shape([1]))


def test_inputs_must_be_earlier_nodes():
    g = Graph()
    with pytest.raises(GraphError, match="topological order"):
        g.add_node(Binary(BinaryOp.ADD), [0, 1])


def test_arity_is_checked():
    g = Graph()
    x = g.input("x", Shape([2]))
    with pytest.raises(GraphError, match="MatMul takes 2 inputs, got 1"):
        g.add_node(MatMul(), [x])


def test_inference_errors_name_the_op_and_shapes():
    g = Graph("m")
    a = g.input("a", Shape([2, 3]))
    b = g.input("b", Shape([4, 5]))
    with pytest.raises(ShapeError, match="MatMul: inner dims differ"):
        g.matmul(a, b)
    with pytest.raises(ShapeError, match="cannot broadcast"):
        g.binary(BinaryOp.ADD, a, b)


def test_dtype_mismatch_is_a_shape_error():
    g = Graph()
    a = g.input("a", Shape([2]))
    b = g.input("b", Shape([2], DType.I64))
    with pytest.raises(ShapeError, match="share a dtype"):
        g.binary(BinaryOp.ADD, a, b)


def test_symbolic_dims_broadcast():
    g = Graph()
    a = g.input("a", Shape(["n", 1]))
    b = g.input("b", Shape([1, 5]))
    assert g.node(g.binary(BinaryOp.MUL, a, b)).shape == Shape(["n", 5])


def test_tuple_valued_nodes_are_read_through_tuple_get():
    g = Graph()
    x = g.input("x", Shape([2]))
    pair = g.add_node(Binary(BinaryOp.ADD), [x, x], shape=(Shape([2]), Shape([2])))
    with pytest.raises(ShapeError, match="use TupleGet"):
        g.unary(Activation.RELU, pair)
    first, second = g.unpack(pair)
    assert isinstance(g.node(second).op, TupleGet) and g.node(second).op.index == 1


def test_replace_ops_leaves_the_original_alone():
    g = Graph()
    c = g.constant(np.ones(3, np.float32), name="c")
    g.set_outputs([c])
    h = g.replace_ops({c: Constant(b"")})
    assert g.node(c).op.nbytes == 12 and h.node(c).op.is_stripped
    assert h.find("c").id == c and h.outputs == g.outputs


def test_printer_is_stable_and_readable():
    g = Graph("m")
    x = g.input("x", Shape([2, 3]))
    y = g.unary(Activation.GELU, x)
    g.set_outputs([y])
    assert format_graph(g) == (
        "graph 'm' {\n"
        "  %0: f32[2, 3] = Input(name='x')  # x\n"
        "  %1: f32[2, 3] = Unary(kind=gelu)(%0)\n"
        "  return %1\n"
        "}"
    )
