"""The bake's early encoding step (`encode_ternary_matmuls`): MatMuls over exactly-ternary
f32 weights become DequantMatMul(gguf_tq2_0), through the weight-encoding stage's plan."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf.quants import quantize

from rlx.codecs import Encoding
from rlx.ir import BinaryOp, DequantMatMul, DType, Graph, MatMul, Shape
from rlx.ir.ops.sources import Constant
from rlx.passes import (
    SkipReason,
    encode_ternary_matmuls,
    matmul_skip_reason,
    plan_ternary_matmuls,
)
from tests.passes.common import checked, ops_of, random_feeds, run

TQ2 = Encoding.GGUF_TQ2_0


def pack_ternary(graph: Graph) -> tuple[Graph, int]:
    """The step as a plain pass: (graph, MatMuls rewritten)."""
    new, plan = encode_ternary_matmuls(graph)
    return new, plan.count


def _ternary(k: int, n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(-1, 2, (k, n)).astype(np.float32)


def _matmul(weight, x_dims=None, name="w") -> Graph:
    g = Graph("pack")
    x = g.input("x", Shape(x_dims or (3, weight.shape[0])))
    w = g.constant(weight, name=name)
    g.set_outputs([g.add_node(MatMul(), (x, w), name="y")])
    return g


def _assert_matches_dense(before: Graph, after: Graph) -> None:
    """Exact ternary weights: the same products, up to BLAS summation order."""
    feeds = random_feeds(before)
    (want,), (got,) = run(before, feeds), run(after, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


def test_seed_pattern_k256_n1_packs_losslessly():
    w = np.resize(np.array([-1, 0, 1], np.float32), 256).reshape(256, 1)
    g = _matmul(w)
    new, count = checked(pack_ternary, g)
    assert count == 1 and ops_of(new) == ["Input", "Constant", "DequantMatMul"]
    mm = new.find("y")
    assert mm.op == DequantMatMul(TQ2, 1) and mm.shape == g.find("y").shape
    packed = new.find("w")
    assert packed.shape == Shape([66], DType.U8) and mm.inputs[1] == packed.id
    # BT layout, byte-identical to the gguf package's quantiser on w.T
    want = quantize(np.ascontiguousarray(w.T), gguf.GGMLQuantizationType.TQ2_0).reshape(-1)
    np.testing.assert_array_equal(packed.op.data, want)
    _assert_matches_dense(g, new)


def test_batched_x_and_whole_block_k():
    w = _ternary(256, 8)
    g = _matmul(w, x_dims=(2, 5, 256))
    new, count = checked(pack_ternary, g)
    assert count == 1 and new.find("y").shape == Shape([2, 5, 8])
    _assert_matches_dense(g, new)


def test_odd_k_is_refused_not_misaligned():
    """768 values are whole blocks, but rows of K = 96 are not: blocks would straddle rows
    (the reference packs them anyway); the bake stores them as padded rows instead."""
    g = _matmul(_ternary(96, 8), x_dims=(2, 5, 96))
    _, count = checked(pack_ternary, g)
    assert count == 0
    assert plan_ternary_matmuls(g).skipped == {f"gguf_tq2_0: {SkipReason.BLOCK}": 1}


def test_mul_by_param_is_not_confused():
    g = Graph("mul")
    x = g.input("x", Shape([256]))
    g.set_outputs([g.binary(BinaryOp.MUL, x, g.param("w", Shape([256])))])
    new, count = checked(pack_ternary, g)
    assert new is g and count == 0


def test_weight_read_elsewhere_keeps_its_name_and_packed_copy_gets_a_suffix():
    w = _ternary(256, 2)
    g = _matmul(w)
    g.set_outputs([*g.outputs, g.binary(BinaryOp.ADD, g.find("w").id, g.find("w").id)])
    new, _ = checked(pack_ternary, g)
    assert isinstance(new.find("w").op, Constant) and new.find("w").shape.dtype is DType.F32
    packed = new.find("w.gguf_tq2_0")
    assert packed.shape.dtype is DType.U8 and new.find("y").inputs[1] == packed.id
    feeds = random_feeds(g)
    np.testing.assert_array_equal(run(g, feeds)[1], run(new, feeds)[1])


def test_shared_weight_is_packed_once_and_unnamed_stays_unnamed():
    g = Graph("shared")
    x = g.input("x", Shape([4, 256]))
    w = g.constant(_ternary(256, 4))
    a = g.matmul(x, w)
    g.set_outputs([g.matmul(g.binary(BinaryOp.ADD, x, x), w), a])
    new, count = checked(pack_ternary, g)
    assert count == 2
    packed = [n for n in new.nodes() if isinstance(n.op, Constant)]
    assert len(packed) == 1 and packed[0].name is None and packed[0].shape.dtype is DType.U8
    feeds = random_feeds(g)
    for want, got in zip(run(g, feeds), run(new, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


def _candidate_graph() -> Graph:
    """One MatMul per reason a weight is left dense, in SkipReason order, then a good one."""
    g = Graph("candidates")
    x = g.input("x", Shape([2, 256]))
    xh = g.input("xh", Shape([2, 256], DType.F16))
    xb = g.input("xb", Shape([3, 2, 256]))
    outs = [
        g.matmul(x, g.param("p", Shape([256, 1]))),
        g.matmul(x, g.add_node(Constant(b""), (), Shape([256, 1]), name="stripped")),
        g.matmul(xh, g.constant(np.ones((256, 1), np.float16), name="half")),
        g.matmul(xb, g.constant(np.ones((3, 256, 1), np.float32), name="batched")),
        g.matmul(x, g.constant(np.ones(256, np.float32), name="vector")),
        g.matmul(g.input("x100", Shape([2, 100])),
                 g.constant(np.ones((100, 1), np.float32), name="odd")),
        g.matmul(x, g.constant(np.full((256, 1), 0.5, np.float32), name="half_values")),
        g.matmul(x, g.constant(_ternary(256, 1), name="good")),
    ]
    g.set_outputs(outs)
    return g


def test_every_dense_weight_has_a_reason_and_the_plan_counts_them():
    g = _candidate_graph()
    reasons = [matmul_skip_reason(g.node(n.inputs[1]), TQ2.block_size, ternary=True)
               for n in g.nodes() if isinstance(n.op, MatMul)]
    want = [SkipReason.NOT_CONSTANT, SkipReason.STRIPPED, SkipReason.NOT_F32, SkipReason.RANK,
            SkipReason.RANK, SkipReason.BLOCK, SkipReason.NOT_TERNARY]
    assert reasons == [*want, None]
    assert str(SkipReason.RANK).startswith("weight rank is not 2")
    plan = plan_ternary_matmuls(g)
    assert plan.skipped == {f"gguf_tq2_0: {r}": want.count(r) for r in want}
    assert [c.name for c in plan.choices] == ["good"] and plan.count == 1


def test_only_eligible_weights_are_packed(caplog):
    g = _candidate_graph()
    with caplog.at_level("DEBUG", logger="rlx.passes.weight_encoding"):
        new, count = checked(pack_ternary, g)
    assert count == 1 and ops_of(new).count("DequantMatMul") == 1
    assert new.find("good").shape.dtype is DType.U8
    assert "stays dense: gguf_tq2_0: weight is not exactly ternary" in caplog.text


@pytest.mark.parametrize("values", [np.zeros((256, 1)), np.ones((256, 2))])
def test_all_zero_and_all_one_blocks_are_ternary(values):
    new, count = checked(pack_ternary, _matmul(values.astype(np.float32)))
    assert count == 1
