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
    for policy, profile in [("f32", "exact"), ("packed", "fold"), ("f32", "fold")]:
        opts = BakeOptions.from_profile(profile)
        bundle = load_weights(path, policy, opts)
        file, _ = bake_bundle(_graph(), bundle, opts)
        (outs[policy, profile],) = Session().compile(file.into_runtime_graph()).run(feeds)
        np.testing.assert_allclose(outs[policy, profile], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(outs["f32", "exact"], outs["packed", "fold"], rtol=1e-5,
                               atol=1e-5)
