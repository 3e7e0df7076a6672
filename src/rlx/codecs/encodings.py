"""The closed set of weight encodings, by the names files store, with their block layouts.

`encode`/`decode` dispatch on an `Encoding`, so callers (bake, artifact readers, the runtime)
never switch on encoding names themselves.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from rlx.enums import parse_enum
from rlx.errors import BakeError
from rlx.record import dataclass

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from rlx.codecs._blocks import Layout
    from rlx.codecs.mlx import MlxScheme

__all__ = ["Encoding", "encode", "decode", "encoded_nbytes"]


class Encoding(enum.Enum):
    """How a weight's values are stored; the value is the string files carry."""

    F32 = "f32"
    F16 = "f16"
    BF16 = "bf16"
    GGUF_Q8_0 = "gguf_q8_0"
    GGUF_TQ2_0 = "gguf_tq2_0"
    Q8_F32 = "q8_f32"  # rlx's: int8 codes, float32 block scales (weights on an int8 grid)
    Q9_0 = "q9_0"  # rlx's: 9-bit codes, f16 block scales (rlx.codecs.wide)
    Q10_0 = "q10_0"
    Q11_0 = "q11_0"
    Q12_0 = "q12_0"
    # MLX quantized codes (rlx.codecs.mlx): decoding needs the scales (and affine biases)
    MLX_AFFINE_2_32 = "mlx_affine/2/32"
    MLX_AFFINE_2_64 = "mlx_affine/2/64"
    MLX_AFFINE_2_128 = "mlx_affine/2/128"
    MLX_AFFINE_3_32 = "mlx_affine/3/32"
    MLX_AFFINE_3_64 = "mlx_affine/3/64"
    MLX_AFFINE_3_128 = "mlx_affine/3/128"
    MLX_AFFINE_4_32 = "mlx_affine/4/32"
    MLX_AFFINE_4_64 = "mlx_affine/4/64"
    MLX_AFFINE_4_128 = "mlx_affine/4/128"
    MLX_AFFINE_6_32 = "mlx_affine/6/32"
    MLX_AFFINE_6_64 = "mlx_affine/6/64"
    MLX_AFFINE_6_128 = "mlx_affine/6/128"
    MLX_AFFINE_8_32 = "mlx_affine/8/32"
    MLX_AFFINE_8_64 = "mlx_affine/8/64"
    MLX_AFFINE_8_128 = "mlx_affine/8/128"
    MLX_MXFP4 = "mlx_mxfp4/32"
    MLX_MXFP8 = "mlx_mxfp8/32"
    MLX_NVFP4 = "mlx_nvfp4/16"

    @classmethod
    def parse(cls, text: str) -> Encoding:
        scheme = _mlx_scheme(text)  # also "mlx_mxfp4" without its group size
        return parse_enum(cls, scheme.label if scheme is not None else text, lambda t: BakeError(
            f"unknown weight encoding {t!r}; expected one of {', '.join(e.value for e in cls)}"),
            exact=True)  # files store exact names: 'F32' is not one

    @property
    def block_size(self) -> int:
        """Values per block (1 for plain floats)."""
        return _codec(self).layout.block_size

    @property
    def block_bytes(self) -> int:
        """Bytes per block."""
        return _codec(self).layout.block_bytes

    @property
    def is_block_quantized(self) -> bool:
        """Values stored in blocks: every encoding but the plain floats (said without the
        codec, whose module loads only when the encoding is used)."""
        return self not in (Encoding.F32, Encoding.F16, Encoding.BF16)

    @property
    def is_mlx(self) -> bool:
        """Codes whose decoding needs per-group scales (and biases) from other tensors."""
        return self.value.startswith("mlx_")

    @property
    def label(self) -> str:
        """The name files and graphs store (the value)."""
        return self.value

    @property
    def short_name(self) -> str:
        """The name reports print: GGUF's own type name (`Q8_0`), the value upper-cased else."""
        return self.value.removeprefix("gguf_").upper()

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class _Codec:
    layout: Layout
    encode: Callable[[ArrayLike], np.ndarray]
    decode: Callable[..., np.ndarray]
    encode_searched: Callable[..., np.ndarray] | None = None  # scales searched


_CODECS: dict[Encoding, _Codec] = {}
"""The codecs used so far: each is made on first use, its module imported then (a file of
float weights never imports the quantisers, nor MLX's label parser)."""


def _mlx_scheme(text: str) -> MlxScheme | None:
    if not text.startswith("mlx_"):  # no other label names an MLX scheme
        return None
    from rlx.codecs.mlx import mlx_scheme

    return mlx_scheme(text)


def _make_codec(encoding: Encoding) -> _Codec:
    if encoding.is_mlx:
        return _mlx_codec(encoding)
    if encoding in (Encoding.F32, Encoding.F16, Encoding.BF16):
        from rlx.codecs import floats

        return {Encoding.F32: _Codec(floats.F32.layout, floats.encode_f32, floats.decode_f32),
                Encoding.F16: _Codec(floats.F16.layout, floats.encode_f16, floats.decode_f16),
                Encoding.BF16: _Codec(floats.BF16.layout, floats.encode_bf16, floats.decode_bf16),
                }[encoding]
    if encoding is Encoding.GGUF_Q8_0:
        from rlx.codecs import q8_0

        return _Codec(q8_0.LAYOUT, q8_0.quantize_q8_0, q8_0.dequantize_q8_0,
                      partial(q8_0.quantize_q8_0, searched=True))
    if encoding is Encoding.GGUF_TQ2_0:
        from rlx.codecs import tq2_0

        return _Codec(tq2_0.LAYOUT, tq2_0.quantize_tq2_0, tq2_0.dequantize_tq2_0)
    if encoding in (Encoding.Q9_0, Encoding.Q10_0, Encoding.Q11_0, Encoding.Q12_0):
        from rlx.codecs import wide

        codes = wide.BY_NAME[encoding.value]
        return _Codec(codes.layout, codes.quantize, codes.dequantize,
                      partial(codes.quantize, searched=True))
    from rlx.codecs import q8_f32

    return _Codec(q8_f32.LAYOUT, q8_f32.quantize_q8_f32, q8_f32.dequantize_q8_f32)


def _mlx_codec(encoding: Encoding) -> _Codec:
    from rlx.codecs import mlx

    scheme = mlx.mlx_scheme(encoding.value)
    assert scheme is not None, encoding  # every MLX encoding's value is a scheme's label

    def refuse(values: ArrayLike) -> np.ndarray:
        raise BakeError(f"rlx reads {scheme.label} weights but does not quantize to it")

    def decode_codes(data: object, count: int | None = None, **parts) -> np.ndarray:
        return mlx.decode_mlx(scheme, data, count, **parts)

    return _Codec(scheme.layout, refuse, decode_codes)


def _codec(encoding: Encoding | str) -> _Codec:
    key = encoding if isinstance(encoding, Encoding) else Encoding.parse(encoding)
    codec = _CODECS.get(key)
    if codec is None:
        codec = _CODECS[key] = _make_codec(key)
    return codec


def encoded_nbytes(encoding: Encoding | str, count: int) -> int:
    """Bytes that `count` values take in `encoding` (a whole number of blocks, or BakeError)."""
    return _codec(encoding).layout.nbytes(count)


def encode(encoding: Encoding | str, values: ArrayLike, searched: bool = False,
           importance: ArrayLike | None = None) -> np.ndarray:
    """`values` flattened row-major and encoded, as flat uint8; `searched`: with
    error-minimising block scales where the encoding has a search (Q8_0, q9_0..q12_0:
    `rlx.codecs.scale_search`; the error weighted by `importance`, one a value in the same
    order, if given), as it is elsewhere."""
    codec = _codec(encoding)
    if searched and codec.encode_searched is not None:
        return codec.encode_searched(values, importance=importance)
    return codec.encode(values)


def decode(encoding: Encoding | str, data: object, count: int | None = None,
           **parts: np.ndarray) -> np.ndarray:
    """The flat values of `data`: float32 for block encodings, the float's own dtype else.

    MLX codes need their group `scales=` (and, for affine, `biases=`)."""
    return _codec(encoding).decode(data, count, **parts)
