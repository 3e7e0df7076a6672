"""MatMul and Einsum kernels (BLAS through NumPy); DequantMatMul lives with the codecs' use.

f16/bf16 operands are multiplied in float32 and rounded once: NumPy has no BLAS for f16
(a slow loop) and no einsum loop at all for bf16.
"""

from __future__ import annotations

import numpy as np

from rlx.ir.ops.linalg import Einsum, MatMul
from rlx.kernels.elementwise import widen_half
from rlx.kernels.registry import kernel

__all__ = ["matmul", "einsum"]


@kernel(MatMul)
def matmul(node, a, b):
    return np.asarray(np.matmul(widen_half(a), widen_half(b)), dtype=node.shape.dtype.numpy)


@kernel(Einsum)
def einsum(node, *operands):
    wide = [widen_half(x) for x in operands]
    out = np.einsum(node.op.equation, *wide, optimize=len(wide) > 2)
    return np.asarray(out, dtype=node.shape.dtype.numpy)
