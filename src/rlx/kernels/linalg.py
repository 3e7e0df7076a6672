"""MatMul kernels (BLAS through NumPy); DequantMatMul lives with the codecs' use.

f16/bf16 operands are multiplied in float32 and rounded once: NumPy has no BLAS for f16
(a slow loop) and no einsum loop at all for bf16.

A float32 MatMul marked `mlas_blocks` sums its K axis in onnxruntime's blocks (`stride_k`),
each block one BLAS product, the blocks' sums added in order, as MLAS, onnxruntime's SGEMM,
works through K. A quantised graph turns a product one rounding away into a whole
quantisation step that the rest of the model amplifies (minilm-l3 static-qdq: cosine
0.991-0.992 with onnxruntime on 3 of 12 feeds in one product over K, >= 0.999992 on all 12
in blocks). It costs 3-28% of a product's time at one thread (more blocks, more sums), so
unmarked products stay one BLAS call.
"""

from __future__ import annotations

import numpy as np

from rlx.ir.ops.linalg import MatMul
from rlx.kernels.elementwise import widen_half
from rlx.kernels.products import matrix_product
from rlx.kernels.registry import staged

__all__ = ["build_matmul", "stride_k"]

_STRIDE = 128  # MLAS_SGEMM_STRIDEN and MLAS_SGEMM_STRIDEK
_MIN_STRIDE_N = 16


def stride_k(n: int) -> int:
    """How many K terms MLAS sums per block for a product N columns wide: 128, doubled
    each time its N stride (also 128) halves to fit a narrower B (down to 16)."""
    k, stride_n = _STRIDE, _STRIDE
    while stride_n > _MIN_STRIDE_N and stride_n // 2 >= n:
        k, stride_n = k * 2, stride_n // 2
    return k


@staged(MatMul, shared=True)
def build_matmul(node, compile):
    """The output dtype and whether K runs in MLAS's blocks, read once per node: per call
    they cost ~0.4 us of a small product's ~1.8. Two matrices multiply by
    `matrix_product` (`ndarray.dot` for a small product: less setup)."""
    dtype = node.shape.dtype.numpy
    blocks = node.op.mlas_blocks and dtype == np.float32

    def step(a, b):
        a, b = widen_half(a), widen_half(b)
        if blocks:
            k = stride_k(b.shape[-1] if b.ndim > 1 else 1)
            if a.shape[-1] > k:
                return _in_blocks(a, b, k)
        y = matrix_product(a, b) if a.ndim == 2 == b.ndim else np.matmul(a, b)
        return y if type(y) is np.ndarray and y.dtype == dtype else np.asarray(y, dtype=dtype)

    return step


def _in_blocks(a: np.ndarray, b: np.ndarray, step: int) -> np.ndarray:
    """a @ b as one product per `step` terms of K, the products added in order."""
    k = a.shape[-1]
    lead = None
    if b.ndim == 2 and a.ndim > 2:  # one GEMM over all rows, as onnxruntime does
        lead, a = a.shape[:-1], a.reshape(-1, k)
    y = np.matmul(a[..., :step], _rows(b, 0, step))
    part = np.empty_like(y)
    for start in range(step, k, step):
        np.matmul(a[..., start:start + step], _rows(b, start, start + step), out=part)
        y += part
    return y if lead is None else y.reshape(*lead, y.shape[-1])


def _rows(b: np.ndarray, start: int, stop: int) -> np.ndarray:
    """b's K rows start:stop (K is b's first axis when b is a vector, else its second-last)."""
    return b[start:stop] if b.ndim == 1 else b[..., start:stop, :]
