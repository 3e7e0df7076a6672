"""The bake pipeline end to end: the reference's tests plus semantics and size checks."""

from __future__ import annotations

import numpy as np
import pytest

from rlx import BakeOptions, BakeProfile, MemoryMode, bake
from rlx.errors import BindingError
from rlx.ir import BinaryOp, Constant, DequantMatMul, Expand, Graph, Param, Shape, verify
from rlx.runtime import Session
from tests.baking.models import (
    cosine,
    matmul_graph,
    mlp_forward,
    mlp_graph,
    mlp_weights,
    mul_graph,
    tied_graph,
)

PROFILES = list(BakeProfile)
MODES = list(MemoryMode)


def run(file, feeds):
    return Session().compile(file.into_runtime_graph()).run(feeds)


def opts(profile, **changes):
    return BakeOptions.from_profile(profile).replace(**changes)


def test_bake_includes_weights_table():
    file, report = bake(mul_graph(2), {"w": np.array([1, 2], np.float32)})
    assert report.params_baked >= 1 and report.params_remaining == []
    assert file.weights and file.weight("w") is not None
    assert not any(isinstance(n.op, Param) for n in file.graph.nodes())


def test_bake_mul_param_includes_weights():
    w = np.array([1, 2, 3, 4], np.float32)
    file, report = bake(mul_graph(), {"w": w})
    assert report.params_baked == 1 and report.params_remaining == []
    assert [r.name for r in file.weights] == ["w"]
    row = file.weights[0]
    assert row.encoding == "f32" and row.nbytes == 16
    assert bytes(row.data) == w.tobytes()
    assert file.meta.name == "mul_bake" and file.meta.weight_count == 1
    x = np.array([1, 1, 2, 2], np.float32)
    np.testing.assert_array_equal(run(file, {"x": x})[0], x * w)


def test_bake_skips_zero_matmul():
    file, report = bake(matmul_graph(4, 3), {"w": np.zeros((4, 3), np.float32)})
    assert report.optimize.skipped_zero_matmuls == 1
    assert isinstance(file.graph.node(file.graph.outputs[0]).op, Constant)
    assert file.weight("w") is None  # the zero weight is gone from the table too
    out = run(file, {"x": np.ones((2, 4), np.float32)})[0]
    np.testing.assert_array_equal(out, np.zeros((2, 3), np.float32))


def _ternary(k, n):
    return (np.arange(k * n) % 3 - 1).astype(np.float32).reshape(k, n)


def test_bake_packs_ternary_matmul():
    file, report = bake(matmul_graph(256, 1), {"w": _ternary(256, 1)})
    assert report.optimize.ternary_packed == 1
    assert any(isinstance(n.op, DequantMatMul) for n in file.graph.nodes())
    row = file.weight("w")
    assert row.encoding == "gguf_tq2_0" and row.shape == (256, 1) and row.layout == "bt_nk"


@pytest.mark.parametrize("profile, ternary, skip, quant", [
    (BakeProfile.MERGE, 0, 0, 0),
    (BakeProfile.FOLD, 0, 0, 0),
    (BakeProfile.EXACT, 1, 0, 0),
    (BakeProfile.SIZE, 1, 0, 0),  # ternary claims the weight first: no double pack
])
def test_bake_profiles_change_rewrites(profile, ternary, skip, quant):
    _, report = bake(matmul_graph(256, 1), {"w": _ternary(256, 1)}, opts(profile))
    o = report.optimize
    assert (o.ternary_packed, o.skipped_zero_matmuls, o.quant_packed) == (ternary, skip, quant)


def test_size_without_ternary_stores_integer_weights_exactly_instead():
    """-1/0/+1 lie on an int8 grid of steps of 1: without TQ2_0 they go q8_f32, exact,
    not Q8_0 (whose f16 scale 1/127 would decode 1 as 127 * f16(1/127))."""
    file, report = bake(matmul_graph(256, 1), {"w": _ternary(256, 1)},
                        opts(BakeProfile.SIZE, ternary=False))
    assert report.optimize.encoded == {"q8_f32": 1} and report.optimize.ternary_packed == 0
    x = np.random.default_rng(1).integers(-8, 9, (2, 256)).astype(np.float32)
    (out,) = run(file, {"x": x})
    np.testing.assert_array_equal(out, x.astype(np.float64) @ _ternary(256, 1))


@pytest.mark.parametrize("profile", [BakeProfile.MERGE, BakeProfile.FOLD, BakeProfile.EXACT])
@pytest.mark.parametrize("memory", MODES)
def test_lossless_profiles_keep_the_mlp_outputs(profile, memory):
    weights = mlp_weights()
    x = np.random.default_rng(3).standard_normal((32, 784), np.float32)
    file, _ = bake(mlp_graph(), weights, opts(profile, memory=memory))
    verify(file.graph)
    (y,) = run(file, {"x": x})
    np.testing.assert_allclose(y, mlp_forward(x, weights), rtol=1e-5, atol=1e-5)


def test_exact_equals_merge_bit_for_bit_on_ternary_weights():
    weights = mlp_weights()
    x = np.random.default_rng(4).standard_normal((32, 784), np.float32)
    merged, _ = bake(mlp_graph(), weights, opts(BakeProfile.MERGE))
    exact, report = bake(mlp_graph(), weights, opts(BakeProfile.EXACT))
    # w1 went through TQ2_0 and back exactly (K = 784: one padded-row stream, DecodeWeight)
    assert report.optimize.ternary_packed == 1
    np.testing.assert_allclose(run(exact, {"x": x})[0], run(merged, {"x": x})[0],
                               rtol=1e-6, atol=1e-6)


def test_size_profile_keeps_cosine():
    rng = np.random.default_rng(5)
    weights = {k: rng.standard_normal(v.shape).astype(np.float32) * 0.1
               for k, v in mlp_weights().items()}  # no ternary layer: everything goes Q8_0
    x = rng.standard_normal((32, 784), np.float32)
    file, report = bake(mlp_graph(), weights, opts(BakeProfile.SIZE))
    assert report.optimize.quant_packed == 2
    assert cosine(run(file, {"x": x})[0], mlp_forward(x, weights)) >= 0.999


def test_mnist_size_profile_table_is_at_most_14kb():
    file, report = bake(mlp_graph(), mlp_weights(), opts(BakeProfile.SIZE))
    raw = sum(w.nbytes for w in mlp_weights().values())
    # b1's 64 values go f16 (128 bytes), b2's 10 stay f32 (40)
    assert report.bytes_by_encoding == {"gguf_tq2_0": 12936, "gguf_q8_0": 680, "f16": 128,
                                        "f32": 40}
    assert report.weight_bytes <= 14_000 and raw / report.weight_bytes >= 14.6
    w1 = file.weight("w1")
    # K = 784 is not a multiple of 256: not a misaligned DequantMatMul, but one stored row
    # of all 50,176 values (196 whole blocks) that DecodeWeight decodes exactly
    assert w1.shape == (784, 64) and w1.layout == "padded_rows" and w1.row_aligned


def test_tied_weights_are_stored_once_and_weight_math_folds():
    w = np.random.default_rng(6).standard_normal((8, 8)).astype(np.float32)
    file, report = bake(tied_graph(), {"wa": w * 2, "wb": w}, opts(BakeProfile.FOLD))
    assert report.optimize.constants_folded >= 1
    assert report.memory.constants_deduped == 1  # wb * 2 folded to the same bytes as wa
    assert sum(isinstance(n.op, Constant) for n in file.graph.nodes()) == 1
    x = np.random.default_rng(7).standard_normal((3, 8)).astype(np.float32)
    expected = np.tanh(x.astype(np.float64) @ (w.astype(np.float64) * 4))
    np.testing.assert_allclose(run(file, {"x": x})[0], expected, rtol=1e-5, atol=1e-6)


def test_a_growing_fold_is_refused():
    g = Graph("grow")
    x = g.input("x", Shape([1024, 1024]))
    b = g.param("b", Shape([1]))
    wide = g.add_node(Expand((1024, 1024)), [b])
    g.set_outputs([g.binary(BinaryOp.ADD, x, wide)])
    file, report = bake(g, {"b": np.ones(1, np.float32)})
    assert any(isinstance(n.op, Expand) for n in file.graph.nodes())
    assert file.meta.constant_bytes + file.meta.weight_bytes < 1024


def test_compact_materialize_run_equals_duplex():
    weights = mlp_weights()
    x = np.random.default_rng(8).standard_normal((32, 784), np.float32)
    compact, _ = bake(mlp_graph(), weights, opts(BakeProfile.EXACT, memory=MemoryMode.COMPACT))
    duplex, _ = bake(mlp_graph(), weights, opts(BakeProfile.EXACT, memory=MemoryMode.DUPLEX))
    assert compact.needs_materialize()
    np.testing.assert_array_equal(run(compact, {"x": x})[0], run(duplex, {"x": x})[0])


def test_binding_length_mismatch_is_a_typed_error():
    with pytest.raises(BindingError, match="'w'"):
        bake(mul_graph(), {"w": np.ones(5, np.float32)})


def test_binding_dtype_mismatch_is_a_typed_error():
    with pytest.raises(BindingError, match="'w'"):
        bake(mul_graph(), {"w": np.ones(4, np.int32)})


def test_unused_bindings_are_reported():
    _, report = bake(mul_graph(), {"w": np.ones(4, np.float32), "zz": np.ones(1, np.float32)})
    assert report.unused_bindings == ["zz"]


def test_merge_keeps_folded_bindings_and_counts_are_honest():
    file, report = bake(mlp_graph(), mlp_weights(), opts(BakeProfile.MERGE))
    assert report.params_baked == 4 and report.nodes_after == report.nodes_before
    assert sorted(r.name for r in file.weights) == ["b1", "b2", "w1", "w2"]
    assert report.optimize.weights_unfolded == 2  # w1 and w2 feed matmuls; biases are rows too
