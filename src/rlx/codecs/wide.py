"""`q10_0` and `q12_0`: rlx's blocks of 32 signed 10- or 12-bit codes with an f16 scale,
the accuracy guard's rungs between Q8_0 and f16.

Each extra bit halves a weight's error and quarters its share of an output's 1 - cosine;
Q8_0 -> f16 buys about 5 bits for 7.5 more bits a value. A detector's sensitive layers
need 2-4 bits more than Q8_0, not 5: on an anchor-free detector, stepping them to f16
spent the bytes that kept the file over 0.30x the exact one.

Block: the f16 scale `d` first, then the 32 codes as offset binary (code + 2^(bits-1)),
packed little-endian bit by bit (value 0's lowest bit is bit 0 of the first code byte).
`d` is max|x| / (2^(bits-1) - 1) rounded UP to f16, and the codes are computed with that
stored scale: with 12-bit codes, rounding the scale to nearest after computing the codes
(as Q8_0 does) would move the largest codes by half a step. Decoded value = code * d.
`searched=True` quantises with error-minimising scales instead (`rlx.codecs.scale_search`,
codes down to -2^(bits-1), which offset binary holds): the same layout and decoder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rlx.codecs._blocks import Layout, block_scale, inverse_scale, round_half_away
from rlx.codecs.scale_search import search_scales
from rlx.errors import BakeError

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["Wide", "Q9_0", "Q10_0", "Q11_0", "Q12_0", "BY_NAME"]

_F16_LE = np.dtype("<f2")
_BLOCK = 32
_SLAB_BLOCKS = 4096  # 128 Ki values: the unpacked bits of a slab stay a few MiB


class Wide:
    """The codec of one code width (`bits`, 9..16)."""

    def __init__(self, name: str, bits: int):
        self.bits = bits
        self.limit = (1 << (bits - 1)) - 1  # codes lie in [-limit, limit]
        self.layout = Layout(name, _BLOCK, 2 + _BLOCK * bits // 8)

    def quantize(self, values: ArrayLike, searched: bool = False,
                 importance: ArrayLike | None = None) -> np.ndarray:
        """`values` (size a multiple of 32) as blocks of `bits`-bit codes (module doc), with
        error-minimising scales when `searched` (weighted by `importance`, one a value, if
        given), a slab of blocks at a time (the bits of a slab are a temporary of 8 bytes a
        bit)."""
        blocks = self.layout.value_blocks(values)
        weights = None if importance is None else self.layout.value_blocks(importance)
        out = np.empty((len(blocks), self.layout.block_bytes), np.uint8)
        for first in range(0, len(blocks), _SLAB_BLOCKS):
            slab = slice(first, first + _SLAB_BLOCKS)
            out[slab] = self._quantize_slab(blocks[slab], first, searched,
                                            None if weights is None else weights[slab])
        return out.reshape(-1)

    def _quantize_slab(self, blocks: np.ndarray, first: int, searched: bool,
                       weights: np.ndarray | None) -> np.ndarray:
        name = self.layout.name
        scale = _f16_at_least(block_scale(np.abs(blocks).max(axis=1), self.limit, name, first),
                              name, first)
        codes = round_half_away(blocks * inverse_scale(scale)[:, None])
        np.clip(codes, -self.limit, self.limit, out=codes)  # 1/d rounded: a hair over
        if searched:
            search_scales(blocks, codes, scale, -self.limit - 1, self.limit, weights)
        out = np.empty((len(blocks), self.layout.block_bytes), np.uint8)
        out[:, :2] = scale.astype(_F16_LE).view(np.uint8).reshape(-1, 2)
        unsigned = (codes.astype(np.int32) + (self.limit + 1)).astype(np.uint16)
        bits = (unsigned[:, :, None] >> np.arange(self.bits, dtype=np.uint16)) & 1
        out[:, 2:] = np.packbits(bits.astype(np.uint8).reshape(len(blocks), -1), axis=1,
                                 bitorder="little")
        return out

    def dequantize(self, data: object, count: int | None = None) -> np.ndarray:
        """Float32 values of a stream (exactly `count` of them when given), a slab of
        blocks at a time."""
        blocks = self.layout.byte_blocks(data, count)
        out = np.empty((len(blocks), _BLOCK), np.float32)
        weights = np.arange(self.bits, dtype=np.int32)
        for first in range(0, len(blocks), _SLAB_BLOCKS):
            slab = blocks[first:first + _SLAB_BLOCKS]
            bits = np.unpackbits(slab[:, 2:], axis=1, bitorder="little")
            bits = bits.reshape(len(slab), _BLOCK, self.bits).astype(np.int32)
            codes = (bits << weights).sum(axis=2) - (self.limit + 1)
            scale = np.ascontiguousarray(slab[:, :2]).view(_F16_LE).astype(np.float32)
            out[first:first + len(slab)] = codes.astype(np.float32) * scale
        return out.reshape(-1)


def _f16_at_least(scale: np.ndarray, name: str, first: int) -> np.ndarray:
    """Each float32 scale rounded up to the nearest f16 (as float32): no code passes the
    limit, and a scale above 0 never becomes 0."""
    with np.errstate(over="ignore"):
        rounded = scale.astype(np.float16)
        low = rounded.astype(np.float32) < scale
        rounded[low] = np.nextafter(rounded[low], np.float16(np.inf))
    if not np.isfinite(rounded).all():
        block = int(np.argmax(~np.isfinite(rounded)))
        raise BakeError(f"{name}: block {first + block}'s scale {float(scale[block]):g} "
                        "overflows f16")
    return rounded.astype(np.float32)


Q9_0 = Wide("q9_0", 9)
Q10_0 = Wide("q10_0", 10)
Q11_0 = Wide("q11_0", 11)
Q12_0 = Wide("q12_0", 12)
BY_NAME = {codes.layout.name: codes for codes in (Q9_0, Q10_0, Q11_0, Q12_0)}
