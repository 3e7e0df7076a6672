"""The weight-encoding stage: its plan is a pure function of the graph (a choice per weight,
by role), and applying it stores the very bytes the gguf package's quantizers make."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf.quants import quantize

from rlx.codecs import Encoding, dequantize_q8_f32
from rlx.deferred import Computed
from rlx.ir import BinaryOp, Conv, DequantMatMul, DType, Graph, MatMul, Shape
from rlx.ir.ops.packed import DecodeWeight, DequantGather
from rlx.ir.ops.shaping import Gather
from rlx.passes import WeightRole, apply_weight_encodings, plan_weight_encodings
from rlx.passes.weight_encoding import FINER_BLOCK_ENCODINGS, next_rung
from rlx.passes.zero_matmuls import skip_zero_matmul
from tests.passes.common import assert_unchanged, random_feeds, run, snapshot

Q8, TQ2 = Encoding.GGUF_Q8_0, Encoding.GGUF_TQ2_0
GGUF = {Q8: gguf.GGMLQuantizationType.Q8_0, TQ2: gguf.GGMLQuantizationType.TQ2_0}
rng = np.random.default_rng(7)


def _gguf(values: np.ndarray, encoding: Encoding) -> np.ndarray:
    """The gguf package's bytes for `values`, quantized row by row (rows of whole blocks)."""
    return quantize(np.ascontiguousarray(values, np.float32), GGUF[encoding]).reshape(-1)


def _model() -> tuple[Graph, dict[str, np.ndarray]]:
    """One weight per role the plan tells apart, each named after what it should become."""
    g = Graph("roles")
    weights = {
        "q8_matmul": rng.standard_normal((64, 24)).astype(np.float32),
        "tq2_matmul": rng.integers(-1, 2, (256, 4)).astype(np.float32),
        "q8_table": rng.standard_normal((300, 32)).astype(np.float32),
        "q8_conv": rng.standard_normal((16, 8, 3, 3)).astype(np.float32),
        "grid_matmul": (rng.integers(-127, 128, (64, 8)) * np.float32(0.01)).astype(np.float32),
        "f16_bias": rng.standard_normal(64).astype(np.float32),
    }
    ids = {name: g.constant(value, name=name) for name, value in weights.items()}
    x = g.input("x", Shape([5, 64]))
    xt = g.input("xt", Shape([5, 256]))
    tokens = g.input("tokens", Shape([3], DType.I64))
    img = g.input("img", Shape([1, 8, 6, 6]))
    g.set_outputs([
        g.add_node(MatMul(), (x, ids["q8_matmul"]), name="mm"),
        g.add_node(MatMul(), (xt, ids["tq2_matmul"]), name="tq2"),
        g.add_node(Gather(axis=0), (ids["q8_table"], tokens), name="embed"),
        g.add_node(Conv(), (img, ids["q8_conv"]), name="conv"),
        g.add_node(MatMul(), (x, ids["grid_matmul"]), name="grid"),
        g.binary(BinaryOp.ADD, x, ids["f16_bias"]),
    ])
    return g, weights


def test_the_plan_is_pure_and_chooses_by_role():
    g, _ = _model()
    before = snapshot(g)
    plan = plan_weight_encodings(g)
    assert plan == plan_weight_encodings(g)  # a function of the graph alone
    assert_unchanged(g, before)
    chosen = {c.name: (c.role, c.encoding) for c in plan.choices}
    assert chosen == {
        "q8_matmul": (WeightRole.MATMUL, Q8),
        "tq2_matmul": (WeightRole.MATMUL, TQ2),
        "q8_table": (WeightRole.GATHER, Q8),
        "q8_conv": (WeightRole.CONV, Q8),
        "grid_matmul": (WeightRole.MATMUL_DECODED, Encoding.Q8_F32),
        "f16_bias": (WeightRole.OTHER, Encoding.F16),
    }
    assert plan.count == 3  # two MatMuls and the Gather read rows of their weights
    exact = {c.name for c in plan.choices if c.lossless}
    assert exact == {"tq2_matmul", "grid_matmul"}
    assert all(c.rel_error == 0 for c in plan.choices if c.lossless)


def test_lossless_and_no_ternary_plans():
    g, _ = _model()
    assert [(c.name, c.encoding) for c in plan_weight_encodings(g, lossless=True).choices] == [
        ("tq2_matmul", TQ2)]
    no_ternary = {c.name: c.encoding for c in plan_weight_encodings(g, ternary=False).choices}
    # then a weight like any other: -1/0/+1 lie on an int8 grid, stored exactly as q8_f32
    assert no_ternary["tq2_matmul"] is Encoding.Q8_F32


def test_applied_streams_are_the_gguf_quantizers_bytes():
    g, w = _model()
    encoded, count = apply_weight_encodings(g, plan_weight_encodings(g).choices)
    assert count == 6
    mm, tq2, embed = encoded.find("mm"), encoded.find("tq2"), encoded.find("embed")
    assert mm.op == DequantMatMul(Q8, 24) and tq2.op == DequantMatMul(TQ2, 4)
    assert embed.op == DequantGather(Q8, 300, 32)
    # DequantMatMul reads the stream of W^T (BT [N, K]); DequantGather one row per entry
    np.testing.assert_array_equal(encoded.node(mm.inputs[1]).op.data, _gguf(w["q8_matmul"].T, Q8))
    np.testing.assert_array_equal(encoded.node(tq2.inputs[1]).op.data,
                                  _gguf(w["tq2_matmul"].T, TQ2))
    np.testing.assert_array_equal(encoded.node(embed.inputs[0]).op.data,
                                  _gguf(w["q8_table"], Q8))
    # the conv's 16 rows of 72 are not whole blocks: stored as one row, blocks along K
    decode = encoded.node(encoded.find("conv").inputs[1])
    assert decode.op == DecodeWeight(Q8, (16, 8, 3, 3), 1)
    np.testing.assert_array_equal(encoded.node(decode.inputs[0]).op.data,
                                  _gguf(w["q8_conv"].reshape(1, -1), Q8))


def test_encoded_outputs_stay_within_q8_0s_error_and_exact_ones_exact():
    g, w = _model()
    encoded, _ = apply_weight_encodings(g, plan_weight_encodings(g).choices)
    feeds = random_feeds(g)
    feeds["tokens"] = np.array([0, 299, 7])
    want, got = run(g, feeds), run(encoded, feeds)
    np.testing.assert_array_equal(got[4], want[4])  # q8_f32 on its own int8 grid: exact
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-4)  # ternary: exact values
    x = feeds["x"].astype(np.float64)
    exact = x @ w["q8_matmul"].astype(np.float64)
    # per weight: half a code step (amax/127/2) plus the f16 rounding of the scale
    amax = np.abs(w["q8_matmul"].T.reshape(-1, 32)).max(axis=1, keepdims=True)
    step = np.broadcast_to(amax / 127, (len(amax), 32)).reshape(24, 64).T
    bound = np.abs(x) @ (step * 0.5 + np.abs(w["q8_matmul"]) * 2.0**-11) + 1e-5
    assert (np.abs(got[0] - exact) <= bound).all() and np.abs(got[0] - exact).max() > 0


@pytest.mark.parametrize("scale, reason", [(np.inf, "holds inf or NaN"),
                                           (1e7, "f16 would overflow")])
def test_weights_no_encoding_holds_stay_with_a_reason(scale, reason):
    """inf: nothing holds it; 1e7 x N(0, 1): Q8_0's block scale (max / 127) overflows f16,
    which the codec refuses, and f16 cannot hold the values either."""
    g = Graph("dense")
    x = g.input("x", Shape([5, 64]))
    values = rng.standard_normal((64, 8)).astype(np.float32) * np.float32(1e7)
    if np.isinf(scale):
        values[3, 1] = np.inf
    g.set_outputs([g.add_node(MatMul(), (x, g.constant(values, name="w")), name="y")])
    plan = plan_weight_encodings(g)
    assert plan.choices == () and plan.skipped == {reason: 1}
    assert apply_weight_encodings(g, plan.choices) == (g, 0)


class _RowsOnly(Computed):
    """A deferred weight that may be read in blocks of rows but never whole: what a weight
    larger than memory must be to the checks (rlx.deferred.row_blocks)."""

    def read(self) -> np.ndarray:
        raise AssertionError(f"{self} read whole")


def test_lossless_checks_read_large_weights_in_blocks_only():
    """The exact profile's checks (zero, ternary, finite) hold one block of a weight at a
    time: a 2 GiB model of 256 MiB weights baked exact peaked at 85 MB (564 MB when each
    weight was read whole)."""
    dense = rng.standard_normal((512, 1024)).astype(np.float32)  # 2 MiB: deferred
    ternary = rng.integers(-1, 2, (512, 1024)).astype(np.float32)
    g = Graph("large")
    x = g.input("x", Shape([2, 512]))
    g.set_outputs([g.matmul(x, g.constant(
        _RowsOnly(np.copy, (value,), (), value.shape, np.float32, rowwise=True), name=name))
        for name, value in (("dense", dense), ("ternary", ternary))])
    plan = plan_weight_encodings(g, lossless=True)
    assert [c.encoding for c in plan.choices] == [TQ2]  # the ternary one found, in blocks
    assert skip_zero_matmul(g)[1] == 0


def _rows_only(name: str, value: np.ndarray, g: Graph) -> int:
    return g.constant(_RowsOnly(np.copy, (value,), (), value.shape, np.float32, rowwise=True),
                      name=name)


def test_size_plan_and_stream_read_a_large_matmul_weight_in_slabs_only():
    """A MatMul weight larger than a slab (`weight_errors.SLAB_BYTES`, 4 MiB) is planned (its
    ternary, grid and error checks) and encoded a slab at a time, and its stream is still the
    gguf package's Q8_0 of W^T: a size bake of 2 x 256 MiB weights peaked at 749 MB when
    each was read whole, with its transpose and stream beside it."""
    k, n = 9216, 256  # 9 MiB: two whole slabs of rows and a quarter
    dense = rng.standard_normal((k, n)).astype(np.float32)
    steps = rng.uniform(0.01, 0.02, n).astype(np.float32)  # a step per column (stored row)
    codes = rng.integers(-126, 127, (k, n)).astype(np.float32)
    codes[rng.integers(0, k, n), np.arange(n)] = 127  # each column's largest code
    grid = codes * steps
    g = Graph("large")
    x = g.input("x", Shape([2, k]))
    g.set_outputs([g.matmul(x, _rows_only(name, value, g))
                   for name, value in (("dense", dense), ("grid", grid))])
    plan = plan_weight_encodings(g)
    by_name = {c.name: c for c in plan.choices}
    assert by_name["dense"].encoding is Q8 and by_name["grid"].encoding is Encoding.Q8_F32
    want = _gguf(dense.T, Q8)
    decoded = gguf.quants.dequantize(want.reshape(n, -1), GGUF[Q8]).astype(np.float64).T
    error = np.linalg.norm(decoded - dense) / np.linalg.norm(dense.astype(np.float64))
    assert by_name["dense"].rel_error == pytest.approx(error, rel=1e-6)
    encoded, _ = apply_weight_encodings(g, [by_name["dense"]])
    mm = next(node for node in encoded.nodes() if isinstance(node.op, DequantMatMul))
    stream = encoded.node(mm.inputs[1]).op.data
    assert isinstance(stream, Computed) and stream.streamed  # the writer reads it
    np.testing.assert_array_equal(stream.read(), want)


def test_size_plan_and_streams_read_large_gather_tables_in_blocks_of_rows_only():
    """Gather tables larger than a slab are planned and encoded a block of rows at a time
    (a 1 GiB table baked size peaked at 3.29 GB read whole): Q8_0 as the gguf package
    quantizes the whole table, q8_f32 on the table's own grid (one step for the tensor,
    from its largest row) decoding to it bit for bit, and a table a MatMul reads too (no
    one role: f16) as numpy's float16."""
    v, d = 9216, 256  # 9 MiB each: two whole slabs of rows and a quarter
    dense = rng.standard_normal((v, d)).astype(np.float32)
    codes = rng.integers(-100, 101, (v, d)).astype(np.float32)
    codes[-1, 0] = 127  # the tensor's largest code, in its last block of rows
    grid = codes * np.float32(0.0123)
    tied = rng.standard_normal((v, d)).astype(np.float32)
    g = Graph("tables")
    tokens = g.input("tokens", Shape([3], DType.I64))
    tied_id = _rows_only("tied", tied, g)
    lookups = [g.add_node(Gather(axis=0), (_rows_only(name, value, g), tokens))
               for name, value in (("dense", dense), ("grid", grid))]
    g.set_outputs([*lookups, g.add_node(Gather(axis=0), (tied_id, tokens)),
                   g.matmul(g.input("x", Shape([2, v])), tied_id)])
    plan = plan_weight_encodings(g)
    by_name = {c.name: c for c in plan.choices}
    assert {name: c.encoding for name, c in by_name.items()} == {
        "dense": Q8, "grid": Encoding.Q8_F32, "tied": Encoding.F16}
    encoded, _ = apply_weight_encodings(g, plan.choices)
    streams = {encoded.node(n.inputs[0]).name: encoded.node(n.inputs[0]).op.data
               for n in encoded.nodes() if isinstance(n.op, (DequantGather, DecodeWeight))}
    stored = {name: np.frombuffer(b"".join(bytes(c) for c in s.chunks()), np.uint8)
              for name, s in streams.items()}
    np.testing.assert_array_equal(stored["dense"], _gguf(dense, Q8))
    decoded = dequantize_q8_f32(stored["grid"], grid.size).reshape(grid.shape)
    assert decoded.view(np.uint32).tolist() == grid.view(np.uint32).tolist()
    assert np.all(stored["grid"].reshape(-1, 36)[:, :4].view(np.float32) == np.float32(0.0123))
    np.testing.assert_array_equal(stored["tied"].view(np.float16),
                                  tied.astype(np.float16).reshape(-1))


def test_the_guards_ladder_runs_through_the_wider_codes_to_f16():
    """`next_rung` from Q8_0: q9_0 .. q12_0 (their bytes: rows of whole blocks, 2 + 4 x bits
    a block), then f16, then nothing; a MatMul weight on a wider code leaves DequantMatMul
    (its exports take GGUF streams) for a DecodeWeight, and its product stays within half a
    code step per weight of float64 numpy's."""
    g, w = _model()
    users = g.users()
    choice = next(c for c in plan_weight_encodings(g).choices if c.name == "q8_matmul")
    seen = []
    while choice is not None:
        seen.append(choice.encoding)
        if choice.encoding in FINER_BLOCK_ENCODINGS:
            bits = {Encoding.Q9_0: 9, Encoding.Q10_0: 10, Encoding.Q11_0: 11,
                    Encoding.Q12_0: 12}[choice.encoding]
            assert choice.role is WeightRole.MATMUL_DECODED
            assert choice.packed_bytes == 24 * 2 * (2 + 4 * bits)  # 24 rows of 2 blocks
            encoded, _ = apply_weight_encodings(g, [choice])
            assert not any(isinstance(n.op, DequantMatMul) for n in encoded.nodes())
            feeds = random_feeds(g)
            feeds["tokens"] = np.array([0, 1, 2])
            got = run(encoded, feeds)[0]
            amax = np.abs(w["q8_matmul"].T.reshape(-1, 32)).max(axis=1, keepdims=True)
            step = np.broadcast_to(amax / ((1 << (bits - 1)) - 1), (len(amax), 32))
            step = step.reshape(24, 64).T * (1 + 2.0**-10)  # the scale rounded up to f16
            exact = feeds["x"].astype(np.float64) @ w["q8_matmul"].astype(np.float64)
            assert (np.abs(got - exact) <= np.abs(feeds["x"]) @ (step * 0.5) + 1e-5).all()
        choice = next_rung(g, choice, users)
    assert seen == [Encoding.GGUF_Q8_0, *FINER_BLOCK_ENCODINGS, Encoding.F16]


def test_a_calibrated_plan_searches_the_scales_of_the_same_blocks():
    """`searched=True` (calibrated bakes): the block-encoded weights keep their encodings
    and bytes with less error; the MatMul weight's stream is still Q8_0 blocks of W^T that
    the gguf package decodes, to the error the plan reports and no block worse than the
    gguf quantizer's; the ladder's wider codes are searched too, f16 has nothing to search."""
    g, w = _model()
    plain = {c.name: c for c in plan_weight_encodings(g).choices}
    searched = {c.name: c for c in plan_weight_encodings(g, searched=True).choices}
    for name in ("q8_matmul", "q8_table", "q8_conv"):
        assert searched[name].searched and not plain[name].searched
        assert (searched[name].encoding, searched[name].packed_bytes) == \
            (plain[name].encoding, plain[name].packed_bytes)
        assert searched[name].rel_error < plain[name].rel_error
    assert not searched["f16_bias"].searched
    encoded, _ = apply_weight_encodings(g, [searched["q8_matmul"]])
    mm = encoded.find("mm")
    assert mm.op == DequantMatMul(Q8, 24)
    stream = np.asarray(encoded.node(mm.inputs[1]).op.data).reshape(-1, 34)
    decoded = gguf.quants.dequantize(stream, GGUF[Q8]).reshape(24, 64).T.astype(np.float64)
    weight = w["q8_matmul"].astype(np.float64)
    error = np.linalg.norm(decoded - weight) / np.linalg.norm(weight)
    assert error == pytest.approx(searched["q8_matmul"].rel_error, rel=1e-6)
    reference = gguf.quants.dequantize(_gguf(w["q8_matmul"].T, Q8).reshape(-1, 34), GGUF[Q8])
    blocks = (weight.T - decoded.T).reshape(-1, 32)
    worse = (weight.T - reference.reshape(24, 64)).reshape(-1, 32)
    assert ((blocks ** 2).sum(axis=1) <= (worse ** 2).sum(axis=1)).all()
    wider = next_rung(g, searched["q8_matmul"], g.users())
    unsearched = next_rung(g, plain["q8_matmul"], g.users())
    assert wider is not None and unsearched is not None
    assert wider.searched and wider.encoding is unsearched.encoding is Encoding.Q9_0
    assert wider.rel_error < unsearched.rel_error
