"""pack_quant: MatMuls over finite f32 weights become DequantMatMul(gguf_q8_0), lossy."""

from __future__ import annotations

import gguf
import numpy as np
from gguf.quants import quantize

from rlx.ir import DequantMatMul, DType, Graph, MatMul, QuantScheme, Shape
from rlx.passes import SkipReason, pack_quant, pack_ternary, packing_candidates
from tests.passes.common import checked, ops_of, random_feeds, run

Q8 = QuantScheme.GGUF_Q8_0


def _matmul(weight: np.ndarray, x_dims=(5, 64)) -> Graph:
    g = Graph("quant")
    x = g.input("x", Shape(x_dims))
    w = g.constant(weight, name="w")
    g.set_outputs([g.add_node(MatMul(), (x, w), name="y")])
    return g


def test_q8_0_output_within_the_quantisation_error():
    w = np.random.default_rng(1).standard_normal((64, 24)).astype(np.float32)
    g = _matmul(w)
    new, count = checked(pack_quant, g)
    assert count == 1 and ops_of(new) == ["Input", "Constant", "DequantMatMul"]
    assert new.find("y").op == DequantMatMul(Q8, 24)
    packed = new.find("w")
    want = quantize(np.ascontiguousarray(w.T), gguf.GGMLQuantizationType.Q8_0).reshape(-1)
    np.testing.assert_array_equal(packed.op.data, want)  # BT [N, K] stream, gguf's bytes
    feeds = random_feeds(g)
    (got,) = run(new, feeds)
    x = feeds["x"].astype(np.float64)
    exact = x @ w.astype(np.float64)
    # per weight: half a code step (amax/127/2) plus the f16 rounding of the scale
    amax = np.abs(w.T.reshape(-1, 32)).max(axis=1, keepdims=True)
    step = np.broadcast_to(amax / 127, (len(amax), 32)).reshape(24, 64).T
    bound = np.abs(x) @ (step * 0.5 + np.abs(w) * 2.0**-11) + 1e-5
    assert (np.abs(got - exact) <= bound).all()
    assert np.abs(got - exact).max() > 0  # it really is lossy


def test_non_finite_and_oversized_weights_stay_dense(caplog):
    w = np.ones((64, 1), np.float32)
    w[3] = np.inf
    g = _matmul(w)
    assert packing_candidates(g, Q8.block_size, require_ternary=False) == [
        (g.find("y").id, SkipReason.NOT_FINITE)
    ]
    new, count = checked(pack_quant, g)
    assert new is g and count == 0
    with caplog.at_level("WARNING", logger="rlx.passes.packing"):
        new, count = checked(pack_quant, _matmul(np.full((64, 1), 1e7, np.float32)))
    assert count == 0 and "overflows f16" in caplog.text


def test_ternary_then_quant_never_packs_twice():
    w = np.resize(np.array([-1, 0, 1], np.float32), 512).reshape(256, 2)
    g = _matmul(w, x_dims=(3, 256))
    ternary, n_ternary = checked(pack_ternary, g)
    quant, n_quant = checked(pack_quant, ternary)
    assert (n_ternary, n_quant) == (1, 0) and quant is ternary
    only_quant, n = checked(pack_quant, g)  # ternary off: Q8_0 takes the ternary weight
    assert n == 1 and only_quant.find("y").op.scheme is Q8
    feeds = random_feeds(g)
    # codes are exactly +-127 and 0; only the f16 rounding of the 1/127 scale remains
    np.testing.assert_allclose(run(only_quant, feeds)[0], run(g, feeds)[0], rtol=2.0**-11 * 2)


def test_packed_constant_is_u8_with_the_stream_length():
    new, _ = checked(pack_quant, _matmul(np.ones((64, 3), np.float32)))
    assert new.find("w").shape == Shape([64 * 3 // 32 * 34], DType.U8)
