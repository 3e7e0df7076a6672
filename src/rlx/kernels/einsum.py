"""The Einsum kernel (NumPy's einsum): that of `rlx.ir.ops.einsum`. f16/bf16 operands are
multiplied in float32 and rounded once (NumPy has no einsum loop for bf16)."""

from __future__ import annotations

import numpy as np

from rlx.ir.ops.einsum import Einsum
from rlx.kernels.elementwise import widen_half
from rlx.kernels.registry import kernel

__all__ = ["einsum"]


@kernel(Einsum)
def einsum(node, *operands):
    wide = [widen_half(x) for x in operands]
    out = np.einsum(node.op.equation, *wide, optimize=len(wide) > 2)
    return np.asarray(out, dtype=node.shape.dtype.numpy)
