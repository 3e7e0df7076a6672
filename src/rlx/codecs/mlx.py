"""MLX quantized weights: `mlx_affine/<bits>/<group>`, `mlx_mxfp4/32`, `mlx_mxfp8/32`,
`mlx_nvfp4/16`, decoded exactly as `mlx.core.dequantize` does (checked against it).

A quantized `[N, K]` matrix is three arrays: the codes, the little-endian bit stream of
`bits`-bit values row by row (MLX stores it as uint32 words, `[N, K * bits / 32]`), one scale
per group of `group` values along K (`[N, K / group]`), and for affine one bias per group.

- affine: value = scale * code + bias, code an unsigned `bits`-bit integer; scales and biases
  are floats (the model's dtype: f32, f16 or bf16);
- mxfp4 / nvfp4: the code is an FP4 E2M1 number (sign, 2 exponent bits, 1 mantissa bit),
  times a per-group scale: E8M0 (a power of two, byte `e` is 2^(e-127)) for mxfp4, FP8 E4M3
  for nvfp4 (groups of 16);
- mxfp8: the code is an FP8 E4M3 byte, times an E8M0 scale per group of 32.

The codes stream is what a weight-table row holds (its "block" is one group: `group` values
in `group * bits / 8` bytes); scales and biases travel as their own rows / constants.
"""

from __future__ import annotations

import re

import numpy as np

from rlx.codecs._blocks import Layout, as_byte_array
from rlx.errors import BakeError
from rlx.record import dataclass

__all__ = ["MlxScheme", "mlx_scheme", "decode_mlx", "MLX_LABELS", "AFFINE_BITS",
           "AFFINE_GROUPS"]

AFFINE_BITS = (2, 3, 4, 6, 8)
AFFINE_GROUPS = (32, 64, 128)
_FP_MODES = {"mxfp4": (4, 32), "mxfp8": (8, 32), "nvfp4": (4, 16)}
_E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6],
                 np.float32)
_LABEL = re.compile(r"mlx_(affine)/(\d+)/(\d+)|mlx_(mxfp4|mxfp8|nvfp4)(?:/(\d+))?")


@dataclass(frozen=True)
class MlxScheme:
    mode: str  # affine, mxfp4, mxfp8, nvfp4
    bits: int
    group: int

    @property
    def label(self) -> str:
        if self.mode == "affine":
            return f"mlx_affine/{self.bits}/{self.group}"
        return f"mlx_{self.mode}/{self.group}"

    @property
    def layout(self) -> Layout:
        """The codes stream: one group of values per block."""
        return Layout(self.label, self.group, self.group * self.bits // 8)

    @property
    def has_biases(self) -> bool:
        return self.mode == "affine"

    @property
    def scale_dtype(self) -> np.dtype | None:
        """The scales' storage type for the fp modes (u8 bytes of E8M0 / E4M3); None for
        affine, whose scales are the model's float type."""
        return None if self.mode == "affine" else np.dtype(np.uint8)

    @classmethod
    def of(cls, mode: str, bits: int | None = None, group: int | None = None) -> MlxScheme:
        """The scheme MLX's `quantize(mode, bits, group_size)` makes (its defaults for the
        fp modes), or BakeError for a combination rlx does not read."""
        if mode == "affine":
            bits, group = bits or 4, group or 64
            if bits not in AFFINE_BITS or group not in AFFINE_GROUPS:
                raise BakeError(f"MLX affine quantization with {bits} bits in groups of "
                                f"{group} is not supported (bits {AFFINE_BITS}, groups "
                                f"{AFFINE_GROUPS})")
            return cls(mode, bits, group)
        if mode not in _FP_MODES:
            raise BakeError(f"unknown MLX quantization mode {mode!r}; expected affine, "
                            f"{', '.join(_FP_MODES)}")
        want_bits, want_group = _FP_MODES[mode]
        if (bits or want_bits) != want_bits or (group or want_group) != want_group:
            raise BakeError(f"MLX {mode} uses {want_bits} bits in groups of {want_group}, "
                            f"got {bits} bits in groups of {group}")
        return cls(mode, want_bits, want_group)


def mlx_scheme(text: str) -> MlxScheme | None:
    """The scheme a label names (`mlx_mxfp4` alone means its one group size), else None."""
    match = _LABEL.fullmatch(text)
    if match is None:
        return None
    try:
        if match.group(1):
            return MlxScheme.of("affine", int(match.group(2)), int(match.group(3)))
        group = match.group(5)
        return MlxScheme.of(match.group(4), None, int(group) if group else None)
    except BakeError:
        return None


MLX_LABELS: tuple[str, ...] = (
    *(f"mlx_affine/{b}/{g}" for b in AFFINE_BITS for g in AFFINE_GROUPS),
    "mlx_mxfp4/32", "mlx_mxfp8/32", "mlx_nvfp4/16",
)


def _unpack(codes: np.ndarray, bits: int, count: int) -> np.ndarray:
    """`count` unsigned `bits`-bit values from a little-endian bit stream."""
    raw = as_byte_array(codes)
    if bits == 8:
        return raw[:count]
    if bits == 4:
        out = np.empty(raw.size * 2, np.uint8)
        out[0::2], out[1::2] = raw & 0xF, raw >> 4
        return out[:count]
    if bits == 2:
        out = np.empty((raw.size, 4), np.uint8)
        for i in range(4):
            out[:, i] = (raw >> (2 * i)) & 3
        return out.reshape(-1)[:count]
    # 3 and 6 bits: 8 values in `bits` bytes; unpack those groups through their bits
    chunks = np.unpackbits(raw.reshape(-1, bits), axis=1, bitorder="little")
    weights = (1 << np.arange(bits, dtype=np.uint8)).astype(np.uint8)
    return (chunks.reshape(-1, 8, bits) * weights).sum(-1, dtype=np.uint8).reshape(-1)[:count]


def decode_mlx(scheme: MlxScheme | str, codes: object, count: int | None = None, *,
               scales: np.ndarray | None = None, biases: np.ndarray | None = None,
               ) -> np.ndarray:
    """Float32 values of a codes stream with its per-group `scales` (and affine `biases`),
    flattened row-major (`[N, K]` -> N * K values; groups run along K)."""
    s = scheme if isinstance(scheme, MlxScheme) else mlx_scheme(scheme)
    if s is None:
        raise BakeError(f"unknown MLX scheme {scheme!r}")
    raw = s.layout.byte_blocks(codes, count)
    total = raw.size * 8 // s.bits
    groups = total // s.group
    if scales is None or np.asarray(scales).size != groups:
        raise BakeError(f"{s.label}: {total} values need {groups} scales, got "
                        f"{None if scales is None else np.asarray(scales).size}")
    if s.has_biases and (biases is None or np.asarray(biases).size != groups):
        raise BakeError(f"{s.label}: {total} values need {groups} biases")
    values = _unpack(raw, s.bits, total)
    if s.mode == "affine":
        out = values.astype(np.float32).reshape(groups, s.group)
        out *= _floats(scales).reshape(groups, 1)
        out += _floats(biases).reshape(groups, 1)
        return out.reshape(-1)
    import ml_dtypes  # here, not at import: the runtime's load path needs no float8

    if s.mode == "mxfp8":
        out = values.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    else:
        out = _E2M1[values]
    scale_type = ml_dtypes.float8_e4m3fn if s.mode == "nvfp4" else ml_dtypes.float8_e8m0fnu
    scale = as_byte_array(np.ascontiguousarray(scales)).view(scale_type).astype(np.float32)
    out = out.reshape(groups, s.group) * scale.reshape(groups, 1)
    return out.reshape(-1)


def _floats(values: np.ndarray | None) -> np.ndarray:
    return np.asarray(values).astype(np.float32, copy=False).reshape(-1)
