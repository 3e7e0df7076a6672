"""onnxruntime's fused com.microsoft ops: rlx's lowering against onnxruntime, one node each."""

from __future__ import annotations

import numpy as np
import pytest

from rlx.onnx import import_onnx
from rlx.runtime import Session
from tests.frontends.contrib.oracle import Const, assert_same, one_node, run_both

F32 = np.float32


def rand(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(F32)


@pytest.mark.parametrize("activation,params", [
    ("Relu", []), ("Tanh", []), ("Sigmoid", []), ("LeakyRelu", [0.2]),
    ("HardSigmoid", [0.3, 0.4]), ("HardSwish", []), ("Clip", [-0.5, 0.7]), ("", [])])
@pytest.mark.parametrize("with_z", [False, True])
def test_fused_conv(activation, params, with_z):
    x, w, b = rand(1, 4, 7, 6), Const(rand(6, 2, 3, 3, seed=1)), Const(rand(6, seed=2))
    z = rand(1, 6, 4, 3, seed=3) if with_z else None
    attrs = {"activation": activation} if activation else {}
    if params:
        attrs["activation_params"] = params
    got, want = run_both("FusedConv", [x, w, b] + ([z] if with_z else []), group=2,
                         strides=[2, 2], pads=[1, 1, 1, 0], **attrs)
    assert_same(got, want, 1e-5)


@pytest.mark.parametrize("activation,attrs", [
    ("Relu", {}), ("LeakyRelu", {"activation_alpha": 0.1}),
    ("HardSigmoid", {"activation_alpha": 0.3, "activation_beta": 0.6}), ("Tanh", {})])
def test_fused_gemm(activation, attrs):
    a, b, c = rand(3, 5), Const(rand(4, 5, seed=1)), Const(rand(4, seed=2))
    got, want = run_both("FusedGemm", [a, b, c], transB=1, alpha=0.5, beta=2.0,
                         activation=activation, **attrs)
    assert_same(got, want, 1e-5)


@pytest.mark.parametrize("trans", [(0, 0, 0, 0), (1, 0, 0, 0), (0, 1, 0, 0), (1, 1, 0, 0),
                                   (0, 0, 1, 0), (0, 0, 0, 1), (1, 1, 1, 1)])
def test_fused_matmul(trans):
    ta, tb, tba, tbb = trans

    def operand(rows, cols, t, tbatch, seed):
        shape = [2, rows, cols]  # batch 2
        if t:
            shape[-1], shape[-2] = shape[-2], shape[-1]
        if tbatch:  # batch axis given where the rows are
            shape = [shape[1], shape[0], shape[2]]
        return rand(*shape, seed=seed)

    a, b = operand(3, 4, ta, tba, 0), operand(4, 5, tb, tbb, 1)
    got, want = run_both("FusedMatMul", [a, b], alpha=0.75, transA=ta, transB=tb,
                         transBatchA=tba, transBatchB=tbb)
    assert_same(got, want, 1e-5)


@pytest.mark.parametrize("op,inputs", [
    ("Gelu", [rand(2, 3, 8)]), ("BiasGelu", [rand(2, 3, 8), Const(rand(8, seed=1))]),
    ("FastGelu", [rand(2, 3, 8)]), ("FastGelu", [rand(2, 3, 8), Const(rand(8, seed=1))]),
    ("QuickGelu", [rand(2, 3, 8, scale=3)]),
])
def test_gelu_family_and_bias_add(op, inputs):
    got, want = run_both(op, inputs)
    assert_same(got, want, 1e-5)


def test_quick_gelu_alpha():
    got, want = run_both("QuickGelu", [rand(4, 8, scale=3)], alpha=1.0)
    assert_same(got, want, 1e-5)


def run_rlx(op_type: str, inputs, **attrs):
    model, feeds = one_node(op_type, inputs, **attrs)
    graph, bindings = import_onnx(model)
    return Session().compile(graph).run({**feeds, **bindings})


def test_bias_add_and_bias_softmax_follow_the_contrib_docs():
    """onnxruntime has CUDA kernels only for these two: the oracle is the documented
    formula in float64 numpy (X + bias + skip; softmax(data + bias) along axis)."""
    x, bias, skip = rand(2, 3, 8), rand(8, seed=1), rand(2, 3, 8, seed=2)
    (got,) = run_rlx("BiasAdd", [x, bias, skip])
    np.testing.assert_allclose(got, x.astype(np.float64) + bias + skip, rtol=0, atol=1e-6)
    data, bias4 = rand(2, 3, 5, 6), rand(1, 1, 5, 6, seed=1)
    (got,) = run_rlx("BiasSoftmax", [data, bias4], axis=-1)
    z = data.astype(np.float64) + bias4
    want = np.exp(z - z.max(-1, keepdims=True))
    np.testing.assert_allclose(got, want / want.sum(-1, keepdims=True), rtol=0, atol=1e-6)


@pytest.mark.parametrize("with_beta,with_bias", [(True, True), (False, False)])
def test_skip_layer_norm(with_beta, with_bias):
    x, skip = rand(2, 5, 16), rand(2, 5, 16, seed=1)
    inputs = [x, skip, Const(rand(16, seed=2)), Const(rand(16, seed=3)) if with_beta else None,
              Const(rand(16, seed=4)) if with_bias else None]
    # outputs 1, 2 (mean, inv std) are training statistics, not asked
    got, want = run_both("SkipLayerNormalization", inputs, n_outputs=4, unused=(1, 2),
                         epsilon=1e-5)
    assert_same(got, want, 2e-5)


def test_skip_simplified_layer_norm():
    inputs = [rand(2, 5, 16), rand(2, 5, 16, seed=1), Const(rand(16, seed=2)),
              Const(rand(16, seed=3))]
    got, want = run_both("SkipSimplifiedLayerNormalization", inputs, n_outputs=4,
                         unused=(1, 2), epsilon=1e-6)
    assert_same(got, want, 2e-5)


def test_simplified_layer_norm():
    """onnxruntime registers it in the ONNX domain (opset 1 of its contrib schemas)."""
    got, want = run_both("SimplifiedLayerNormalization", [rand(2, 5, 16),
                                                          Const(rand(16, seed=1))],
                         domain="", epsilon=1e-6, axis=-1)
    assert_same(got, want, 2e-5)


@pytest.mark.parametrize("with_segment,with_mask", [(True, True), (False, False)])
def test_embed_layer_norm(with_segment, with_mask):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50, (2, 7)).astype(np.int32)
    seg = rng.integers(0, 2, (2, 7)).astype(np.int32)
    mask = np.ones((2, 7), np.int32)
    mask[1, 5:] = 0
    inputs = [ids, seg if with_segment else None, Const(rand(50, 16, seed=1)),
              Const(rand(10, 16, seed=2)), Const(rand(2, 16, seed=3)) if with_segment else None,
              Const(rand(16, seed=4)), Const(rand(16, seed=5)), mask if with_mask else None]
    got, want = run_both("EmbedLayerNormalization", inputs, n_outputs=3, epsilon=1e-5)
    assert_same(got[:1] + got[2:], want[:1] + want[2:], 2e-5)
    if with_mask:
        assert_same(got[1:2], want[1:2])


@pytest.mark.parametrize("mask,unidirectional", [
    (m, u) for m in (None, "2d", "3d", "ends", "ends-starts") for u in (0, 1)
    # left padding with causality hides every key of the first queries: onnxruntime's
    # output for such rows follows none of the documented formulas (rlx: docs/variants.md)
    if (m, u) != ("ends-starts", 1)])
def test_attention(mask, unidirectional):
    b, s, hidden, heads = 2, 5, 16, 4
    x = rand(b, s, hidden)
    w, bias = Const(rand(hidden, 3 * hidden, seed=1, scale=0.3)), Const(rand(3 * hidden, seed=2))
    m = None
    if mask == "2d":
        m = np.ones((b, s), np.int32)
        m[1, 3:] = 0
    elif mask == "ends":
        m = np.array([5, 3], np.int32)
    elif mask == "ends-starts":
        m = np.array([5, 4, 0, 1], np.int32)
    elif mask == "3d":
        m = (np.random.default_rng(3).uniform(size=(b, s, s)) > 0.3).astype(np.int32)
        m[..., 0] = 1
    got, want = run_both("Attention", [x, w, bias, m], num_heads=heads,
                         unidirectional=unidirectional)
    assert_same(got, want, 1e-5)


def test_attention_qkv_sizes_and_bias_input():
    b, s, hidden, heads = 1, 4, 12, 2
    x = rand(b, s, hidden)
    w, bias = Const(rand(hidden, 8 + 8 + 12, seed=1, scale=0.3)), Const(rand(28, seed=2))
    rel = rand(1, heads, s, s, seed=4)
    got, want = run_both("Attention", [x, w, bias, None, None, rel], num_heads=heads,
                         qkv_hidden_sizes=[8, 8, 12], scale=0.3)
    assert_same(got, want, 1e-5)


@pytest.mark.parametrize("with_bias,with_mask", [(False, False), (True, True)])
def test_multi_head_attention(with_bias, with_mask):
    b, s, kv, d, heads = 2, 3, 5, 8, 2
    q, k, v = rand(b, s, d), rand(b, kv, d, seed=1), rand(b, kv, d, seed=2)
    bias = Const(rand(3 * d, seed=3)) if with_bias else None
    mask = None
    if with_mask:
        mask = np.ones((b, kv), np.int32)
        mask[0, 3:] = 0
    got, want = run_both("MultiHeadAttention", [q, k, v, bias, mask], num_heads=heads)
    assert_same(got, want, 1e-5)


def test_multi_head_attention_right_padding_mask():
    b, s, kv, d, heads = 2, 3, 5, 8, 2
    q, k, v = rand(b, s, d), rand(b, kv, d, seed=1), rand(b, kv, d, seed=2)
    got, want = run_both("MultiHeadAttention", [q, k, v, None, np.array([5, 2], np.int32)],
                         num_heads=heads)
    assert_same(got, want, 1e-5)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("layout", ["bsd", "bnsh"])
def test_rotary_embedding(interleaved, layout):
    b, s, heads, head = 2, 4, 2, 8
    x = rand(b, s, heads * head) if layout == "bsd" else rand(b, heads, s, head)
    positions = np.array([[0, 1, 2, 3], [3, 4, 5, 6]], np.int64)
    angles = np.arange(10)[:, None] * (1.0 / 10000 ** (np.arange(head // 2) / (head // 2)))
    got, want = run_both("RotaryEmbedding", [x, positions, Const(np.cos(angles).astype(F32)),
                                             Const(np.sin(angles).astype(F32))],
                         interleaved=interleaved,
                         **({"num_heads": heads} if layout == "bsd" else {}))
    assert_same(got, want, 1e-5)
