"""GGUF Q8_0 codec: bytes identical to the `gguf` package's quantizer, values to its dequantizer."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize, quantize
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rlx.codecs import dequantize_q8_0, quantize_q8_0, roundtrip_q8_0_columns
from rlx.errors import BakeError

Q8_0 = gguf.GGMLQuantizationType.Q8_0
BLOCK = 32
RNG = np.random.default_rng(8)


def _normal(blocks: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(blocks * BLOCK) * scale).astype(np.float32)


def _ties(exponent: int, sign: float) -> np.ndarray:
    """Blocks whose scale is exactly 2**exponent, all other values on k + 0.5 steps of it.

    With d a power of two, 1/d is exact, so x * (1/d) lands exactly on the tie k + 0.5.
    """
    d = 2.0 ** exponent
    ties = (np.arange(-127, 127) + 0.5) * d
    ties = np.resize(ties, (9, BLOCK - 1))
    amax = np.full((9, 1), sign * 127 * d)
    return np.concatenate([amax, ties], axis=1).astype(np.float32).reshape(-1)


def _spikes() -> np.ndarray:
    x = _normal(40).reshape(-1, BLOCK)
    x[np.arange(len(x)), RNG.integers(0, BLOCK, len(x))] = RNG.choice([-1e4, 3e4], len(x))
    return x.reshape(-1)


def _negative_maxima() -> np.ndarray:
    x = _normal(40).reshape(-1, BLOCK)
    x[np.arange(len(x)), RNG.integers(0, BLOCK, len(x))] = -(np.abs(x).max(axis=1) + 0.5)
    return x.reshape(-1)


CASES = {
    "normal-1": _normal(1),
    "normal-37": _normal(37),
    "normal-4096": _normal(4096),
    "normal-20000": _normal(20_000),  # quantized in slabs of 8192 blocks: three of them
    "ternary": RNG.integers(-1, 2, 64 * BLOCK).astype(np.float32),
    "zeros": np.zeros(8 * BLOCK, np.float32),
    "negative-zeros": np.full(2 * BLOCK, -0.0, np.float32),
    "constant-rows": np.repeat(
        np.array([1, -1, 0.1, -3.7, 1e-3, 1000, 0.5, -127], np.float32), BLOCK),
    "ties-small": _ties(-6, 1.0),
    "ties-unit": _ties(0, 1.0),
    "ties-negative-max": _ties(3, -1.0),
    "spikes": _spikes(),
    "f16-subnormal-scale": _normal(40, 1e-4),
    "f16-scale-underflows": _normal(40, 1e-7),
    "f32-tiny-values": _normal(8, 1e-36),  # 1/d still finite; smaller: see the test below
    "negative-maxima": _negative_maxima(),
    "near-f16-max": RNG.uniform(-65504, 65504, 8 * BLOCK).astype(np.float32),
    "scale-near-f16-max": np.repeat(np.float32([65500 * 127, -65504 * 127]), BLOCK),
}


def _gguf_bytes(x: np.ndarray) -> bytes:
    return quantize(x, Q8_0).tobytes()


@pytest.mark.parametrize("name", CASES)
def test_bytes_match_gguf(name):
    x = CASES[name]
    assert quantize_q8_0(x).tobytes() == _gguf_bytes(x)


@pytest.mark.parametrize("name", CASES)
def test_dequantize_matches_gguf(name):
    packed = quantize(CASES[name], Q8_0)
    got = dequantize_q8_0(packed.tobytes())
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, dequantize(packed, Q8_0).reshape(-1))


def test_ties_really_are_ties():
    x = _ties(-6, 1.0).astype(np.float64).reshape(-1, BLOCK)
    frac = np.abs(x[:, 1:] / 2.0 ** -6) % 1
    assert np.all(frac == 0.5)


def test_input_is_flattened_row_major_and_cast_to_float32():
    x = RNG.standard_normal((3, 4, 32))  # float64: cast to float32 first, like gguf
    want = _gguf_bytes(x.astype(np.float32).reshape(-1))
    assert quantize_q8_0(x).tobytes() == want
    assert quantize_q8_0(np.asfortranarray(x)).tobytes() == want
    assert quantize_q8_0(x.tolist()).tobytes() == want


def test_reciprocal_overflow_stores_zero_scale_and_codes():
    # max |x| so small that 1/d overflows float32: d is 0 in f16, so every code must be 0
    x = np.zeros(BLOCK, np.float32)
    x[:3] = [1e-40, -2e-38, 3e-39]
    packed = quantize_q8_0(x)
    assert not packed.any()
    np.testing.assert_array_equal(dequantize_q8_0(packed), 0)


def test_empty():
    assert quantize_q8_0(np.zeros(0, np.float32)).size == 0
    assert dequantize_q8_0(b"").size == 0


@pytest.mark.parametrize("size", [1, 31, 33, 100])
def test_bad_value_count(size):
    with pytest.raises(BakeError, match=f"multiple of 32 values, got {size}"):
        quantize_q8_0(np.ones(size, np.float32))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_refused(bad):
    x = np.ones(3 * BLOCK, np.float32)
    x[40] = bad
    with pytest.raises(BakeError, match="block 1 holds a non-finite value"):
        quantize_q8_0(x)


def test_scale_beyond_f16_is_refused():
    quantize_q8_0(np.full(BLOCK, 65519 * 127, np.float32))  # d rounds down to f16 max
    with pytest.raises(BakeError, match="block 0 .* scale overflows f16"):
        quantize_q8_0(np.full(BLOCK, 65520 * 127, np.float32))


def test_bad_byte_count():
    with pytest.raises(BakeError, match="multiple of 34 bytes, got 35"):
        dequantize_q8_0(bytes(35))
    with pytest.raises(BakeError, match="64 values take 68 bytes, got 34"):
        dequantize_q8_0(bytes(34), count=64)
    with pytest.raises(BakeError, match="multiple of 32 values, got 40"):
        dequantize_q8_0(bytes(68), count=40)


def test_count_and_buffer_kinds():
    packed = quantize_q8_0(_normal(3))
    want = dequantize(packed, Q8_0).reshape(-1)
    for buf in (packed, packed.tobytes(), bytearray(packed.tobytes()), memoryview(packed)):
        np.testing.assert_array_equal(dequantize_q8_0(buf, count=96), want)


block_values = st.integers(1, 4).flatmap(lambda n: arrays(
    np.float32, n * BLOCK, elements=st.floats(-1e6, 1e6, width=32, allow_subnormal=True)))


def _scales_fit(x: np.ndarray) -> bool:
    """False where gguf's own result is platform-defined (1/d overflows: inf cast to int8)."""
    amax = np.abs(x.reshape(-1, BLOCK)).max(axis=1)
    return bool(np.all((amax == 0) | (amax > 1e-35)))


@settings(max_examples=200, deadline=None)
@given(block_values)
def test_property_bytes_match_gguf(x):
    assume(_scales_fit(x))
    assert quantize_q8_0(x).tobytes() == _gguf_bytes(x)


@settings(max_examples=200, deadline=None)
@given(block_values)
def test_property_round_trip_error_within_half_a_step(x):
    """|x - x'| <= d/2 per element, d = max|x| / 127, plus what rounding d to f16 costs.

    Codes are rounded against the exact scale but decoded with its f16 rounding d16, so an
    element with ideal code q may also be off by about |q| * |d - d16|.
    """
    packed = quantize_q8_0(x).reshape(-1, BLOCK + 2)
    d16 = packed[:, :2].copy().view("<f2").astype(np.float64)
    xs = x.astype(np.float64).reshape(-1, BLOCK)
    d = np.abs(xs).max(axis=1, keepdims=True) / 127
    with np.errstate(invalid="ignore"):
        q = np.nan_to_num(np.rint(xs / d))  # 0 where the block is all zeros
    err = np.abs(dequantize_q8_0(packed).reshape(-1, BLOCK) - xs)
    assert np.all(err <= d * (0.5 + 1e-4) + (np.abs(q) + 1) * np.abs(d - d16))


def test_blocks_are_numbered_across_slabs():
    x = np.ones(10_000 * BLOCK, np.float32)
    x[9_000 * BLOCK + 5] = np.nan  # in the second slab
    with pytest.raises(BakeError, match="block 9000 holds a non-finite value"):
        quantize_q8_0(x)


@pytest.mark.parametrize("k, n", [(32, 1), (64, 96), (96, 7), (4096, 130)])
def test_roundtrip_down_the_columns_is_gguf_of_the_transpose(k, n):
    w = (RNG.standard_normal((k, n)) * RNG.uniform(0.01, 100, n)).astype(np.float32)
    w[:BLOCK, 0] = 0  # an all-zero block
    want = dequantize(quantize(np.ascontiguousarray(w.T), Q8_0), Q8_0).reshape(n, k).T
    np.testing.assert_array_equal(roundtrip_q8_0_columns(w), want)


def test_roundtrip_down_the_columns_needs_whole_blocks():
    with pytest.raises(BakeError, match="40 rows are not whole blocks of 32"):
        roundtrip_q8_0_columns(np.ones((40, 3), np.float32))
    w = np.ones((64, 3), np.float32)
    w[40, 2] = np.inf  # W^T's block 2 * 2 + 1: column 2's second block
    with pytest.raises(BakeError, match="block 5 holds a non-finite value"):
        roundtrip_q8_0_columns(w)
