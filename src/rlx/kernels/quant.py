"""DequantMatMul: `x @ W` where W arrives as a GGUF block stream of W^T (or MLX codes with
their group scales and biases), decoded by rlx.codecs.

The packed weight is decoded whole (blocks may straddle rows of K) into a dense matrix and
multiplied with BLAS. For small batches decoding costs far more than the product, and a
baked weight is the same read-only constant array on every run, so its decoded matrix is
kept (the memory of the dense f32 weight, traded for speed) - once per packed buffer, shared
by every node and graph that reads it: a cache per node let one packed weight read by many
nodes decode once per node (a 316 KB file reached 209 MiB).

The kept matrices may take `DECODED_CACHE_BYTES` together; past that a weight is decoded on
each call and dropped after it. A model whose dense weights exceed memory (8 GiB of f32
stored as 2.1 GiB of Q8_0) thus runs in the memory of its packed bytes plus that budget,
at the price of a decode per call for what did not fit (0.04 s for a 4096 x 4096 weight).
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from rlx.codecs import Encoding, decode
from rlx.errors import KernelError, RlxError
from rlx.ir.graph import Node
from rlx.ir.ops.linalg import DequantMatMul
from rlx.kernels.registry import builder

__all__ = ["DECODED_CACHE_BYTES", "build_dequant_matmul", "dense_weight"]


@builder(DequantMatMul)
def build_dequant_matmul(node: Node, compile):
    """A step that decodes each packed buffer once (see `_decoded`), not once per call."""
    assert isinstance(node.op, DequantMatMul)  # the builder registered for DequantMatMul
    encoding = Encoding.parse(node.op.scheme.label)
    out_dtype = node.tensor_shape.dtype.numpy
    # f16/bf16 compute in float32 (numpy has no fast half GEMM); f64 stays f64
    compute = np.dtype(np.float64 if out_dtype == np.float64 else np.float32)

    def step(x: np.ndarray, packed: np.ndarray, *groups: np.ndarray) -> np.ndarray:
        weight = _decoded(node, encoding, packed, x.shape[-1], compute, groups)
        out = np.matmul(x.astype(compute, copy=False), weight)
        return out.astype(out_dtype, copy=False)

    return step


DECODED_CACHE_BYTES = 1 << 30
"""How many bytes of decoded weights are kept, for every graph of the process together."""

# (address, bytes) of each input, encoding, n, k, dtype -> decoded weight, for read-only
# packed arrays; an entry lives as long as every array that made it (a weakref callback
# drops it), so the address cannot be reused by other bytes meanwhile. Only read-only
# arrays (constants) are cached: a writeable input could change between runs.
_DECODED: dict[tuple, np.ndarray] = {}
_DECODED_LOCK = threading.Lock()


def _decoded(node: Node, encoding: Encoding, packed: np.ndarray, k: int,
             dtype: np.dtype, groups: tuple[np.ndarray, ...] = ()) -> np.ndarray:
    arrays = (packed, *groups)  # MLX codes come with their scales (and biases)
    if any(a.flags.writeable or not a.flags.c_contiguous for a in arrays):
        return dense_weight(node, encoding, packed, k, dtype, groups)
    assert isinstance(node.op, DequantMatMul)
    key = (*((a.__array_interface__["data"][0], a.nbytes) for a in arrays), encoding,
           node.op.n, k, dtype)
    weight = _DECODED.get(key)
    if weight is None:
        kept = sum(w.nbytes for w in list(_DECODED.values()))
        if kept + node.op.n * k * dtype.itemsize > DECODED_CACHE_BYTES:  # decoded per call
            return dense_weight(node, encoding, packed, k, dtype, groups, contiguous=False)
        # two threads may both decode; the first to store wins
        weight = dense_weight(node, encoding, packed, k, dtype, groups)
        with _DECODED_LOCK:
            if key not in _DECODED:
                _DECODED[key] = weight
                for array in arrays:
                    weakref.finalize(array, _DECODED.pop, key, None)
            weight = _DECODED[key]
    return weight


def dense_weight(node: Node, encoding: Encoding, packed: np.ndarray, k: int,
                 dtype: np.dtype, groups: tuple[np.ndarray, ...] = (),
                 contiguous: bool = True) -> np.ndarray:
    """The `[K, N]` weight, C-contiguous like the dense weight it replaces (the transposed
    view of the decoded `[N, K]` stream made BLAS ~15% slower on the demo MLP), or, for
    one call, that transposed view (copying it would cost four times the decode)."""
    assert isinstance(node.op, DequantMatMul)
    n = node.op.n
    if packed.size % encoding.block_bytes or \
            packed.size // encoding.block_bytes * encoding.block_size != n * k:
        raise KernelError(
            f"{node.label}: {packed.size} bytes of {encoding} do not hold a [{n}, {k}] weight"
        )
    parts = dict(zip(("scales", "biases"), groups))
    try:
        values = decode(encoding, packed, None, **parts)
    except RlxError as err:
        raise KernelError(f"{node.label}: {err}") from None
    weight = values.astype(dtype, copy=False).reshape(n, k).T
    return np.ascontiguousarray(weight) if contiguous else weight
