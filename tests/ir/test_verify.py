"""`verify` accepts good graphs and rejects broken ones with a message naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from rlx.errors import GraphError, ShapeError
from rlx.ir import Activation, Binary, BinaryOp, Graph, Node, Shape, Unary, verify


def _good() -> Graph:
    g = Graph("g")
    x = g.input("x", Shape([2, 3]))
    w = g.constant(np.ones((3, 4), np.float32), name="w")
    g.set_outputs([g.unary(Activation.RELU, g.matmul(x, w))])
    return g


def _tamper(graph: Graph, node_id: int, **changes) -> Graph:
    """Swap one node for an edited copy, bypassing the builder's checks."""
    bad = graph.replace_ops({})
    old = bad._nodes[node_id]
    fields = dict(id=old.id, op=old.op, inputs=old.inputs, shape=old.shape, name=old.name)
    fields.update(changes)
    bad._nodes[node_id] = Node(**fields)
    return bad


def test_a_well_formed_graph_passes():
    verify(_good())


@pytest.mark.parametrize("changes, message", [
    (dict(inputs=(3,)), "not an earlier node"),
    (dict(shape=Shape([2, 5])), "declared f32\\[2, 5\\], inference gives f32\\[2, 4\\]"),
    (dict(op=Binary(BinaryOp.ADD)), "1 inputs, op takes 2..2"),
    (dict(name="x"), "duplicate name 'x'"),
    (dict(id=7), "id 7 at position 3"),
])
def test_broken_nodes_are_named(changes, message):
    with pytest.raises(GraphError, match=message):
        verify(_tamper(_good(), 3, **changes))


def test_unknown_op_types_are_refused():
    class Rogue(Unary):
        pass

    from rlx.ir.ops.base import OPS
    OPS.pop("Rogue")  # a class outside the registry, as a foreign op would be
    with pytest.raises(GraphError, match="unknown op Rogue"):
        verify(_tamper(_good(), 3, op=Rogue(Activation.RELU)))


def test_constant_payload_must_fit_its_shape():
    g = _good()
    with pytest.raises(ShapeError, match="payload 48 bytes"):
        verify(_tamper(g, 1, shape=Shape([3, 5])))


def test_outputs_must_exist():
    g = _good()
    g.outputs = [99]
    with pytest.raises(GraphError, match="output %99 does not exist"):
        verify(g)


def _layers(n: int) -> Graph:
    """`n` ReLUs in a row over one shape, read back from JSON as a file's graph is: one op
    object and one shape object for all of them."""
    from rlx.ir.serialize import graph_from_dict, graph_to_dict

    g = Graph("layers")
    h = g.input("x", Shape(["batch", 8]))
    for _ in range(n):
        h = g.unary(Activation.RELU, h)
    g.set_outputs([h])
    return graph_from_dict(graph_to_dict(g))


def test_repeated_layers_infer_once(monkeypatch):
    """Nodes with one op object over inputs of one shape object infer their shape once,
    and each node's declared shape is still held against it."""
    calls: list[int] = []
    infer = Graph.infer
    monkeypatch.setattr(Graph, "infer", lambda self, op, inputs: calls.append(1) or infer(
        self, op, inputs))
    graph = _layers(6)
    calls.clear()  # the builder's own
    verify(graph)
    assert len(calls) == 1
    bad = _tamper(_layers(6), 5, shape=Shape(["batch", 9]))
    with pytest.raises(ShapeError, match="%5 .*declared f32\\[batch, 9\\], inference gives "
                                         "f32\\[batch, 8\\]"):
        verify(bad)
