"""unfold_weights: one row per weight constant of MatMul/DequantMatMul/Conv/ConvTranspose."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rlx.codecs import Encoding
from rlx.ir import BinaryOp, Conv, ConvTranspose, DType, Graph, Shape
from rlx.passes import WeightRow, apply_weight_encodings, matmul_choice, unfold_weights


def _packed(graph: Graph, encoding: Encoding = Encoding.GGUF_TQ2_0) -> tuple[Graph, int]:
    """`graph` with its MatMul weight `w` stored for DequantMatMul in `encoding`."""
    return apply_weight_encodings(graph, [matmul_choice(graph.find("w"), encoding)])


def _ternary(k: int, n: int) -> np.ndarray:
    return np.resize(np.array([1, 0, -1], np.float32), k * n).reshape(k, n)


def test_dense_weights_of_every_consumer_once_in_graph_order():
    g = Graph("unfold")
    img = g.input("img", Shape([1, 2, 5, 5]))
    conv_w = g.constant(np.ones((4, 2, 3, 3), np.float32), name="conv_w")
    y = g.add_node(Conv(), (img, conv_w))
    up_w = g.constant(np.ones((4, 2, 2, 2), np.float32))  # unnamed
    z = g.add_node(ConvTranspose(), (y, up_w))
    x = g.input("x", Shape([3, 8], DType.F16))
    w = g.constant(np.ones((8, 2), np.float16), name="w")
    a = g.matmul(x, w)
    b = g.matmul(g.binary(BinaryOp.ADD, x, x), w)  # shared weight: one row
    c = g.matmul(x, g.param("p", Shape([8, 2], DType.F16)))  # not a constant: no row
    g.set_outputs([z, a, b, c])
    rows = unfold_weights(g)
    assert rows == [
        WeightRow("conv_w", conv_w, (4, 2, 3, 3), DType.F32, "f32", "row_major", True,
                  "unfolded f32"),
        WeightRow(None, up_w, (4, 2, 2, 2), DType.F32, "f32", "row_major", True,
                  "unfolded f32"),
        WeightRow("w", w, (8, 2), DType.F16, "f16", "row_major", True, "unfolded f16"),
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        rows[0].name = "other"


@pytest.mark.parametrize("k, n, encoding, aligned", [
    (256, 2, Encoding.GGUF_TQ2_0, True),
    (64, 3, Encoding.GGUF_Q8_0, True),
])
def test_packed_weights_report_their_logical_shape(k, n, encoding, aligned):
    g = Graph("packed")
    x = g.input("x", Shape(["batch", k]))
    g.set_outputs([g.matmul(x, g.constant(_ternary(k, n), name="w"))])
    packed, count = _packed(g, encoding)
    assert count == 1
    (row,) = unfold_weights(packed)
    assert row == WeightRow("w", packed.find("w").id, (k, n), DType.F32, encoding.label,
                            "bt_nk", aligned, row.note)
    assert encoding.label in row.note and f"[{n}, {k}]" in row.note


def test_symbolic_k_is_read_from_the_stream_length():
    g = Graph("sym")
    x = g.input("x", Shape([2, 256]))
    g.set_outputs([g.matmul(x, g.constant(_ternary(256, 4), name="w"))])
    packed, _ = _packed(g)
    # the same packed weight behind an x whose K is symbolic
    h = Graph("sym_k")
    xs = h.input("x", Shape([2, "k"]))
    node = packed.find("w")
    w = h.add_node(node.op, (), node.shape, name="w")
    h.set_outputs([h.add_node(packed.node(packed.outputs[0]).op, (xs, w))])
    (row,) = unfold_weights(h)
    assert row.shape == (256, 4) and row.row_aligned
