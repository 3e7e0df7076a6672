"""onnxruntime's fused `com.microsoft` ops, lowered to the IR ops they fuse.

onnxruntime's optimizer (ORT_ENABLE_EXTENDED and up) writes these into the models it saves:
a Conv or Gemm with its activation, MatMul with its transposes and scaling, GELU variants,
LayerNorm with the residual add, and the attention blocks. Each is spelled out exactly as
onnxruntime's contrib-op documentation defines it, so the bake can fuse it again its own way.
"""

from __future__ import annotations

import math

import numpy as np

from rlx.ir import (
    Activation,
    BinaryOp,
    Clamp,
    CompareOp,
    DType,
    LayerNorm,
    LogicalOp,
    Range,
    ReduceOp,
    Softmax,
)
from rlx.ir.shape import normalize_axis
from rlx.onnx.node import NodeContext
from rlx.onnx.ops.linalg import gemm
from rlx.onnx.ops.nn import emit_conv
from rlx.onnx.registry import MICROSOFT, converter

__all__ = ["activate", "additive_mask", "attend", "rms_norm", "split_qkv"]


def activate(n: NodeContext, x: int, kind: str, params: list[float]) -> int:
    """onnxruntime's fused activation `kind` (FusedConv / FusedGemm's `activation`)."""
    s = n.s
    if kind in ("", "Identity"):
        return x
    if kind == "Relu":
        return s.unary(Activation.RELU, x)
    if kind == "Tanh":
        return s.unary(Activation.TANH, x)
    if kind == "Sigmoid":
        return s.unary(Activation.SIGMOID, x)
    if kind == "LeakyRelu":
        return s.unary(Activation.LEAKY_RELU, x, params[0] if params else 0.01)
    if kind == "HardSwish":
        return s.unary(Activation.HARD_SWISH, x)
    if kind == "HardSigmoid":
        alpha, beta = (params + [0.2, 0.5][len(params):])[:2]
        return s.unary(Activation.HARD_SIGMOID, x, alpha, beta)
    if kind == "Clip":
        lo, hi = (params + [-math.inf, math.inf][len(params):])[:2]
        return s.emit(Clamp(float(lo), float(hi)), x)
    raise n.fail(f"unknown fused activation {kind!r}")


@converter("FusedConv", domain=MICROSOFT)
def fused_conv(n: NodeContext) -> int:
    """Conv (+ Z, the residual summed in before the activation) then the activation."""
    s = n.s
    y = emit_conv(n, n.input(0), n.input(1), n.optional(2))
    if n.has(3):
        y = s.add(y, n.input(3))
    return activate(n, y, n.attr("activation", ""), list(n.attr("activation_params") or []))


@converter("FusedGemm", domain=MICROSOFT)
def fused_gemm(n: NodeContext) -> int:
    params = []
    for name in ("activation_alpha", "activation_beta"):
        if name not in n.attrs:
            break
        params.append(float(n.attr(name)))
    y = gemm(n)
    assert isinstance(y, int)  # Gemm has one output
    return activate(n, y, n.attr("activation", ""), params)


def _batch_to_end(s, x: int) -> int:
    """FusedMatMul's transBatch: dim 0 moves behind the other batch dims (to rank - 2)."""
    rank = s.rank(x)
    return s.transpose(x, (*range(1, rank - 1), 0, rank - 1))


@converter("FusedMatMul", domain=MICROSOFT)
def fused_matmul(n: NodeContext) -> int:
    """alpha * op(A) @ op(B), op a transposition of the last two (transA / transB) and,
    with transBatchA / transBatchB, of the first axis behind the batch axes."""
    s = n.s
    a, b = n.input(0), n.input(1)
    for name, flag in (("A", "transBatchA"), ("B", "transBatchB")):
        if n.attr(flag, 0):
            if name == "A":
                a = _batch_to_end(s, a)
            else:
                b = _batch_to_end(s, b)
    if n.attr("transA", 0):
        a = _swap_last(s, a)
    if n.attr("transB", 0):
        b = _swap_last(s, b)
    y = s.matmul(a, b)
    alpha = float(n.attr("alpha", 1.0))
    return y if alpha == 1.0 else s.mul(y, s.like(alpha, y))


def _swap_last(s, x: int) -> int:
    rank = s.rank(x)
    return s.transpose(x, (*range(rank - 2), rank - 1, rank - 2)) if rank >= 2 else x


# -- GELU family ---------------------------------------------------------------------------------
def _with_bias(n: NodeContext) -> int:
    x = n.input(0)
    return n.s.add(x, n.input(1)) if n.has(1) else x


@converter("Gelu", "BiasGelu", domain=MICROSOFT)
def gelu(n: NodeContext) -> int:
    """0.5 x (1 + erf(x / sqrt 2)), of A + B for BiasGelu."""
    return n.s.unary(Activation.GELU, _with_bias(n))


@converter("FastGelu", domain=MICROSOFT)
def fast_gelu(n: NodeContext) -> int:
    """The tanh approximation, of X + bias when a bias is given."""
    return n.s.unary(Activation.GELU_APPROX, _with_bias(n))


@converter("QuickGelu", domain=MICROSOFT)
def quick_gelu(n: NodeContext) -> int:
    """x * sigmoid(alpha x), alpha 1.702 by default (SiLU when alpha is 1)."""
    s = n.s
    x = n.input(0)
    alpha = float(n.attr("alpha", 1.702))
    if alpha == 1.0:
        return s.unary(Activation.SILU, x)
    return s.mul(x, s.unary(Activation.SIGMOID, s.mul(x, s.like(alpha, x))))


@converter("BiasAdd", domain=MICROSOFT)
def bias_add(n: NodeContext) -> int:
    """X + bias + skip."""
    s = n.s
    return s.add(s.add(n.input(0), n.input(1)), n.input(2))


@converter("BiasSoftmax", domain=MICROSOFT)
def bias_softmax(n: NodeContext) -> int:
    """softmax(data + bias) along `axis` (bias broadcast onto data)."""
    s = n.s
    return s.emit(Softmax(n.attr("axis", 1)), s.add(n.input(0), n.input(1)))


# -- normalisation -----------------------------------------------------------------------------
def rms_norm(s, x: int, scale: int | None, axis: int, eps: float) -> int:
    """x / sqrt(mean(x^2 over axis..) + eps) * scale, computed in float32 (onnxruntime's
    stash type) and returned in x's type."""
    dtype = s.dtype(x)
    xs = s.cast(x, DType.F32)
    axes = tuple(range(normalize_axis(axis, s.rank(x)), s.rank(x)))
    mean = s.reduce(ReduceOp.MEAN, s.mul(xs, xs), axes)
    y = s.cast(s.mul(xs, s.unary(Activation.RSQRT, s.add(mean, s.like(eps, mean)))), dtype)
    return y if scale is None else s.mul(y, scale)


def _skip_sum(n: NodeContext) -> int:
    """input + skip (+ bias, input 4)."""
    s = n.s
    total = s.add(n.input(0), n.input(1))
    return s.add(total, n.input(4)) if n.has(4) else total


def _no_statistics(n: NodeContext, outputs: range) -> None:
    for i in outputs:
        if n.wants(i):
            raise n.fail(f"output {i} (a training statistic) is not supported")


@converter("SkipLayerNormalization", domain=MICROSOFT)
def skip_layer_norm(n: NodeContext):
    """LayerNorm(input + skip + bias) * gamma + beta over the last axis; output 3 is the
    sum itself (the next block's residual)."""
    s = n.s
    total = _skip_sum(n)
    params = [n.input(2)] + ([n.input(3)] if n.has(3) else [])
    _no_statistics(n, range(1, 3))
    y = s.emit(LayerNorm(-1, float(n.attr("epsilon", 1e-12))), total, *params)
    return [y, None, None, total]


@converter("SkipSimplifiedLayerNormalization", domain=MICROSOFT)
def skip_simplified_layer_norm(n: NodeContext):
    """RMSNorm(input + skip + bias) * gamma; inputs input, skip, gamma, bias."""
    s = n.s
    total = s.add(n.input(0), n.input(1))
    if n.has(3):
        total = s.add(total, n.input(3))
    _no_statistics(n, range(1, 3))
    y = rms_norm(s, total, n.input(2), -1, float(n.attr("epsilon", 1e-12)))
    return [y, None, None, total]


@converter("SimplifiedLayerNormalization")
def simplified_layer_norm(n: NodeContext):
    """RMSNorm over axis.. (onnxruntime registers this one in the ONNX domain)."""
    _no_statistics(n, range(1, 2))
    return [rms_norm(n.s, n.input(0), n.input(1), n.attr("axis", -1),
                     float(n.attr("epsilon", 1e-5)))]


@converter("EmbedLayerNormalization", domain=MICROSOFT)
def embed_layer_norm(n: NodeContext):
    """LayerNorm(word[ids] + position[pos] + segment[seg]) * gamma + beta; output 1 is the
    mask index (the count of ones per row of the mask, int32), output 2 the sum."""
    s = n.s
    ids = s.cast(n.input(0), DType.I64)
    total = s.gather(n.input(2), ids)
    positions = s.cast(n.input(8), DType.I64) if n.has(8) else \
        _arange(s, s.shape(ids).dims[1], ids)
    total = s.add(total, s.gather(n.input(3), positions))
    if n.has(1) and n.has(4):
        total = s.add(total, s.gather(n.input(4), s.cast(n.input(1), DType.I64)))
    y = s.emit(LayerNorm(-1, float(n.attr("epsilon", 1e-12))), total, n.input(5), n.input(6))
    mask_index = None
    if n.wants(1):
        if n.has(7):
            mask = s.cast(n.input(7), DType.I32)
            mask_index = s.reduce(ReduceOp.SUM, mask, (1,), keepdims=False)
        else:
            mask_index = s.fill(s.shape_of(ids, 0, 1), 0, DType.I32)
    return [y, mask_index, total]


def _arange(s, length, like: int) -> int:
    """[[0, 1, .., length - 1]] (i64): a constant when the length is static."""
    if isinstance(length, int):
        return s.const(np.arange(length, dtype=np.int64)[None])
    return s.unsqueeze(s.emit(Range(), s.scalar(0, DType.I64), s.dim(like, 1),
                              s.scalar(1, DType.I64)), (0,))


# -- attention -------------------------------------------------------------------------------
def _heads(s, x: int, heads: int) -> int:
    """[B, S, N*H] -> [B, N, S, H]."""
    return s.transpose(s.reshape(x, (0, 0, heads, -1)), (0, 2, 1, 3))


def _merge_heads(s, x: int) -> int:
    """[B, N, S, H] -> [B, S, N*H]."""
    return s.reshape(s.transpose(x, (0, 2, 1, 3)), (0, 0, -1))


def attend(n: NodeContext, q: int, k: int, v: int, heads: int, mask: int | None,
           causal: bool, bias: int | None = None) -> int:
    """softmax(Q K^T * scale + bias + mask) V over [B, S, N*H] projections; `mask` (0 or
    the filter value) and `bias` are additive and broadcast to [B, N, S, T]. A position
    hidden by both the mask and causality gets the filter value once, as in onnxruntime."""
    s = n.s
    qh, kh, vh = _heads(s, q, heads), _heads(s, k, heads), _heads(s, v, heads)
    head = s.shape(qh).dims[-1]
    scale = float(n.attr("scale", 0.0) or 0.0)
    if not scale:
        if not isinstance(head, int):
            raise n.fail(f"the head size must be static, got {head}")
        scale = 1.0 / math.sqrt(head)
    scores = s.matmul(qh, s.transpose(kh, (0, 1, 3, 2)))
    scores = s.mul(scores, s.like(scale, scores))
    if bias is not None:
        scores = s.add(scores, bias)
    if causal:
        hide = _causal(n, scores)
        mask = hide if mask is None else s.binary(BinaryOp.MIN, mask, hide)
    if mask is not None:
        scores = s.add(scores, mask)
    return _merge_heads(s, s.matmul(s.emit(Softmax(-1), scores), vh))


def _causal(n: NodeContext, scores: int) -> int:
    """An additive [S, T] mask hiding later positions (the query aligned to the end)."""
    s = n.s
    rows, cols = s.shape(scores).dims[-2:]
    if not (isinstance(rows, int) and isinstance(cols, int)):
        raise n.fail("unidirectional attention needs static sequence lengths")
    keep = np.tril(np.ones((rows, cols), bool), cols - rows)
    return s.const(np.where(keep, 0.0, _filter(n)).astype(s.dtype(scores).numpy))


def _filter(n: NodeContext) -> float:
    return float(n.attr("mask_filter_value", -10000.0))


def additive_mask(n: NodeContext, mask: int, scores_dtype: DType, key: int) -> int:
    """onnxruntime's mask_index forms as an additive bias on [B, N, S, T]: [B, T] and
    [B, S, T] masks of 1 (attend) / 0 (hide); [B] right-padding ends (the key positions
    from each end on are hidden: EmbedLayerNormalization's mask index); [2B] ends then
    starts. `key` is the [B, T, ...] key, for B and T."""
    s = n.s
    rank = s.rank(mask)
    filt = _filter(n)
    if rank in (2, 3):
        m = s.cast(mask, scores_dtype)
        hidden = s.sub(s.like(1.0, m), m)
        bias = s.mul(hidden, s.like(filt, m))
        return s.unsqueeze(bias, (1, 2) if rank == 2 else (1,))
    if rank != 1:
        raise n.fail(f"mask_index of rank {rank} is not supported (ranks 1, 2, 3 are)")
    batch, length = s.shape(key).dims[0], s.shape(mask).dims[0]
    positions = _arange(s, s.shape(key).dims[1], key)  # [1, T]
    bounds = s.unsqueeze(s.cast(mask, DType.I64), (1,))  # [B or 2B, 1]
    if isinstance(batch, int) and isinstance(length, int) and length == 2 * batch:
        ends = s.slice(bounds, [0], [batch], [0])
        starts = s.slice(bounds, [batch], [length], [0])
        keep = s.logical(LogicalOp.AND, s.compare(CompareOp.LT, positions, ends),
                         s.compare(CompareOp.GE, positions, starts))
    else:
        keep = s.compare(CompareOp.LT, positions, bounds)
    bias = s.where(keep, s.scalar(0.0, scores_dtype), s.scalar(filt, scores_dtype))
    return s.unsqueeze(bias, (1, 2))


def split_qkv(n: NodeContext, y: int, total) -> list[int]:
    """The projection's Q, K, V columns: qkv_hidden_sizes, or three equal thirds."""
    s = n.s
    sizes = list(n.attr("qkv_hidden_sizes") or [])
    if not sizes:
        if not isinstance(total, int) or total % 3:
            raise n.fail(f"weights of {total} columns do not split into Q, K, V")
        sizes = [total // 3] * 3
    starts = np.cumsum([0] + sizes)
    return [s.slice(y, [int(a)], [int(b)], [-1]) for a, b in zip(starts[:-1], starts[1:])]


@converter("Attention", domain=MICROSOFT)
def attention(n: NodeContext):
    """Self-attention: (input @ weights + bias) split into Q, K, V (qkv_hidden_sizes or
    thirds), num_heads heads; mask_index (input 3) and attention_bias (input 5)."""
    s = n.s
    x, w = n.input(0), n.input(1)
    if n.has(4):
        raise n.fail("past state (input 4) is not supported")
    y = s.matmul(x, w)
    if n.has(2):
        y = s.add(y, n.input(2))
    q, k, v = split_qkv(n, y, s.shape(w).dims[-1])
    dtype = s.dtype(x)
    mask = additive_mask(n, n.input(3), dtype, k) if n.has(3) else None
    bias = n.optional(5)
    heads = n.attr("num_heads")
    out = attend(n, q, k, v, heads, mask, bool(n.attr("unidirectional", 0)), bias)
    if n.wants(1):
        raise n.fail("output 1 (present state) is not supported")
    return [out]


@converter("MultiHeadAttention", domain=MICROSOFT)
def multi_head_attention(n: NodeContext):
    """Attention over separate query, key, value [B, S|L, D] (+ bias [D + D + Dv]),
    key_padding_mask (input 4, [B, L]) and attention_bias (input 5)."""
    s = n.s
    q = n.input(0)
    if not (n.has(1) and n.has(2)) or s.rank(n.input(1)) != 3 or s.rank(q) != 3:
        raise n.fail("only separate 3-D query, key and value are supported (not packed "
                     "QKV or key/value already split into heads)")
    if n.has(6) or n.has(7):
        raise n.fail("past key / value (inputs 6, 7) are not supported")
    k, v = n.input(1), n.input(2)
    if n.has(3):
        dq, dk, dv = (s.shape(t).dims[-1] for t in (q, k, v))
        if not (isinstance(dq, int) and isinstance(dk, int) and isinstance(dv, int)):
            raise n.fail("a bias needs static hidden sizes")
        bq, bk, bv = (s.slice(n.input(3), [a], [b], [0]) for a, b in
                      ((0, dq), (dq, dq + dk), (dq + dk, dq + dk + dv)))
        q, k, v = s.add(q, bq), s.add(k, bk), s.add(v, bv)
    dtype = s.dtype(q)
    mask = additive_mask(n, n.input(4), dtype, k) if n.has(4) else None
    bias = n.optional(5)
    out = attend(n, q, k, v, n.attr("num_heads"), mask, bool(n.attr("unidirectional", 0)),
                 bias)
    for i in (1, 2):
        if n.wants(i):
            raise n.fail(f"output {i} (present key / value) is not supported")
    return [out]


@converter("RotaryEmbedding", domain=MICROSOFT)
def rotary_embedding(n: NodeContext) -> int:
    """Rotate the first rotary_embedding_dim features of each head by the cached cos/sin
    of its position: halves (x1, x2) or, `interleaved`, even/odd pairs."""
    s = n.s
    x, positions = n.input(0), s.cast(n.input(1), DType.I64)
    cos_cache, sin_cache = n.input(2), n.input(3)
    rank = s.rank(x)
    half = s.shape(cos_cache).dims[-1]
    if not isinstance(half, int):
        raise n.fail("the cos/sin cache width must be static")
    heads = n.attr("num_heads", 0)
    if rank == 3:
        width = s.shape(x).dims[-1]
        if not heads:
            if not isinstance(width, int):
                raise n.fail("num_heads is needed when the hidden size is not static")
            heads = width // (2 * half)
        xh = s.reshape(x, (0, 0, heads, -1))  # [B, S, N, H]
    elif rank == 4:
        xh = s.transpose(x, (0, 2, 1, 3))  # [B, N, S, H] -> [B, S, N, H]
    else:
        raise n.fail(f"input of rank {rank} (expected 3 or 4)")
    rotary = int(n.attr("rotary_embedding_dim", 0) or 2 * half)
    if s.rank(positions) != 2:
        offset = s.value(positions)
        if offset is None or offset.size != 1:
            raise n.fail("position_ids must be [B, S], or one start offset")
        positions = s.add(_arange(s, s.shape(xh).dims[1], xh), s.reshape(positions, ()))
    cos = s.unsqueeze(s.gather(cos_cache, positions), (2,))  # [B, S, 1, half]
    sin = s.unsqueeze(s.gather(sin_cache, positions), (2,))
    head = s.shape(xh).dims[-1]
    rot = s.slice(xh, [0], [rotary], [-1])
    if n.attr("interleaved", 0):
        x1 = s.slice(rot, [0], [rotary], [-1], [2])
        x2 = s.slice(rot, [1], [rotary], [-1], [2])
    else:
        x1 = s.slice(rot, [0], [rotary // 2], [-1])
        x2 = s.slice(rot, [rotary // 2], [rotary], [-1])
    y1 = s.sub(s.mul(x1, cos), s.mul(x2, sin))
    y2 = s.add(s.mul(x2, cos), s.mul(x1, sin))
    if n.attr("interleaved", 0):
        y = s.reshape(s.concat([s.unsqueeze(y1, (-1,)), s.unsqueeze(y2, (-1,))], -1),
                      (0, 0, 0, rotary))
    else:
        y = s.concat([y1, y2], -1)
    if not isinstance(head, int) or head != rotary:
        y = s.concat([y, s.slice(xh, [rotary], [2 ** 62], [-1])], -1)
    if rank == 3:
        return s.reshape(y, (0, 0, -1))
    return s.transpose(y, (0, 2, 1, 3))
