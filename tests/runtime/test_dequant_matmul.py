"""DequantMatMul kernel: x @ W against float64 numpy, W decoded by the `gguf` package itself."""

from __future__ import annotations

import threading

import gguf
import ml_dtypes
import numpy as np
import pytest
from gguf.quants import dequantize, quantize

from rlx.codecs import Encoding
from rlx.errors import KernelError, ShapeError
from rlx.ir import DType, Graph, Shape
from rlx.ir.ops.dequant import DequantMatMul
from rlx.kernels import quant as quant_kernels
from rlx.runtime import Session
from tests.support import build_op_graph, run_op

GGUF_TYPES = {
    Encoding.GGUF_Q8_0: gguf.GGMLQuantizationType.Q8_0,
    Encoding.GGUF_TQ2_0: gguf.GGMLQuantizationType.TQ2_0,
}
RNG = np.random.default_rng(5)


def _weight(scheme: Encoding, n: int, k: int, ternary: bool = False):
    """The packed [N, K] stream (made by gguf) and the [K, N] float64 W gguf decodes from it."""
    if ternary:
        wt = RNG.integers(-1, 2, (n, k)).astype(np.float32)
    else:
        wt = RNG.standard_normal((n, k)).astype(np.float32)
    packed = quantize(wt.reshape(-1), GGUF_TYPES[scheme])
    w = dequantize(packed, GGUF_TYPES[scheme]).astype(np.float64).reshape(n, k).T
    return packed, w


def _check(out: np.ndarray, x: np.ndarray, w: np.ndarray, rtol: float = 2e-5) -> None:
    want = x.astype(np.float64) @ w
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=rtol,
                               atol=rtol * 10 * max(1.0, float(np.abs(want).max(initial=0))))


CASES = [  # x shape, n: N * K fills whole blocks of both schemes unless marked
    ((4, 256), 8),       # K a multiple of both blocks
    ((5, 784), 64),      # K = 24.5 Q8_0 blocks: blocks straddle rows in both schemes
    ((2, 3, 96), 8),     # batched; 96 is 3 Q8_0 blocks, TQ2_0 blocks straddle rows
    ((2, 2, 1, 48), 16),
    ((96,), 8),          # 1-D x: out is [N]
    ((0, 256), 4),       # no rows
]


@pytest.mark.parametrize("scheme", GGUF_TYPES, ids=str)
@pytest.mark.parametrize("x_shape, n", CASES)
def test_matches_numpy(scheme, x_shape, n):
    packed, w = _weight(scheme, n, x_shape[-1])
    x = RNG.standard_normal(x_shape).astype(np.float32)
    (out,) = run_op(DequantMatMul(scheme, n), [x, packed], constant=[False, True])
    assert out.shape == (*x_shape[:-1], n)
    _check(out, x, w)


@pytest.mark.parametrize("x_shape, n", [((3, 40), 4), ((2, 1, 20), 8)])
def test_q8_0_blocks_straddling_rows(x_shape, n):
    packed, w = _weight(Encoding.GGUF_Q8_0, n, x_shape[-1])
    x = RNG.standard_normal(x_shape).astype(np.float32)
    (out,) = run_op(DequantMatMul(Encoding.GGUF_Q8_0, n), [x, packed], constant=[False, True])
    _check(out, x, w)


def test_ternary_weight_is_exact():
    packed, w = _weight(Encoding.GGUF_TQ2_0, 32, 784, ternary=True)
    x = RNG.integers(-8, 8, (6, 784)).astype(np.float32)  # integer sums: exact in float32
    (out,) = run_op(DequantMatMul(Encoding.GGUF_TQ2_0, 32), [x, packed],
                    constant=[False, True])
    np.testing.assert_array_equal(out, x.astype(np.float64) @ w)


@pytest.mark.parametrize("dtype, rtol", [
    (np.float64, 1e-12), (np.float16, 2e-3), (ml_dtypes.bfloat16, 1e-2),
])
def test_output_keeps_x_dtype(dtype, rtol):
    packed, w = _weight(Encoding.GGUF_Q8_0, 8, 64)
    x = RNG.standard_normal((3, 64)).astype(dtype)
    (out,) = run_op(DequantMatMul(Encoding.GGUF_Q8_0, 8), [x, packed], constant=[False, True])
    assert out.dtype == np.dtype(dtype)
    _check(out, x, w, rtol=rtol)


def _compiled(scheme: Encoding, n: int, k: int, packed_constant: bool = True):
    packed, w = _weight(scheme, n, k)
    x = np.zeros((2, k), np.float32)
    g, _ = build_op_graph(DequantMatMul(scheme, n), [x, packed], constant=[False, packed_constant])
    return Session().compile(g), packed, w


def test_constant_weight_is_decoded_once(monkeypatch):
    calls = []
    real_decode = quant_kernels.decode

    def counting_decode(*args, **kwargs):
        calls.append(args)
        return real_decode(*args, **kwargs)

    monkeypatch.setattr(quant_kernels, "decode", counting_decode)
    compiled, _, w = _compiled(Encoding.GGUF_TQ2_0, 16, 256)
    for _ in range(3):
        x = RNG.standard_normal((2, 256)).astype(np.float32)
        _check(compiled.run({"in0": x})[0], x, w)
    assert len(calls) == 1


def test_weights_past_the_cache_budget_are_decoded_on_each_call(monkeypatch):
    """A model whose decoded weights exceed the budget runs in the memory of its packed
    bytes: what does not fit is decoded per call, and the results are the same."""
    calls = []
    real_decode = quant_kernels.decode

    def counting_decode(*args, **kwargs):
        calls.append(args)
        return real_decode(*args, **kwargs)

    monkeypatch.setattr(quant_kernels, "decode", counting_decode)
    n, k = 16, 256
    monkeypatch.setattr(quant_kernels, "DECODED_CACHE_BYTES", n * k * 4)  # one weight
    monkeypatch.setattr(quant_kernels, "_DECODED", {})  # other tests' weights may be kept
    g = Graph("two")
    x = g.input("x", Shape([2, k]))
    weights = [_weight(Encoding.GGUF_Q8_0, n, k) for _ in range(2)]
    outs = [g.add_node(DequantMatMul(Encoding.GGUF_Q8_0, n),
                       [x, g.constant(packed, name=f"w{i}")])
            for i, (packed, _) in enumerate(weights)]
    g.set_outputs(outs)
    compiled = Session().compile(g)
    for _ in range(3):
        feed = RNG.standard_normal((2, k)).astype(np.float32)
        for out, (_, w) in zip(compiled.run({"x": feed}), weights):
            _check(out, feed, w)
    assert len(calls) == 1 + 3  # the first weight once, kept; the second on every run


def test_writeable_input_weight_is_never_stale():
    compiled, packed, w = _compiled(Encoding.GGUF_Q8_0, 8, 64, packed_constant=False)
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    packed = packed.copy()
    _check(compiled.run({"in0": x, "in1": packed})[0], x, w)
    packed[2:34] = 0  # same array object, new contents: the first block's codes are now 0
    w = dequantize(packed, GGUF_TYPES[Encoding.GGUF_Q8_0]).astype(np.float64)
    _check(compiled.run({"in0": x, "in1": packed})[0], x, w.reshape(8, 64).T)


def test_threads_share_one_compiled_graph():
    compiled, _, w = _compiled(Encoding.GGUF_TQ2_0, 64, 784)
    xs = [RNG.standard_normal((2, 784)).astype(np.float32) for _ in range(4)]
    outs: list = [None] * len(xs)

    def run(i: int) -> None:
        for _ in range(5):
            outs[i] = compiled.run({"in0": xs[i]})[0]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, out in zip(xs, outs):
        _check(out, x, w)


@pytest.mark.parametrize("x, packed, message", [
    (Shape((4, 64)), Shape((34 * 15,), DType.U8), "510 bytes of gguf_q8_0 .* \\[8, 64\\]"),
    (Shape((4, 64)), Shape((35,), DType.U8), "35 bytes of gguf_q8_0"),
    (Shape((4, 64)), Shape((34 * 16,), DType.F32), "packed weight must be 1-D u8"),
    (Shape((4, 64)), Shape((2, 34 * 8), DType.U8), "packed weight must be 1-D u8"),
    (Shape((4, 64), DType.I32), Shape((34 * 16,), DType.U8), "x must be floating point"),
])
def test_infer_errors(x, packed, message):
    with pytest.raises(ShapeError, match=message):
        DequantMatMul(Encoding.GGUF_Q8_0, 8).infer([x, packed])


def test_infer_symbolic_k_and_runtime_mismatch():
    packed, w = _weight(Encoding.GGUF_Q8_0, 8, 64)
    g = Graph("symbolic_k")
    x_id = g.input("x", Shape(("m", "k"), DType.F32))
    node = g.add_node(DequantMatMul(Encoding.GGUF_Q8_0, 8), [x_id, g.constant(packed)])
    assert g.node(node).shape == Shape(("m", 8), DType.F32)
    g.set_outputs([node])
    compiled = Session().compile(g)
    x = RNG.standard_normal((3, 64)).astype(np.float32)
    _check(compiled.run({"x": x})[0], x, w)
    with pytest.raises(KernelError, match="544 bytes of gguf_q8_0 do not hold a \\[8, 32\\]"):
        compiled.run({"x": np.ones((3, 32), np.float32)})
