"""GGUF matrices are stored `[N, K]` (BT): decoded to f32 (--weights-policy f32, or the
exact and size profiles, which decode) they must bind a MatMul's `[K, N]` weight transposed,
so both load policies bake the same model. Files are written by `gguf.GGUFWriter`; the
reference is float64 numpy over the `gguf` package's own dequantisation."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize, quantize

from rlx import BakeOptions, bake_bundle
from rlx.deferred import materialize
from rlx.ir import BinaryOp, DType, Gather, Graph, Shape
from rlx.runtime import Session
from rlx.weights import load_weights

Q = gguf.GGMLQuantizationType
K, N, V = 64, 32, 10


def _graph() -> Graph:
    """y = embed[ids] @ w + x @ v  (w [K, N] packed-capable, v square, embed a Gather table)."""
    g = Graph("gguf_mlp")
    x = g.input("x", Shape([3, K]))
    ids = g.input("ids", Shape([3], DType.I64))
    w = g.param("w", Shape([K, N]))
    v = g.param("v", Shape([K, K]))
    emb = g.param("embed", Shape([V, K]))
    h = g.add_node(Gather(0), (emb, ids))
    y = g.matmul(g.matmul(x, v), w)
    g.set_outputs([g.binary(BinaryOp.ADD, y, g.matmul(h, w))])
    return g


def _write(path, tensors: dict[str, tuple[Q, np.ndarray]]) -> None:
    writer = gguf.GGUFWriter(str(path), "test")
    for name, (qtype, value) in tensors.items():
        if qtype is Q.F32:
            writer.add_tensor(name, value)
        else:
            writer.add_tensor(name, quantize(value, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("w_type", [Q.Q8_0, Q.F32])
def test_f32_and_packed_policies_bake_the_same_model(tmp_path, w_type):
    rng = np.random.default_rng(0)
    w_nk = rng.standard_normal((N, K)).astype(np.float32)  # PyTorch Linear orientation
    v_nk = rng.standard_normal((K, K)).astype(np.float32)  # square: shape cannot tell
    embed = rng.standard_normal((V, K)).astype(np.float32)  # [V, D] as Gather reads it
    path = tmp_path / "model.gguf"
    _write(path, {"w": (w_type, w_nk), "v": (Q.Q8_0, v_nk), "embed": (Q.F32, embed)})
    feeds = {"x": rng.standard_normal((3, K)).astype(np.float32),
             "ids": np.array([0, 7, 9], np.int64)}

    def decoded(value, qtype):
        return value if qtype is Q.F32 else dequantize(quantize(value, qtype), qtype)

    w64 = decoded(w_nk, w_type).astype(np.float64).T
    v64 = decoded(v_nk, Q.Q8_0).astype(np.float64).T
    want = feeds["x"] @ v64 @ w64 + embed[feeds["ids"]].astype(np.float64) @ w64
    outs = {}
    for policy, profile in [("f32", "exact"), ("packed", "fold"), ("f32", "fold"),
                            ("packed", "exact")]:
        opts = BakeOptions.from_profile(profile)
        bundle = load_weights(path, policy, opts)
        file, _ = bake_bundle(_graph(), bundle, opts)
        (outs[policy, profile],) = Session().compile(file.into_runtime_graph()).run(feeds)
        np.testing.assert_allclose(outs[policy, profile], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(outs["f32", "exact"], outs["packed", "fold"], rtol=1e-5,
                               atol=1e-5)


def test_an_explicit_packed_policy_keeps_packs_under_the_exact_profile(tmp_path):
    """`--weights-policy packed` with the exact profile: the Q8_0 pack is stored as it came
    (its bytes, not re-encoded from f32), and the ternary packing still takes the dense,
    exactly ternary weight."""
    rng = np.random.default_rng(1)
    w_nk = rng.standard_normal((N, K)).astype(np.float32)
    v_nk = rng.integers(-1, 2, (K, K)).astype(np.float32)  # exactly ternary, dense f32
    embed = rng.standard_normal((V, K)).astype(np.float32)
    path = tmp_path / "model.gguf"
    _write(path, {"w": (Q.Q8_0, w_nk), "v": (Q.F32, v_nk), "embed": (Q.F32, embed)})
    opts = BakeOptions.from_profile("exact")
    file, _ = bake_bundle(_graph(), load_weights(path, "packed", opts), opts)
    by_encoding = {}
    for row in file.weights:
        by_encoding.setdefault(row.encoding, []).append(row)
    [w_row] = by_encoding["gguf_q8_0"]
    assert materialize(w_row.data).tobytes() == quantize(w_nk, Q.Q8_0).tobytes()
    assert len(by_encoding["gguf_tq2_0"]) == 1  # v, packed from its dense f32 values
    feeds = {"x": rng.standard_normal((3, K)).astype(np.float32),
             "ids": np.array([1, 2, 3], np.int64)}
    w64 = dequantize(quantize(w_nk, Q.Q8_0), Q.Q8_0).astype(np.float64).T
    want = (feeds["x"] @ v_nk.T.astype(np.float64)) @ w64 + \
        embed[feeds["ids"]].astype(np.float64) @ w64
    (got,) = Session().compile(file.into_runtime_graph()).run(feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
