"""Padded-row streams: byte-exact with the `gguf` package quantising the zero-padded matrix;
the tiled transpose."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize, quantize

from rlx.codecs import decode_rows, encode_rows, padded_length, transposed

Q = gguf.GGMLQuantizationType


@pytest.mark.parametrize("encoding, qtype", [("gguf_q8_0", Q.Q8_0), ("gguf_tq2_0", Q.TQ2_0)])
@pytest.mark.parametrize("rows, length", [(4, 64), (3, 27), (5, 300), (1, 9)])
def test_rows_are_the_gguf_blocks_of_the_padded_matrix(encoding, qtype, rows, length):
    rng = np.random.default_rng(rows * length)
    m = rng.standard_normal((rows, length)).astype(np.float32)
    if qtype is Q.TQ2_0:
        m = np.sign(m) * (rng.random(m.shape) < 0.7)
    padded = padded_length(encoding, length)
    want = quantize(np.pad(m, ((0, 0), (0, padded - length))), qtype)
    stream = encode_rows(encoding, m)
    assert stream.tobytes() == want.tobytes()
    decoded = decode_rows(encoding, stream, rows, length)
    np.testing.assert_array_equal(decoded, dequantize(want, qtype)[:, :length])


def test_f16_rows_need_no_padding():
    m = np.random.default_rng(1).standard_normal((3, 7)).astype(np.float32)
    stream = encode_rows("f16", m)
    assert stream.size == m.size * 2
    np.testing.assert_array_equal(decode_rows("f16", stream, 3, 7), m.astype(np.float16))


@pytest.mark.parametrize("shape", [(1, 1), (3, 700), (600, 257), (512, 512)])
def test_transposed_is_the_transpose_c_contiguous(shape):
    a = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    out = transposed(a)
    assert out.flags.c_contiguous and out.dtype == a.dtype
    np.testing.assert_array_equal(out, a.T)
