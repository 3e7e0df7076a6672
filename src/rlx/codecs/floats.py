"""Plain float encodings `f32`, `f16`, `bf16`: one value per item, little-endian on any host.

Encoding rounds to nearest even (numpy's casts; bf16 through `ml_dtypes`). Decoding returns
the values in their own dtype, as a view of the buffer where the host is little-endian.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rlx.codecs._blocks import Layout
from rlx.record import dataclass

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["encode_f32", "decode_f32", "encode_f16", "decode_f16", "encode_bf16", "decode_bf16"]


@dataclass(frozen=True)
class _FloatFormat:
    """A float type stored as the little-endian bytes of its bit pattern (`bits`)."""

    layout: Layout
    bits: np.dtype  # unsigned int of the same width; byte order is handled on these
    float_dtype: np.dtype | None  # None: ml_dtypes' bfloat16, imported on first use

    @property
    def dtype(self) -> np.dtype:
        if self.float_dtype is not None:
            return self.float_dtype
        import ml_dtypes  # ~8 ms; most files hold no bf16

        return np.dtype(ml_dtypes.bfloat16)

    def encode(self, values: ArrayLike) -> np.ndarray:
        # a fresh array: the encoding must not alias (and later see changes to) the input;
        # values beyond the type's range round to +-inf, the IEEE result, not worth a warning
        with np.errstate(over="ignore"):
            arr = np.array(values, dtype=self.dtype, order="C").reshape(-1)
        wire = self.bits.newbyteorder("<")
        return arr.view(self.bits).astype(wire, copy=False).view(np.uint8)

    def decode(self, data: object, count: int | None) -> np.ndarray:
        wire = self.bits.newbyteorder("<")
        raw = self.layout.byte_blocks(data, count)
        return raw.view(wire).astype(self.bits, copy=False).view(self.dtype).reshape(-1)


F32 = _FloatFormat(Layout("f32", 1, 4), np.dtype(np.uint32), np.dtype(np.float32))
F16 = _FloatFormat(Layout("f16", 1, 2), np.dtype(np.uint16), np.dtype(np.float16))
BF16 = _FloatFormat(Layout("bf16", 1, 2), np.dtype(np.uint16), None)


def encode_f32(values: ArrayLike) -> np.ndarray:
    """`values` flattened row-major as little-endian float32 bytes (flat uint8)."""
    return F32.encode(values)


def decode_f32(data: object, count: int | None = None) -> np.ndarray:
    """Float32 values of `data` (exactly `count` of them when given)."""
    return F32.decode(data, count)


def encode_f16(values: ArrayLike) -> np.ndarray:
    """`values` flattened row-major as little-endian float16 bytes (flat uint8)."""
    return F16.encode(values)


def decode_f16(data: object, count: int | None = None) -> np.ndarray:
    """Float16 values of `data` (exactly `count` of them when given)."""
    return F16.decode(data, count)


def encode_bf16(values: ArrayLike) -> np.ndarray:
    """`values` flattened row-major as little-endian bfloat16 bytes (flat uint8)."""
    return BF16.encode(values)


def decode_bf16(data: object, count: int | None = None) -> np.ndarray:
    """Bfloat16 (`ml_dtypes.bfloat16`) values of `data` (exactly `count` of them when given)."""
    return BF16.decode(data, count)
