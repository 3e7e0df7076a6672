"""DequantMatMul: `x @ W` where W arrives as a GGUF block stream of W^T, decoded by rlx.codecs.

The packed weight is decoded whole (blocks may straddle rows of K) into a dense matrix and
multiplied with BLAS. For small batches decoding costs far more than the product, and a
baked weight is the same read-only constant array on every run, so each node keeps its last
decoded matrix (the memory of the dense f32 weight, traded for speed).
"""

from __future__ import annotations

import numpy as np

from rlx.codecs import Encoding, decode
from rlx.errors import KernelError
from rlx.ir.graph import Node
from rlx.ir.ops.linalg import DequantMatMul
from rlx.kernels.registry import builder

__all__ = ["build_dequant_matmul"]


@builder(DequantMatMul)
def build_dequant_matmul(node: Node, compile):
    """A step that decodes the packed weight once per packed array, not once per call.

    The cache is one `(packed, weight)` tuple, replaced whole (an atomic swap), so threads
    sharing the step see either entry; two threads may both decode on a miss, harmlessly.
    Keeping `packed` alive keeps its identity from being reused by another array. Only
    read-only arrays (constants) are cached: a writeable input could change between runs.
    """
    assert isinstance(node.op, DequantMatMul)
    encoding: Encoding = node.op.scheme  # QuantScheme is the codecs' Encoding
    out_dtype = node.tensor_shape.dtype.numpy
    # f16/bf16 compute in float32 (numpy has no fast half GEMM); f64 stays f64
    compute = np.dtype(np.float64 if out_dtype == np.float64 else np.float32)
    cache: tuple[np.ndarray | None, np.ndarray | None] = (None, None)

    def step(x: np.ndarray, packed: np.ndarray) -> np.ndarray:
        nonlocal cache
        key, weight = cache
        # a different K with the same bytes cannot fit: _dense_weight reports it
        if key is not packed or weight is None or weight.shape[0] != x.shape[-1]:
            weight = _dense_weight(node, encoding, packed, x.shape[-1], compute)
            if not packed.flags.writeable:
                cache = (packed, weight)
        out = np.matmul(x.astype(compute, copy=False), weight)
        return out.astype(out_dtype, copy=False)

    return step


def _dense_weight(node: Node, encoding: Encoding, packed: np.ndarray, k: int,
                  dtype: np.dtype) -> np.ndarray:
    """The `[K, N]` weight, C-contiguous like the dense weight it replaces (the transposed
    view of the decoded `[N, K]` stream made BLAS ~15% slower on the demo MLP)."""
    assert isinstance(node.op, DequantMatMul)
    n = node.op.n
    if packed.size % encoding.block_bytes or \
            packed.size // encoding.block_bytes * encoding.block_size != n * k:
        raise KernelError(
            f"{node.label}: {packed.size} bytes of {encoding} do not hold a [{n}, {k}] weight"
        )
    return np.ascontiguousarray(decode(encoding, packed).astype(dtype, copy=False)
                                .reshape(n, k).T)
