"""What every codec shares: block layouts, length checks, exact rounding, f16 block scales.

Everything works on whole arrays of blocks at once (one row per block), never block by block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rlx.errors import BakeError
from rlx.record import dataclass

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = [
    "Layout", "as_byte_array", "round_half_away", "block_scale", "inverse_scale",
    "f16_scale_bytes", "f16_scale_values",
]

_F16_LE = np.dtype("<f2")
_F16_MAX = float(np.finfo(np.float16).max)


@dataclass(frozen=True)
class Layout:
    """How an encoding cuts a flat stream of values: `block_size` values take `block_bytes`."""

    name: str
    block_size: int
    block_bytes: int

    def nbytes(self, count: int) -> int:
        """Bytes that `count` values take; `count` must fill whole blocks."""
        if count < 0:
            raise BakeError(f"{self.name}: value count must be >= 0, got {count}")
        if count % self.block_size:
            raise BakeError(
                f"{self.name} needs a multiple of {self.block_size} values, got {count}"
            )
        return count // self.block_size * self.block_bytes

    def value_blocks(self, values: ArrayLike) -> np.ndarray:
        """`values` flattened row-major into float32 blocks, `[blocks, block_size]`."""
        flat = np.asarray(values, dtype=np.float32).reshape(-1)
        self.nbytes(flat.size)  # raises BakeError unless the values fill whole blocks
        return flat.reshape(-1, self.block_size)

    def byte_blocks(self, data: object, count: int | None = None) -> np.ndarray:
        """`data` as `[blocks, block_bytes]` uint8 (a view when it can be).

        With `count`, the data must be exactly the bytes of `count` values; without, any
        whole number of blocks.
        """
        raw = as_byte_array(data)
        if count is not None:
            want = self.nbytes(count)
            if raw.size != want:
                raise BakeError(f"{self.name}: {count} values take {want} bytes, got {raw.size}")
        elif raw.size % self.block_bytes:
            raise BakeError(
                f"{self.name} data must be a multiple of {self.block_bytes} bytes, got {raw.size}"
            )
        return raw.reshape(-1, self.block_bytes)


def as_byte_array(data: Any) -> np.ndarray:
    """Any buffer (bytes, bytearray, memoryview, mmap, numpy array) as flat uint8, no copy."""
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    return np.frombuffer(data, dtype=np.uint8)


def round_half_away(a: np.ndarray) -> np.ndarray:
    """Round `a` in place to the nearest integer, ties away from zero (C `roundf`), exactly.

    `np.round` breaks ties to even, and `trunc(a + 0.5)` is wrong just below .5 (the sum
    rounds up). Splitting off the fractional part is exact in binary floating point, and
    twice it truncates to +-1 exactly when |fraction| >= 0.5.
    """
    whole = np.trunc(a)
    a -= whole
    a *= 2
    np.trunc(a, out=a)
    a += whole
    return a


def block_scale(amax: np.ndarray, divisor: float, name: str, first: int = 0) -> np.ndarray:
    """Per-block float32 scale `amax / divisor`, refusing what an f16 scale cannot hold
    (errors number the blocks from `first`: the blocks may be a slab of a larger stream).

    The gguf package writes such blocks anyway, with garbage codes (NaN input) or an
    infinite scale that dequantises to NaN; a baked weight must not silently turn into that.
    """
    bad = ~np.isfinite(amax)
    if bad.any():
        raise BakeError(f"{name}: block {first + int(np.argmax(bad))} holds a non-finite value")
    scale = amax / np.float32(divisor)
    # f16 rounds to nearest even: from max + half an ulp (65504 + 16) up, a scale becomes inf
    over = scale >= np.float32(_F16_MAX + 16)
    if over.any():
        block = int(np.argmax(over))
        raise BakeError(f"{name}: block {first + block} has max |x| = {float(amax[block]):g}, "
                        "its scale overflows f16")
    return scale


def inverse_scale(scale: np.ndarray) -> np.ndarray:
    """`1 / scale` in float32 (the gguf reference multiplies by it rather than dividing).

    Zero where the scale is 0, and also where the reciprocal overflows: such a scale is far
    below f16's range, is stored as 0, and every code of its block decodes to 0 anyway.
    """
    with np.errstate(divide="ignore", over="ignore"):
        inverse = np.float32(1) / scale
    inverse[~np.isfinite(inverse)] = 0
    return inverse


def f16_scale_bytes(scale: np.ndarray) -> np.ndarray:
    """Float32 scales `[blocks]` rounded to f16 (nearest even), as `[blocks, 2]` bytes."""
    return scale.astype(_F16_LE).view(np.uint8).reshape(-1, 2)


def f16_scale_values(scale_bytes: np.ndarray) -> np.ndarray:
    """`[blocks, 2]` bytes of f16 scales as a float32 column `[blocks, 1]`."""
    return np.ascontiguousarray(scale_bytes).view(_F16_LE).astype(np.float32)
