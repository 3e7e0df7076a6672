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

import _thread
import weakref
from collections.abc import Callable

import numpy as np

from rlx.codecs import Encoding, decode
from rlx.errors import KernelError, RlxError
from rlx.ir.graph import Node
from rlx.ir.ops.dequant import DequantMatMul
from rlx.kernels.registry import builder

__all__ = ["DECODED_CACHE_BYTES", "build_dequant_matmul", "dense_weight", "kept"]


@builder(DequantMatMul)
def build_dequant_matmul(node: Node, compile):
    """A step that decodes each packed buffer once (see `_decoded`), not once per call."""
    assert isinstance(node.op, DequantMatMul)  # the builder registered for DequantMatMul
    encoding = node.op.scheme
    out_dtype = node.tensor_shape.dtype.numpy
    # f16/bf16 compute in float32 (numpy has no fast half GEMM); f64 stays f64
    compute = np.dtype(np.float64 if out_dtype == np.float64 else np.float32)

    def step(x: np.ndarray, packed: np.ndarray, *groups: np.ndarray) -> np.ndarray:
        weight = _decoded(node, encoding, packed, x.shape[-1], compute, groups)
        out = np.matmul(x.astype(compute, copy=False), weight)
        return out.astype(out_dtype, copy=False)

    return step


DECODED_CACHE_BYTES = 1 << 30
"""How many bytes of decoded (or centred integer) weights are kept, for every graph of the
process together."""

# (address, bytes) of each input, then the maker's key (for a decoded weight: encoding, n,
# k, dtype) -> the array made from them, for read-only arrays; an entry lives as long as
# every array that made it (a weakref callback drops it), so the address cannot be reused
# by other bytes meanwhile. Only read-only arrays (constants) are cached: a writeable
# input could change between runs.
_DECODED: dict[tuple, np.ndarray] = {}
_DECODED_LOCK = _thread.allocate_lock()  # `_thread`: the load path needs no `threading`


def _decoded(node: Node, encoding: Encoding, packed: np.ndarray, k: int,
             dtype: np.dtype, groups: tuple[np.ndarray, ...] = ()) -> np.ndarray:
    assert isinstance(node.op, DequantMatMul)
    arrays = (packed, *groups)  # MLX codes come with their scales (and biases)
    weight = kept(arrays, (encoding, node.op.n, k, dtype), node.op.n * k * dtype.itemsize,
                  lambda: dense_weight(node, encoding, packed, k, dtype, groups))
    if weight is None:  # decoded per call
        return dense_weight(node, encoding, packed, k, dtype, groups, contiguous=False)
    return weight


def kept(arrays: tuple[np.ndarray, ...], key: tuple, nbytes: int,
         make: Callable[[], np.ndarray]) -> np.ndarray | None:
    """`make()`, computed from `arrays` (and `key`) once and kept (read-only) while they
    live; None when any of them is writeable or not contiguous (it could change between
    runs) or the result's `nbytes` would take the kept arrays past `DECODED_CACHE_BYTES`."""
    if any(a.flags.writeable or not a.flags.c_contiguous for a in arrays):
        return None
    full = (*((a.__array_interface__["data"][0], a.nbytes) for a in arrays), *key)
    value = _DECODED.get(full)
    if value is None:
        if sum(w.nbytes for w in list(_DECODED.values())) + nbytes > DECODED_CACHE_BYTES:
            return None
        value = np.asarray(make())  # two threads may both make it; the first stored wins
        value.flags.writeable = False  # shared: no step may write into it
        with _DECODED_LOCK:
            if full not in _DECODED:
                _DECODED[full] = value
                for array in arrays:
                    weakref.finalize(array, _DECODED.pop, full, None)
            value = _DECODED[full]
    return value


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
