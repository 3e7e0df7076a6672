"""A one-layer transformer encoder block for the fast profile's tests, written with
onnx.helper so onnxruntime runs the original as the independent f32 reference, and its
float64 numpy forward pass. `outlier=True` gives the FFN a hidden unit whose huge constant
activation (a bias of 1000, its part in the second FFN MatMul cancelled by that one's bias)
changes nothing in f32 but takes a per-tensor u8 scale's whole range or, smoothed
(`rlx.baking.smoothing`), its weight row takes every output channel's: the second FFN
MatMul is the sensitive node."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["SEQ", "HIDDEN", "HEADS", "encoder_block", "encoder_forward", "token_feeds"]

SEQ, HIDDEN, HEADS, FFN = 32, 128, 4, 256


def _weights(seed: int, outlier: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = {}
    for name, (k, n) in {"q": (HIDDEN, HIDDEN), "k": (HIDDEN, HIDDEN), "v": (HIDDEN, HIDDEN),
                         "o": (HIDDEN, HIDDEN), "f1": (HIDDEN, FFN), "f2": (FFN, HIDDEN)}.items():
        w[f"w{name}"] = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        w[f"b{name}"] = (rng.standard_normal(n) * 0.1).astype(np.float32)
    if outlier:
        w["bf1"][0] = 1000.0
        w["bf2"] -= 1000.0 * w["wf2"][0]
    return w


def encoder_block(folder: Path, seed: int = 0, outlier: bool = False) -> Path:
    """x [1, SEQ, HIDDEN] -> Q, K, V projections -> HEADS heads: Softmax(Q.K^T / sqrt(d)).V
    -> output projection + x -> Relu FFN + residual ("y"). Six MatMuls have a constant
    weight; Q.K^T and P.V multiply two computed tensors."""
    w = _weights(seed, outlier)
    d = HIDDEN // HEADS
    w["heads"] = np.array([1, SEQ, HEADS, d], np.int64)
    w["flat"] = np.array([1, SEQ, HIDDEN], np.int64)
    w["scale"] = np.array(1 / np.sqrt(d), np.float32)
    n = helper.make_node
    nodes = []
    for p in "qkv":
        nodes += [n("MatMul", ["x", f"w{p}"], [f"{p}m"]), n("Add", [f"{p}m", f"b{p}"], [f"{p}b"]),
                  n("Reshape", [f"{p}b", "heads"], [f"{p}h"])]
    nodes += [n("Transpose", ["qh"], ["qt"], perm=[0, 2, 1, 3]),
              n("Transpose", ["kh"], ["kt"], perm=[0, 2, 3, 1]),
              n("Transpose", ["vh"], ["vt"], perm=[0, 2, 1, 3]),
              n("MatMul", ["qt", "kt"], ["s"]), n("Mul", ["s", "scale"], ["ss"]),
              n("Softmax", ["ss"], ["p"], axis=-1), n("MatMul", ["p", "vt"], ["a"]),
              n("Transpose", ["a"], ["at"], perm=[0, 2, 1, 3]),
              n("Reshape", ["at", "flat"], ["af"]),
              n("MatMul", ["af", "wo"], ["om"]), n("Add", ["om", "bo"], ["ob"]),
              n("Add", ["ob", "x"], ["h"]),
              n("MatMul", ["h", "wf1"], ["f1m"]), n("Add", ["f1m", "bf1"], ["f1b"]),
              n("Relu", ["f1b"], ["f1r"]),
              n("MatMul", ["f1r", "wf2"], ["f2m"]), n("Add", ["f2m", "bf2"], ["f2b"]),
              n("Add", ["f2b", "h"], ["y"])]
    graph = helper.make_graph(
        nodes, "encoder_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, k) for k, a in w.items()])
    path = folder / f"encoder_block{'_outlier' if outlier else ''}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def encoder_forward(x: np.ndarray, seed: int = 0, outlier: bool = False) -> np.ndarray:
    """`encoder_block`'s output in float64 numpy."""
    w = {k: v.astype(np.float64) for k, v in _weights(seed, outlier).items()}
    h64 = x.astype(np.float64)[0]
    d = HIDDEN // HEADS

    def heads(t):
        return t.reshape(SEQ, HEADS, d).transpose(1, 0, 2)

    q, k, v = (heads(h64 @ w[f"w{p}"] + w[f"b{p}"]) for p in "qkv")
    s = q @ k.transpose(0, 2, 1) / np.sqrt(d)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    a = (p @ v).transpose(1, 0, 2).reshape(SEQ, HIDDEN)
    h = a @ w["wo"] + w["bo"] + h64
    f = np.maximum(h @ w["wf1"] + w["bf1"], 0)
    return (f @ w["wf2"] + w["bf2"] + h)[None]


def token_feeds(seed: int, n: int = 1, loud: float = 1.0) -> list[dict[str, np.ndarray]]:
    """Standard normal hidden states, channel 0 times `loud` (an outlier channel, as a
    BERT encoder's hidden states carry)."""
    rng = np.random.default_rng(seed)
    gain = np.ones(HIDDEN, np.float32)
    gain[0] = loud
    return [{"x": rng.standard_normal((1, SEQ, HIDDEN)).astype(np.float32) * gain}
            for _ in range(n)]
