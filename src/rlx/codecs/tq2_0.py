"""GGUF TQ2_0 (ternary): blocks of 256 values in 66 bytes, byte-identical to `gguf`.

Block: 64 bytes of 2-bit codes, then the f16 scale `d = max|x|` (scale last). A code is
`round_half_away(x * (1/d)) + 1` in 0..2; dequantised value = (code - 1) * d. The 256 codes
are packed as two halves of 128: byte m (0..31) of a half holds the codes of positions m,
m+32, m+64, m+96 in bit pairs 0-1, 2-3, 4-5, 6-7. Exactly-ternary input round-trips exactly.
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

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["quantize_tq2_0", "dequantize_tq2_0", "is_ternary"]

LAYOUT = Layout("gguf_tq2_0", 256, 66)
_CODE_BYTES = 64
# codes viewed as [blocks, half, bit pair, byte]: the bit pair is the 32-position group
_SHIFTS = np.array([0, 2, 4, 6], dtype=np.uint8)[:, None]


def quantize_tq2_0(values: ArrayLike) -> np.ndarray:
    """`values` (any float array, flattened row-major, size a multiple of 256) as TQ2_0 bytes."""
    blocks = LAYOUT.value_blocks(values)
    scale = block_scale(np.abs(blocks).max(axis=1), 1, LAYOUT.name)
    codes = round_half_away(blocks * inverse_scale(scale)[:, None])
    codes += 1  # |x * (1/d)| <= 1.0000001 rounds into -1..1, so codes are 0..2
    codes = codes.astype(np.uint8).reshape(len(blocks), 2, 4, 32) << _SHIFTS
    out = np.empty((len(blocks), LAYOUT.block_bytes), dtype=np.uint8)
    out[:, :_CODE_BYTES] = np.bitwise_or.reduce(codes, axis=2).reshape(-1, _CODE_BYTES)
    out[:, _CODE_BYTES:] = f16_scale_bytes(scale)
    return out.reshape(-1)


def dequantize_tq2_0(data: object, count: int | None = None) -> np.ndarray:
    """Float32 values of a TQ2_0 stream (exactly `count` of them when given)."""
    blocks = LAYOUT.byte_blocks(data, count)
    packed = blocks[:, :_CODE_BYTES].reshape(len(blocks), 2, 1, 32)
    values = ((packed >> _SHIFTS) & 3).astype(np.float32).reshape(-1, LAYOUT.block_size)
    values -= 1
    values *= f16_scale_values(blocks[:, _CODE_BYTES:])
    return values.reshape(-1)


def is_ternary(values: ArrayLike) -> bool:
    """Whether every value is exactly -1, 0 or +1 (-0.0 counts as 0; empty is ternary).

    The first values are checked alone first: a weight that is not ternary (nearly every
    one) almost always shows it there, and a bake asks this of every weight."""
    flat = np.asarray(values).reshape(-1)
    return all(bool(np.all((part == 0) | (np.abs(part) == 1)))
               for part in (flat[:_PROBE], flat[_PROBE:]))


_PROBE = 4096
