"""import_onnx: an output dim inference cannot determine takes the one the file declares;
inferred dims win, and an output the graph reads further keeps its inferred shape."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from rlx.onnx import import_onnx


def _model(outputs: list[tuple[str, list]]) -> bytes:
    """x [1, 'w'] -> NonZero (a count no inference knows) -> Transpose -> t; u = t + 1."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("Transpose", ["nz"], ["t"]),
             helper.make_node("Add", ["t", "one"], ["u"])]
    graph = helper.make_graph(
        nodes, "declared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "w"])],
        [helper.make_tensor_value_info(n, TensorProto.INT64, d) for n, d in outputs],
        initializer=[numpy_helper.from_array(np.array(1, np.int64), "one")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _dims(graph, name):
    return graph.find(name).tensor_shape.dims


def test_an_unknown_output_dim_takes_the_declared_one():
    graph, _ = import_onnx(_model([("u", ["nonzeros", 7])]))
    assert _dims(graph, "u") == ("nonzeros", 2)  # inference's 2 stays, the ? is named


def test_an_output_read_inside_the_graph_keeps_its_inferred_shape():
    graph, _ = import_onnx(_model([("t", ["nonzeros", 2]), ("u", ["nonzeros", 2])]))
    assert _dims(graph, "t") == ("?", 2) and _dims(graph, "u") == ("nonzeros", 2)
