"""MatMul and Einsum kernels (BLAS through NumPy); DequantMatMul lives with the codecs' use."""

from __future__ import annotations

import numpy as np

from rlx.ir.ops.linalg import Einsum, MatMul
from rlx.runtime.kernels.registry import kernel


@kernel(MatMul)
def matmul(node, a, b):
    return np.matmul(a, b)


@kernel(Einsum)
def einsum(node, *operands):
    return np.asarray(np.einsum(node.op.equation, *operands, optimize=len(operands) > 2),
                      dtype=node.shape.dtype.numpy)
