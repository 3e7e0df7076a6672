"""Padded-row streams: byte-exact with the `gguf` package quantising the zero-padded matrix;
the tiled transpose; row exponents (powers of two checked in float64 and Python's
math.frexp)."""

from __future__ import annotations

import math

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize, quantize

from rlx.codecs import (
    decode_rows,
    encode_rows,
    padded_length,
    row_exponents,
    scale_rows,
    transposed,
)

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


def test_row_exponents_put_each_row_max_in_half_to_one():
    rng = np.random.default_rng(5)
    spread = np.exp(rng.uniform(np.log(1e-6), np.log(1e5), 40))  # folded BatchNorm ranges
    m = (rng.standard_normal((40, 9)) * spread[:, None]).astype(np.float32)
    m[3] = 0  # a dead channel
    m[7, 2] = 2.0 ** 10  # a power of two: 2^10 = 0.5 x 2^11
    exps = row_exponents(m)
    assert exps.dtype == np.int8
    for row, e in zip(m, exps, strict=True):
        amax = float(np.abs(row.astype(np.float64)).max())
        assert int(e) == (math.frexp(amax)[1] if amax else 0)
        if amax:
            assert 0.5 <= amax / 2.0 ** int(e) < 1
    normalised = scale_rows(m, -exps.astype(np.int32))
    assert normalised.dtype == np.float32
    # a power of two scales exactly: the float64 product rounds to the same float32
    np.testing.assert_array_equal(normalised, m.astype(np.float64) * 2.0 ** -exps[:, None])
    np.testing.assert_array_equal(scale_rows(normalised, exps), m)
