"""JSON round trip of every op type and of whole graphs (ops by name, attributes by field)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlx.codecs import Encoding
from rlx.errors import GraphError
from rlx.ir import (
    DType,
    Graph,
    Shape,
    format_graph,
    graph_from_json,
    graph_to_json,
    ops,
    verify,
)
from rlx.ir.ops.base import OPS
from rlx.ir.serialize import graph_from_dict, graph_to_dict, op_from_json, op_to_json


def _branch(name: str, kind) -> Graph:
    g = Graph(name)
    x = g.input("x", Shape([2]))
    g.set_outputs([g.unary(kind, x)])
    return g


def _loop_body() -> Graph:
    g = Graph("body")
    g.input("i", Shape([], DType.I64))
    cond = g.input("cond", Shape([], DType.BOOL))
    acc = g.input("acc", Shape([2]))
    g.set_outputs([cond, g.binary(ops.BinaryOp.ADD, acc, acc)])
    return g


# One instance per op type, with non-default values wherever an op has attributes.
SAMPLES: dict[str, ops.Op] = {op.__class__.__name__: op for op in [
    ops.Input("x"), ops.Param("w"), ops.Fail("this branch is for 16 kHz input"), ops.TupleGet(1),
    ops.Identity(), ops.Not(), ops.Where(),
    ops.Unary(ops.Activation.HARD_SIGMOID, alpha=0.25, beta=0.75),
    ops.Binary(ops.BinaryOp.FMOD), ops.Compare(ops.CompareOp.LE),
    ops.Logical(ops.LogicalOp.XOR), ops.Cast(DType.BF16), ops.Clamp(min=-1.5, max=None),
    ops.MatMul(), ops.DequantMatMul(Encoding.GGUF_TQ2_0, n=64),
    ops.DecodeWeight(Encoding.GGUF_Q8_0, (8, 3, 3, 3), rows=3, perm=(1, 0, 2, 3)),
    ops.DequantGather(Encoding.F16, vocab=100, dim=24),
    ops.Einsum("bij,bjk->bik"), ops.DFT(axis=-2, length=16, inverse=True, onesided=True),
    ops.Conv(strides=(2, 1), pads=(1, 0, 1, 0), dilations=(1, 2), groups=4),
    ops.ConvTranspose(strides=(2,), pads=(1, 1), dilations=(1,), groups=2, output_padding=(1,)),
    ops.Pool(ops.PoolKind.AVG, kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1),
             dilations=(1, 1), ceil_mode=True, count_include_pad=True),
    ops.GlobalPool(ops.PoolKind.MAX), ops.Softmax(axis=1), ops.LogSoftmax(axis=0),
    ops.LayerNorm(axis=-2, epsilon=1e-6), ops.BatchNormInference(epsilon=1e-3),
    ops.InstanceNorm(epsilon=1e-4), ops.PRelu(),
    ops.Resize(sizes=(1, 3, 8, 8), scales=(1.0, 1.0, 2.0, 2.0), roi=None,
               mode=ops.ResizeMode.CUBIC, coordinate_mode=ops.CoordinateMode.ALIGN_CORNERS,
               nearest_mode=ops.NearestMode.CEIL, cubic_coeff_a=-0.5, exclude_outside=True,
               extrapolation_value=1.0),
    ops.Reduce(ops.ReduceOp.LOG_SUM_EXP, axes=(0, -1), keepdims=False),
    ops.ArgMax(axis=-1, keepdims=False, select_last_index=True), ops.ArgMin(axis=1),
    ops.CumSum(axis=1, exclusive=True, reverse=True),
    ops.TopK(k=3, axis=0, largest=False, sorted=False),
    ops.Reshape((0, -1), allowzero=True), ops.Transpose((1, 0, 2)), ops.Concat(-1),
    ops.Slice(starts=(1,), ends=(-1,), axes=(0,), steps=(2,)), ops.Gather(axis=1),
    ops.GatherElements(axis=-1), ops.GatherND(batch_dims=1),
    ops.ScatterND(ops.ScatterReduction.ADD),
    ops.ScatterElements(axis=1, reduction=ops.ScatterReduction.MAX), ops.Expand((2, 3)),
    ops.Pad(ops.PadMode.REFLECT, pads=(1, 2, 1, 2), value=0.5), ops.Tile((2, 1)),
    ops.Split(axis=1, sizes=(2, 3)), ops.Squeeze((0,)), ops.Unsqueeze((0, 3)),
    ops.Flatten(axis=2), ops.ShapeOf(start=1, end=-1), ops.Size(), ops.Range(),
    ops.Fill(2.5, DType.F16, shape=(3, 4)), ops.OneHot(axis=0),
    ops.DepthToSpace(2, ops.DepthToSpaceMode.CRD), ops.SpaceToDepth(3),
    ops.Trilu(upper=False, k=-1), ops.NonZero(), ops.Compress(axis=0),
    ops.LSTM(hidden_size=8, direction=ops.RnnDirection.BIDIRECTIONAL,
             activations=("Sigmoid", "Tanh", "Tanh") * 2, activation_alpha=(0.5,),
             activation_beta=(0.25,), clip=3.0, layout=1, present=("B", "initial_h"),
             input_forget=True),
    ops.QuantizedLSTM(hidden_size=4, present=("B", "W_scale", "W_zero_point", "R_scale",
                                              "R_zero_point")),
    ops.GRU(hidden_size=4, direction=ops.RnnDirection.REVERSE, linear_before_reset=True,
            present=("B",)),
    ops.RNN(hidden_size=4, activations=("Relu",), clip=None),
    ops.QuantizeLinear(axis=0, block_size=32), ops.DequantizeLinear(axis=1),
    ops.DynamicQuantizeLinear(), ops.MatMulInteger(), ops.QLinearMatMul(),
    ops.ConvInteger(strides=(2, 2), groups=4, same=ops.SamePad.UPPER),
    ops.QLinearConv(pads=(1, 1, 0, 0), dilations=(1, 2)),
    ops.If(_branch("then", ops.Activation.RELU), _branch("else", ops.Activation.NEG)),
    ops.Loop(_loop_body(), n_carried=1),
    ops.Composite("com.microsoft", "QLinearAveragePool",
                  (("alpha", 0.1), ("kernel_shape", (3, 3)), ("auto_pad", "NOTSET")), (0, 2),
                  _branch("body", ops.Activation.RELU)),
    ops.Scan(_branch("scan_body", ops.Activation.EXP), n_state=0, scan_input_axes=(0,),
             scan_input_directions=(1,), scan_output_axes=(0,), scan_output_directions=(0,)),
]}


def test_every_op_type_has_a_sample():
    assert set(OPS) - {"Constant"} == set(SAMPLES), "add a sample for each new op"


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_op_round_trips_through_json(name):
    op = SAMPLES[name]
    text = json.dumps(op_to_json(op))  # must be plain JSON
    back = op_from_json(json.loads(text), Shape([1]), lambda value, shape: b"")
    assert type(back) is type(op)
    if op.subgraphs():
        assert [format_graph(g) for g in back.subgraphs()] == \
            [format_graph(g) for g in op.subgraphs()]
    else:
        assert back == op


def test_whole_graph_round_trip_keeps_text_and_bytes():
    g = Graph("m")
    x = g.input("x", Shape(["batch", 4]))
    w = g.constant(np.arange(12, dtype=np.float32).reshape(4, 3), name="w")
    ids = g.constant(np.array([2, 0], np.int64))
    y = g.add_node(ops.Gather(axis=1), [g.matmul(x, w), ids])
    g.set_outputs([y])
    back = graph_from_json(graph_to_json(g))
    verify(back)
    assert format_graph(back) == format_graph(g)
    assert bytes(back.find("w").op.data) == bytes(g.find("w").op.data)


def test_a_consuming_read_empties_the_node_list_and_builds_the_same_graph():
    """Readers of a parsed header pass consume=True: each node's JSON is freed as its node
    is built (the load's resident peak: tests/engines/test_load_memory.py)."""
    g = Graph("m")
    x = g.input("x", Shape(["batch", 4]))
    w = g.constant(np.eye(4, 3, dtype=np.float32))
    g.set_outputs([g.unary(ops.Activation.RELU, g.matmul(x, w))])
    body = json.loads(json.dumps(graph_to_dict(g)))
    kept = graph_from_dict(body)
    assert None not in body["nodes"] and format_graph(kept) == format_graph(g)
    consumed = graph_from_dict(body, consume=True)
    assert body["nodes"] == [None] * len(g) and format_graph(consumed) == format_graph(g)


@pytest.mark.parametrize("entry, message", [
    ({"op": "Frobnicate"}, "unknown op 'Frobnicate'"),
    ({"op": "Softmax", "attrs": {"axis": "one"}}, "Softmax.axis: expected int"),
    ({"op": "Softmax", "attrs": {"axes": 1}}, "unknown attribute"),
    ({"op": "Binary", "attrs": {"op": "frobnicate"}}, "unknown BinaryOp"),
    ({"op": "Transpose", "attrs": {"perm": "012"}}, "must be a list"),
])
def test_bad_op_json_is_a_graph_error(entry, message):
    with pytest.raises(GraphError, match=message):
        op_from_json(entry, Shape([1]), lambda value, shape: b"")


def test_bad_graph_json_is_a_graph_error():
    with pytest.raises(GraphError, match="not valid JSON"):
        graph_from_json("{")
    with pytest.raises(GraphError, match="version 9"):
        graph_from_json('{"format": "rlx-graph", "version": 9, "graph": {}}')


def test_a_read_graph_shares_equal_ops_and_shapes_but_keeps_signed_zeros_apart():
    """Nodes that spell one op (or one shape) alike share one object; ops are immutable
    values, so only memory changes. The key is the attributes' JSON text: -0.0 equals 0.0
    in Python but is another value, so a node with it keeps its own op."""
    g = Graph("shared")
    x = g.input("x", Shape(["batch", 4]))
    scale = g.constant(np.ones(4, np.float32))
    bias = g.constant(np.zeros(4, np.float32))
    norms = [g.add_node(ops.LayerNorm(axis=-1, epsilon=eps), [x, scale, bias])
             for eps in (1e-5, 1e-5, -0.0, 0.0)]
    g.set_outputs(norms)
    back = graph_from_dict(json.loads(json.dumps(graph_to_dict(g))))
    first, again, negative, positive = (back.node(n) for n in norms)
    assert first.op is again.op and first.shape is again.shape
    assert negative.op is not positive.op
    assert str(negative.op.epsilon) == "-0.0" and str(positive.op.epsilon) == "0.0"
    assert back.node(scale).op is not back.node(bias).op  # constants stay per node
    assert [back.node(n).op for n in norms] == [g.node(n).op for n in norms]


def _relus(n: int, spelled: list) -> dict:
    """The JSON of `n` ReLUs in a row over x, whose node i declares `spelled[i % len]`."""
    g = Graph("relus")
    h = g.input("x", Shape([1, 8]))
    for _ in range(n):
        h = g.unary(ops.Activation.RELU, h)
    g.set_outputs([h])
    body = graph_to_dict(g)
    for i, entry in enumerate(body["nodes"][1:]):
        entry["shape"] = {"dims": spelled[i % len(spelled)], "dtype": "f32"}
    return json.loads(json.dumps(body))


def test_each_spelling_of_a_shape_is_read_once(monkeypatch):
    """Seven nodes (the input and six ReLUs) that spell one shape alike read it once, and
    share the shape read."""
    from rlx.ir import serialize

    reads: list[object] = []
    read = serialize.shape_from_json
    monkeypatch.setattr(serialize, "shape_from_json", lambda value: reads.append(value)
                        or read(value))
    back = graph_from_dict(_relus(6, [[1, 8]]))
    assert len(reads) == 1
    assert len({id(node.shape) for node in back.nodes()}) == 1


@pytest.mark.parametrize("dim", [True, 1.0])
def test_a_dim_that_only_equals_an_int_is_still_refused(dim):
    """`True` and `1.0` equal 1 as keys do, but are no dim: a shape spelled with one after
    the same shape spelled with ints is judged, not looked up."""
    with pytest.raises(GraphError, match="shape dim must be an int or a name"):
        graph_from_dict(_relus(2, [[1, 8], [dim, 8]]))
