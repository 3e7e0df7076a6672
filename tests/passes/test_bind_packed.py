"""Weights that arrive packed (GGUF Q8_0 / TQ2_0 from a .gguf file) bind to DequantMatMul."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from rlx import bake_bundle
from rlx.errors import BindingError
from rlx.ir import Activation, DequantMatMul, Graph, Shape, verify
from rlx.passes import bind_packed
from rlx.runtime import Session
from rlx.weights import LoadedWeight, WeightBundle

K, N = 64, 32


def graph() -> Graph:
    g = Graph("packed")
    x = g.input("x", Shape([3, K]))
    w = g.param("w", Shape([K, N]))
    g.set_outputs([g.matmul(x, w)])
    return g


def packed_row(w: np.ndarray, kind=gguf.GGMLQuantizationType.Q8_0, encoding="gguf_q8_0"):
    """What a GGUF file holds for a [K, N] matmul weight: N rows of K values, quantised."""
    data = gguf.quants.quantize(np.ascontiguousarray(w.T), kind).reshape(-1)
    return LoadedWeight("w", (N, K), encoding, data)


def test_packed_rows_turn_matmuls_into_dequant_matmuls():
    w = np.random.default_rng(0).standard_normal((K, N)).astype(np.float32)
    row = packed_row(w)
    out, count = bind_packed(graph(), [row])
    verify(out)
    assert count == 1 and isinstance(out.node(out.outputs[0]).op, DequantMatMul)
    x = np.random.default_rng(1).standard_normal((3, K)).astype(np.float32)
    w_decoded = gguf.quants.dequantize(row.data.reshape(N, -1),
                                       gguf.GGMLQuantizationType.Q8_0).reshape(N, K).T
    (y,) = Session().compile(out).run({"x": x})
    np.testing.assert_allclose(y, x.astype(np.float64) @ w_decoded, rtol=1e-5, atol=1e-5)


def test_bake_bundle_keeps_packed_bytes_in_the_table():
    w = np.sign(np.random.default_rng(2).standard_normal((K * 4, N))).astype(np.float32)
    g = Graph("tq")
    x = g.input("x", Shape([1, K * 4]))
    g.set_outputs([g.matmul(x, g.param("w", Shape([K * 4, N])))])
    data = gguf.quants.quantize(np.ascontiguousarray(w.T), gguf.GGMLQuantizationType.TQ2_0)
    row = LoadedWeight("w", (N, K * 4), "gguf_tq2_0", data.reshape(-1))
    file, report = bake_bundle(g, WeightBundle(packed=[row]))
    assert report.params_baked == 1
    table = file.weight("w")
    assert table.encoding == "gguf_tq2_0" and table.shape == (K * 4, N)
    assert bytes(table.data) == bytes(row.data)


@pytest.mark.parametrize("row, message", [
    (LoadedWeight("w", (N, K), "gguf_q4_k", np.zeros(10, np.uint8)), "only gguf_q8_0"),
    (LoadedWeight("w", (K, N), "gguf_q8_0", np.zeros(K * N // 32 * 34, np.uint8)), "layout"),
    (LoadedWeight("w", (N, K), "gguf_q8_0", np.zeros(7, np.uint8)), "do not hold"),
])
def test_rows_that_do_not_fit_are_refused(row, message):
    with pytest.raises(BindingError, match=message):
        bind_packed(graph(), [row])


def test_a_packed_weight_read_by_another_op_is_refused():
    g = graph()
    w = g.find("w").id
    g.set_outputs([g.outputs[0], g.unary(Activation.RELU, w)])
    with pytest.raises(BindingError, match="cannot take packed bytes"):
        bind_packed(g, [packed_row(np.ones((K, N), np.float32))])
