"""Weight encodings: plain floats (f32, f16, bf16), GGUF block quantisers (Q8_0, TQ2_0),
rlx's exact int8 grids (q8_f32), its 9-12-bit codes (q9_0..q12_0) and the MLX quantized
formats rlx reads (affine, mxfp4, mxfp8, nvfp4; decode only).

The GGUF ones byte-exact with the `gguf` package; all little-endian on any host and
vectorised over whole streams of blocks. Depends only on numpy and ml_dtypes (imported when
bf16 or float8 values are met; never on `rlx.ir`), so readers and writers of weights can
use it without the graph machinery. Bad lengths raise `BakeError`. Names load on first use
(`rlx._lazy`): reading a file of float weights imports no quantiser.
"""

# ruff: noqa: F401  (imports for type checkers)
from typing import TYPE_CHECKING

from rlx._lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers see: the names, imported as they are
    from rlx.codecs.encodings import Encoding, decode, encode, encoded_nbytes
    from rlx.codecs.floats import (
        decode_bf16,
        decode_f16,
        decode_f32,
        encode_bf16,
        encode_f16,
        encode_f32,
    )
    from rlx.codecs.mlx import MlxScheme, decode_mlx, mlx_scheme
    from rlx.codecs.q8_0 import dequantize_q8_0, quantize_q8_0, roundtrip_q8_0_columns
    from rlx.codecs.q8_f32 import (
        dequantize_q8_f32,
        int8_grid,
        int8_grid_of_pieces,
        int8_grid_of_row_pieces,
        quantize_q8_f32,
        quantize_q8_f32_on_grid,
    )
    from rlx.codecs.rows import (
        decode_rows,
        encode_rows,
        padded_length,
        row_exponents,
        scale_rows,
        transposed,
    )
    from rlx.codecs.tq2_0 import dequantize_tq2_0, is_ternary, quantize_tq2_0

_LAZY = {
    **dict.fromkeys(("Encoding", "encode", "decode", "encoded_nbytes"), "rlx.codecs.encodings"),
    **dict.fromkeys(("encode_f32", "decode_f32", "encode_f16", "decode_f16", "encode_bf16",
                     "decode_bf16"), "rlx.codecs.floats"),
    **dict.fromkeys(("quantize_q8_0", "dequantize_q8_0", "roundtrip_q8_0_columns"),
                    "rlx.codecs.q8_0"),
    **dict.fromkeys(("quantize_q8_f32", "quantize_q8_f32_on_grid", "dequantize_q8_f32",
                     "int8_grid", "int8_grid_of_pieces", "int8_grid_of_row_pieces"),
                    "rlx.codecs.q8_f32"),
    **dict.fromkeys(("quantize_tq2_0", "dequantize_tq2_0", "is_ternary"), "rlx.codecs.tq2_0"),
    **dict.fromkeys(("MlxScheme", "decode_mlx", "mlx_scheme"), "rlx.codecs.mlx"),
    **dict.fromkeys(("encode_rows", "decode_rows", "padded_length", "row_exponents",
                     "scale_rows", "transposed"), "rlx.codecs.rows"),
}
__all__ = [
    "Encoding", "encode", "decode", "encoded_nbytes",
    "encode_f32", "decode_f32", "encode_f16", "decode_f16", "encode_bf16", "decode_bf16",
    "quantize_q8_0", "dequantize_q8_0", "roundtrip_q8_0_columns",
    "quantize_q8_f32", "quantize_q8_f32_on_grid", "dequantize_q8_f32", "int8_grid",
    "int8_grid_of_pieces", "int8_grid_of_row_pieces",
    "quantize_tq2_0",
    "dequantize_tq2_0", "is_ternary",
    "MlxScheme", "decode_mlx", "mlx_scheme",
    "encode_rows", "decode_rows", "padded_length", "row_exponents", "scale_rows",
    "transposed",
]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
