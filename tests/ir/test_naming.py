"""Nodes in the user's terms: ONNX op types, origins that survive passes and JSON, and
computing-node counts."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rlx import BakeOptions, BakeProfile, bake
from rlx.artifact import parse_rlx, write_rlx
from rlx.ir import (
    Activation,
    Binary,
    BinaryOp,
    Compare,
    CompareOp,
    DType,
    Graph,
    Reduce,
    ReduceOp,
    Shape,
    Unary,
    format_graph,
    graph_from_json,
    graph_to_json,
)
from rlx.ir.naming import computing_nodes, node_title, op_type, op_type_counts
from rlx.ir.rewrite import rewrite_nodes
from rlx.onnx import import_onnx, onnx_op_types

F32 = DType.F32


@pytest.mark.parametrize("op, name", [
    (Binary(BinaryOp.ADD), "Add"), (Binary(BinaryOp.FMOD), "Mod"),
    (Unary(Activation.ERF), "Erf"), (Unary(Activation.LEAKY_RELU), "LeakyRelu"),
    (Unary(Activation.RECIP), "Reciprocal"), (Compare(CompareOp.GE), "GreaterOrEqual"),
    (Reduce(ReduceOp.LOG_SUM_EXP, (1,)), "ReduceLogSumExp"),
    (Reduce(ReduceOp.MEAN, (1,)), "ReduceMean"),
])
def test_op_types_are_onnx_names(op, name):
    # every one of these is an op type of the ONNX operator set
    assert name in {s.name for s in onnx.defs.get_all_schemas()}
    assert op_type(op) == name


def _chain() -> Graph:
    g = Graph("chain")
    x = g.input("x", Shape((2, 3), F32))
    w = g.constant(np.ones((2, 3), np.float32), name="w")
    a = g.add_node(Binary(BinaryOp.ADD), (x, w), origin="/block/Add")
    b = g.add_node(Unary(Activation.RELU), (a,), origin="/block/Relu")
    g.set_outputs([b])
    return g


def test_computing_nodes_leave_out_inputs_and_constants():
    g = _chain()
    assert len(g) == 4 and computing_nodes(g) == 2
    assert op_type_counts(g) == {"Add": 1, "Relu": 1}


def test_origin_survives_json_and_shows_in_the_printer():
    g = _chain()
    back = graph_from_json(graph_to_json(g))
    assert [n.origin for n in back.nodes()] == [None, None, "/block/Add", "/block/Relu"]
    assert "from /block/Relu" in format_graph(back)


def test_new_nodes_a_rule_emits_take_the_origin_of_the_node_they_stand_for():
    """A rule that replaces Relu by Max(x, 0) emits a constant and a Max: both are the
    Relu the user knows."""
    def relu_as_max(rw, node):
        if not isinstance(node.op, Unary):
            return False
        zero = rw.emit_constant(np.zeros((), np.float32))
        rw.substitute(node, Binary(BinaryOp.MAX), (rw.id(node.inputs[0]), zero))
        return True

    new, count = rewrite_nodes(_chain(), relu_as_max)
    assert count == 1
    assert [(op_type(n.op), n.origin) for n in new.nodes()][2:] == [
        ("Add", "/block/Add"), ("Constant", "/block/Relu"), ("Max", "/block/Relu")]
    assert node_title(new.node(4)) == "/block/Relu"


def _gemm_model() -> onnx.ModelProto:
    """Gemm (which the importer splits into MatMul + Add) and an unnamed Relu."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="/fc/Gemm"),
             helper.make_node("Relu", ["y"], ["out"]),
             helper.make_node("Constant", [], ["unused"], value_float=1.0, name="c")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 3])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_onnx_names_survive_import_bake_and_the_file(tmp_path):
    model = _gemm_model()
    assert onnx_op_types(model) == {"Gemm": 1, "Relu": 1}  # the Constant node is not counted
    graph, bindings = import_onnx(model)
    origins = {n.origin for n in graph.nodes() if n.origin}
    assert origins == {"/fc/Gemm", "out"}  # the unnamed Relu goes by its output
    for profile in (BakeProfile.EXACT, BakeProfile.SIZE):
        baked, report = bake(graph, bindings, BakeOptions.from_profile(profile))
        write_rlx(tmp_path / "m.rlx", baked)
        back = parse_rlx((tmp_path / "m.rlx").read_bytes())
        computing = [n for n in back.graph.nodes() if op_type(n.op) not in ("Constant",)
                     and n.origin]
        assert {n.origin for n in computing} == {"/fc/Gemm", "out"}
        assert report.op_types_before == {"Add": 1, "MatMul": 1, "Relu": 1}
        assert sum(report.op_types_after.values()) == computing_nodes(back.graph)


def test_dims_fix_symbolic_dims_by_name():
    graph, _ = import_onnx(_gemm_model(), dims={"batch": 2})
    assert graph.inputs()[0].shape.dims == (2, 4)
    from rlx.errors import ModelImportError
    with pytest.raises(ModelImportError, match="names no symbolic dim.*bacth.*declared: batch"):
        import_onnx(_gemm_model(), dims={"bacth": 2})
