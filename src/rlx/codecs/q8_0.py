"""GGUF Q8_0: blocks of 32 values in 34 bytes, byte-identical to the `gguf` package.

Block: the f16 scale `d` first, then 32 int8 codes. `d = max|x| / 127` in float32, codes are
`x * (1/d)` (float32, reciprocal as the reference does) rounded half away from zero; the
scale is rounded to f16 only when stored. Dequantised value = code * d.

`searched=True` quantises with error-minimising scales (`rlx.codecs.scale_search`): still
Q8_0 blocks, decoded as any, but no longer the `gguf` package's bytes; the bake uses it
where calibration checks the result (`rlx.passes.weight_encoding`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rlx.codecs._blocks import (
    Layout,
    block_scale,
    f16_scale_bytes,
    f16_scale_values,
    inverse_scale,
    round_half_away,
)
from rlx.codecs.scale_search import search_scales
from rlx.errors import BakeError

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["quantize_q8_0", "dequantize_q8_0", "roundtrip_q8_0_columns"]

LAYOUT = Layout("gguf_q8_0", 32, 34)


def quantize_q8_0(values: ArrayLike, searched: bool = False,
                  importance: ArrayLike | None = None) -> np.ndarray:
    """`values` (any float array, flattened row-major, size a multiple of 32) as Q8_0 bytes,
    with error-minimising scales when `searched` (module doc), the error weighted by
    `importance` (one a value, in the same order) if given.

    A slab of blocks at a time: the temporaries stay in cache, twice as fast on a weight
    of 64 MiB (measured: 0.15 s -> 0.08 s), and the same bytes."""
    blocks = LAYOUT.value_blocks(values)
    weights = None if importance is None else LAYOUT.value_blocks(importance)
    out = np.empty((len(blocks), LAYOUT.block_bytes), dtype=np.uint8)
    for first in range(0, len(blocks), _SLAB_BLOCKS):
        slab = blocks[first:first + _SLAB_BLOCKS]
        scale = block_scale(np.abs(slab).max(axis=1), 127, LAYOUT.name, first)
        codes = round_half_away(slab * inverse_scale(scale)[:, None])
        if searched:
            scale = f16_scale_values(f16_scale_bytes(scale)).reshape(-1)
            search_scales(slab, codes, scale, -128, 127,
                          None if weights is None else weights[first:first + _SLAB_BLOCKS])
        out[first:first + len(slab), :2] = f16_scale_bytes(scale)
        # |x * (1/d)| is 127 + rounding at most
        out[first:first + len(slab), 2:] = codes.astype(np.int8).view(np.uint8)
    return out.reshape(-1)


_SLAB_BLOCKS = 8192  # 1 MiB of float32 values

def dequantize_q8_0(data: object, count: int | None = None) -> np.ndarray:
    """Float32 values of a Q8_0 stream (exactly `count` of them when given)."""
    blocks = LAYOUT.byte_blocks(data, count)
    codes = blocks[:, 2:].view(np.int8).astype(np.float32)
    codes *= f16_scale_values(blocks[:, :2])  # exact: 8-bit code x 11-bit scale fits float32
    return codes.reshape(-1)


def roundtrip_q8_0_columns(matrix: np.ndarray, searched: bool = False,
                           importance: np.ndarray | None = None) -> np.ndarray:
    """`dequantize_q8_0(quantize_q8_0(matrix.T, searched, importance.T))`, transposed back:
    the `[K, N]` matrix in blocks of 32 down its columns (K whole blocks; `importance`
    broadcast to `[K, N]`). Without `searched`, computed without transposing.

    The same float32 operations on the same values, so the same decoded values: what a
    MatMul weight stored as the Q8_0 stream of W^T reads as, for measuring its error.
    Two rows of blocks at a time, so the temporaries stay in cache."""
    k, n = matrix.shape
    if k % LAYOUT.block_size:
        raise BakeError(f"{LAYOUT.name}: {k} rows are not whole blocks of {LAYOUT.block_size}")
    values = np.asarray(matrix, np.float32)
    if searched:
        weights = None if importance is None else \
            np.ascontiguousarray(np.broadcast_to(importance, (k, n)).T, np.float32)
        stream = quantize_q8_0(np.ascontiguousarray(values.T), True, weights)
        return np.ascontiguousarray(dequantize_q8_0(stream).reshape(n, k).T)
    out = np.empty((k, n), np.float32)
    step = 2 * LAYOUT.block_size
    for start in range(0, k, step):
        blocks = values[start:start + step].reshape(-1, LAYOUT.block_size, n)
        first = start // LAYOUT.block_size * n  # numbered as the blocks of the W^T stream
        scale = block_scale(np.abs(blocks).max(axis=1).reshape(-1), 127, LAYOUT.name, first)
        codes = round_half_away(blocks * inverse_scale(scale).reshape(-1, 1, n))
        codes *= f16_scale_values(f16_scale_bytes(scale)).reshape(-1, 1, n)
        out[start:start + step] = codes.reshape(-1, n)
    return out
