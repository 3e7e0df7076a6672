"""GGUF TQ2_0 codec: bytes identical to the `gguf` package's quantizer; ternary is lossless."""

from __future__ import annotations

import gguf
import ml_dtypes
import numpy as np
import pytest
from gguf.quants import dequantize, quantize
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rlx.codecs import dequantize_tq2_0, is_ternary, quantize_tq2_0
from rlx.errors import BakeError

TQ2_0 = gguf.GGMLQuantizationType.TQ2_0
BLOCK = 256
RNG = np.random.default_rng(2)


def _normal(blocks: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(blocks * BLOCK) * scale).astype(np.float32)


def _ternary(blocks: int) -> np.ndarray:
    return RNG.integers(-1, 2, blocks * BLOCK).astype(np.float32)


def _ties(sign: float) -> np.ndarray:
    """Blocks with max |x| = 2 (1/d = 0.5 exactly) and values +-1: x * (1/d) ties at +-0.5."""
    x = RNG.choice(np.float32([-1, 1, 0.25, -1.5]), (4, BLOCK))
    x[:, 0] = sign * 2
    return x.reshape(-1)


def _spikes() -> np.ndarray:
    x = _normal(6).reshape(-1, BLOCK)
    x[np.arange(len(x)), RNG.integers(0, BLOCK, len(x))] = RNG.choice([-5e3, 4e4], len(x))
    return x.reshape(-1)


def _negative_maxima() -> np.ndarray:
    x = _normal(6).reshape(-1, BLOCK)
    x[np.arange(len(x)), RNG.integers(0, BLOCK, len(x))] = -(np.abs(x).max(axis=1) + 0.5)
    return x.reshape(-1)


CASES = {
    "normal-1": _normal(1),
    "normal-13": _normal(13),
    "normal-512": _normal(512),
    "ternary": _ternary(16),
    "ternary-scaled": _ternary(4) * np.float32(0.0625),
    "zeros": np.zeros(2 * BLOCK, np.float32),
    "negative-zeros": np.full(BLOCK, -0.0, np.float32),
    "constant-rows": np.repeat(np.float32([1, -1, 0.3, -7.5, 1e-3, 600]), BLOCK),
    "ties": _ties(1.0),
    "ties-negative-max": _ties(-1.0),
    "spikes": _spikes(),
    "f16-subnormal-scale": _normal(6, 1e-6),
    "f16-scale-underflows": _normal(6, 1e-9),
    "f32-tiny-values": _normal(2, 1e-30) * np.float32(1e-8),  # some subnormal; 1/d finite
    "negative-maxima": _negative_maxima(),
    "near-f16-max": RNG.uniform(-65504, 65504, 4 * BLOCK).astype(np.float32),
    "just-below-f16-overflow": np.repeat(np.float32([65519, -65510]), BLOCK),
}


def _gguf_bytes(x: np.ndarray) -> bytes:
    return quantize(x, TQ2_0).tobytes()


@pytest.mark.parametrize("name", CASES)
def test_bytes_match_gguf(name):
    x = CASES[name]
    assert quantize_tq2_0(x).tobytes() == _gguf_bytes(x)


@pytest.mark.parametrize("name", CASES)
def test_dequantize_matches_gguf(name):
    packed = quantize(CASES[name], TQ2_0)
    got = dequantize_tq2_0(packed.tobytes())
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, dequantize(packed, TQ2_0).reshape(-1))


def test_ties_round_away_from_zero():
    x = _ties(1.0)
    got = dequantize_tq2_0(quantize_tq2_0(x))
    np.testing.assert_array_equal(got[np.abs(x) == 1], 2 * x[np.abs(x) == 1])


def test_layout_by_hand():
    """Position p of a half sits in byte p % 32, bit pair p // 32; the f16 scale comes last."""
    x = np.zeros(BLOCK, np.float32)
    x[[0, 32, 64, 96, 128 + 5, 128 + 127]] = [1, -1, 1, -1, 1, -1]
    packed = quantize_tq2_0(x)
    codes = np.full(64, 0b01010101, np.uint8)  # every code 1 (zero)
    codes[0] = 2 | 0 << 2 | 2 << 4 | 0 << 6
    codes[32 + 5] = 0b01010110
    codes[32 + 31] = 0b00010101
    assert packed.tobytes() == codes.tobytes() + np.float16(1).tobytes()


def test_reciprocal_overflow_stores_zero_scale():
    x = np.zeros(BLOCK, np.float32)
    x[:2] = [1e-45, -2e-45]  # d = f32 subnormal, 1/d overflows: scale 0, all codes "zero"
    packed = quantize_tq2_0(x)
    assert packed.tobytes() == bytes([0b01010101]) * 64 + bytes(2)
    np.testing.assert_array_equal(dequantize_tq2_0(packed), 0)


@pytest.mark.parametrize("size", [1, 255, 257, 1000])
def test_bad_value_count(size):
    with pytest.raises(BakeError, match=f"multiple of 256 values, got {size}"):
        quantize_tq2_0(np.ones(size, np.float32))


def test_non_finite_and_overflowing_scales_are_refused():
    x = np.ones(2 * BLOCK, np.float32)
    x[300] = np.nan
    with pytest.raises(BakeError, match="block 1 holds a non-finite value"):
        quantize_tq2_0(x)
    with pytest.raises(BakeError, match="block 0 has max \\|x\\| = 65520, its scale overflows"):
        quantize_tq2_0(np.full(BLOCK, -65520, np.float32))


def test_bad_byte_count():
    with pytest.raises(BakeError, match="multiple of 66 bytes, got 65"):
        dequantize_tq2_0(bytes(65))
    with pytest.raises(BakeError, match="512 values take 132 bytes, got 66"):
        dequantize_tq2_0(bytes(66), count=512)


def test_count_and_input_forms():
    x = _normal(3).reshape(3, 16, 16)
    want = _gguf_bytes(x.reshape(-1))
    assert quantize_tq2_0(x).tobytes() == want
    assert quantize_tq2_0(x.astype(ml_dtypes.bfloat16)).tobytes() == _gguf_bytes(
        x.astype(ml_dtypes.bfloat16).astype(np.float32).reshape(-1))
    np.testing.assert_array_equal(
        dequantize_tq2_0(memoryview(bytearray(want)), count=768),
        dequantize(np.frombuffer(want, np.uint8), TQ2_0).reshape(-1))


ternary_blocks = st.integers(1, 3).flatmap(lambda n: st.tuples(
    arrays(np.int8, (n, BLOCK), elements=st.sampled_from([-1, 0, 1])),
    arrays(np.int8, (n, 1), elements=st.integers(-24, 15)),  # exact in f16 (2**-24: subnormal)
))


@settings(max_examples=100, deadline=None)
@given(ternary_blocks)
def test_property_ternary_times_power_of_two_is_exact(case):
    codes, exponents = case
    x = (codes * np.exp2(exponents.astype(np.float64))).astype(np.float32)
    np.testing.assert_array_equal(dequantize_tq2_0(quantize_tq2_0(x)), x.reshape(-1))


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 3).flatmap(lambda n: arrays(
    np.float32, n * BLOCK, elements=st.floats(-6e4, 6e4, width=32, allow_subnormal=True))))
def test_property_bytes_match_gguf(x):
    # where 1/d overflows, gguf casts inf to int8: platform-defined, so not compared
    amax = np.abs(x.reshape(-1, BLOCK)).max(axis=1)
    assume(np.all((amax == 0) | (amax > 1e-37)))
    assert quantize_tq2_0(x).tobytes() == _gguf_bytes(x)


@pytest.mark.parametrize("values, want", [
    ([], True),
    ([0.0, -0.0, 1.0, -1.0], True),
    (np.int8([1, 0, -1]), True),
    (np.float16([1, -1, 0]).astype(ml_dtypes.bfloat16), True),
    ([1.0, 0.5], False),
    ([2.0], False),
    ([1.0, np.nan], False),
    ([-np.inf], False),
    ([1.0000001], False),
])
def test_is_ternary(values, want):
    assert is_ternary(np.asarray(values)) is want


def test_is_ternary_on_every_case():
    for name, x in CASES.items():
        assert is_ternary(x) == bool(np.all(np.isin(x, [-1.0, 0.0, 1.0]))), name
