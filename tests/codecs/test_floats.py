"""Plain float codecs (f32, f16, bf16) and the encoding table, against numpy and ml_dtypes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rlx.codecs import (
    Encoding,
    decode,
    decode_bf16,
    decode_f16,
    decode_f32,
    encode,
    encode_bf16,
    encode_f16,
    encode_f32,
    encoded_nbytes,
    quantize_q8_0,
    quantize_tq2_0,
)
from rlx.errors import BakeError

# values beyond f16's range become inf, as IEEE says; numpy's own casts warn about it
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in cast")
RNG = np.random.default_rng(16)
BF16 = np.dtype(ml_dtypes.bfloat16)
SPECIALS = np.float32([0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, 1e-45, -1e-40, 3.4e38, 65519.0,
                       65520.0, 6e-8, 1.00390625, 1.01171875])
CODECS = {  # name: (encode, decode, numpy dtype of the values, little-endian storage dtype)
    "f32": (encode_f32, decode_f32, np.dtype(np.float32), np.dtype("<f4")),
    "f16": (encode_f16, decode_f16, np.dtype(np.float16), np.dtype("<f2")),
    "bf16": (encode_bf16, decode_bf16, BF16, BF16),  # bf16 has no byte order: host is LE
}


def _values() -> np.ndarray:
    return np.concatenate([SPECIALS, RNG.standard_normal(500).astype(np.float32) * 100])


def _bf16_by_bits(x: np.ndarray) -> np.ndarray:
    """bf16 bit patterns of float32 `x` by integer rounding to nearest even (no NaNs)."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")


@pytest.mark.parametrize("name", CODECS)
def test_encode_matches_numpy_cast(name):
    enc, _, _, stored = CODECS[name]
    x = _values()
    got = enc(x)
    assert got.dtype == np.uint8 and got.ndim == 1
    assert got.tobytes() == x.astype(stored).tobytes()


def test_bf16_rounds_to_nearest_even():
    x = _values()
    assert encode_bf16(x).tobytes() == _bf16_by_bits(x).tobytes()


@pytest.mark.parametrize("enc, value, want", [
    (encode_f32, 1.0, "0000803f"),
    (encode_f16, 1.0, "003c"),
    (encode_bf16, 1.0, "803f"),
    (encode_f16, -65504.0, "fffb"),
    (encode_bf16, 1.00390625, "803f"),  # exact tie between 1 and 1.0078125: even is 1
])
def test_little_endian_bytes(enc, value, want):
    assert enc([value]).tobytes().hex() == want


@pytest.mark.parametrize("name", CODECS)
def test_input_forms_flatten_row_major(name):
    enc, _, _, stored = CODECS[name]
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    want = x.astype(stored).tobytes()
    for form in (x, x.T.copy().T, np.asfortranarray(x), x.astype(">f4"), x.tolist()):
        assert enc(form).tobytes() == want
    assert enc(np.float32(2.0)).tobytes() == np.float32(2).astype(stored).tobytes()
    assert enc(x[:, ::2]).tobytes() == x[:, ::2].astype(stored).tobytes()


@pytest.mark.parametrize("name", CODECS)
def test_encoding_is_a_copy(name):
    enc = CODECS[name][0]
    x = np.ones(4, np.float32)
    data = enc(x)
    before = data.tobytes()
    x[:] = 7
    assert data.tobytes() == before


def test_float64_input_rounds_once_like_numpy():
    x = RNG.standard_normal(1000) * 1e3
    assert encode_f32(x).tobytes() == x.astype("<f4").tobytes()
    assert encode_f16(x).tobytes() == x.astype("<f2").tobytes()
    assert encode_bf16(x).tobytes() == x.astype(BF16).tobytes()


@pytest.mark.parametrize("name", CODECS)
def test_decode_round_trip_from_any_buffer(name):
    enc, dec, dtype, stored = CODECS[name]
    x = _values().astype(dtype)
    data = enc(x)
    for buf in (data, data.tobytes(), bytearray(data.tobytes()), memoryview(data.tobytes())):
        got = dec(buf)
        assert got.dtype == dtype and got.shape == x.shape
        assert got.tobytes() == x.astype(stored).tobytes()  # bit-exact, -0.0 included
    assert dec(data, count=x.size).size == x.size


def test_decode_is_a_view_of_the_buffer():
    data = encode_f32(np.arange(4, dtype=np.float32))
    assert np.shares_memory(decode_f32(data), data)


def test_decode_keeps_nan_payload():
    bits = np.uint32([0x7FC00001, 0xFF800000]).astype("<u4")
    assert decode_f32(bits.tobytes()).view(np.uint32).tolist() == [0x7FC00001, 0xFF800000]


@pytest.mark.parametrize("dec, nbytes, message", [
    (decode_f32, 6, "f32 data must be a multiple of 4 bytes, got 6"),
    (decode_f16, 3, "f16 data must be a multiple of 2 bytes, got 3"),
    (decode_bf16, 1, "bf16 data must be a multiple of 2 bytes, got 1"),
])
def test_decode_bad_length(dec, nbytes, message):
    with pytest.raises(BakeError, match=message):
        dec(bytes(nbytes))


def test_decode_count_must_match():
    with pytest.raises(BakeError, match="f32: 3 values take 12 bytes, got 16"):
        decode_f32(bytes(16), count=3)
    with pytest.raises(BakeError, match="value count must be >= 0, got -1"):
        decode_f16(bytes(2), count=-1)


@settings(max_examples=100, deadline=None)
@given(arrays(np.float32, st.integers(0, 64),
              elements=st.floats(width=32, allow_nan=False, allow_subnormal=True)))
def test_property_casts(x):
    assert decode_f32(encode_f32(x)).tobytes() == x.astype("<f4").tobytes()
    assert encode_f16(x).tobytes() == x.astype("<f2").tobytes()
    assert encode_bf16(x).tobytes() == _bf16_by_bits(x).tobytes()


# the encoding table

@pytest.mark.parametrize("encoding, block_size, block_bytes", [
    (Encoding.F32, 1, 4), (Encoding.F16, 1, 2), (Encoding.BF16, 1, 2),
    (Encoding.GGUF_Q8_0, 32, 34), (Encoding.GGUF_TQ2_0, 256, 66),
])
def test_table(encoding, block_size, block_bytes):
    assert (encoding.block_size, encoding.block_bytes) == (block_size, block_bytes)
    assert Encoding.parse(str(encoding)) is encoding
    assert encoding.is_block_quantized == (block_size > 1)
    count = block_size * 12
    assert encoded_nbytes(encoding, count) == encoded_nbytes(encoding.value, count)
    values = RNG.standard_normal(count).astype(np.float32)
    data = encode(encoding, values)
    assert data.size == encoded_nbytes(encoding, count)
    assert decode(encoding.value, data, count=count).size == count


def test_dispatch_is_the_named_codec():
    x = RNG.standard_normal(256).astype(np.float32)
    assert encode("gguf_q8_0", x).tobytes() == quantize_q8_0(x).tobytes()
    assert encode(Encoding.GGUF_TQ2_0, x).tobytes() == quantize_tq2_0(x).tobytes()
    assert decode("bf16", encode_bf16(x)).dtype == BF16
    assert decode(Encoding.F16, encode_f16(x)).dtype == np.float16


def test_table_errors():
    with pytest.raises(BakeError, match="unknown weight encoding 'q4_k'; expected one of f32"):
        Encoding.parse("q4_k")
    with pytest.raises(BakeError, match="gguf_tq2_0 needs a multiple of 256 values, got 300"):
        encoded_nbytes("gguf_tq2_0", 300)
    with pytest.raises(BakeError, match="unknown weight encoding 'F32'"):
        encoded_nbytes("F32", 4)
    assert encoded_nbytes(Encoding.GGUF_Q8_0, 0) == 0


@pytest.mark.parametrize("encoding", list(Encoding))
def test_block_quantized_means_blocks_of_more_than_one_value(encoding):
    """`is_block_quantized` is said without loading the codec: it agrees with the layout."""
    assert encoding.is_block_quantized == (encoding.block_size > 1)
