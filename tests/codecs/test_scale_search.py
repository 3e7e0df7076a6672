"""Error-minimising block scales (rlx.codecs.scale_search): searched Q8_0 blocks are Q8_0
blocks the `gguf` package decodes, searched q9_0..q12_0 blocks decode by the format as a
reference decoder written here reads it, and no block decodes worse than the plain
quantiser's, measured in float64."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize, quantize

from rlx.codecs import Encoding, decode, dequantize_q8_0, encode, roundtrip_q8_0_columns
from tests.codecs.test_q8_0 import CASES

Q8_0 = gguf.GGMLQuantizationType.Q8_0
WIDE = {Encoding.Q9_0: 9, Encoding.Q10_0: 10, Encoding.Q11_0: 11, Encoding.Q12_0: 12}


def _block_errors(x: np.ndarray, decoded: np.ndarray) -> np.ndarray:
    gap = np.asarray(x, np.float64).reshape(-1, 32) - np.asarray(decoded, np.float64
                                                                  ).reshape(-1, 32)
    return (gap * gap).sum(axis=1)


@pytest.mark.parametrize("name", CASES)
def test_searched_q8_0_blocks_decode_with_gguf_and_no_block_loses(name):
    x = CASES[name]
    searched = encode(Encoding.GGUF_Q8_0, x, searched=True)
    assert searched.size == quantize(x, Q8_0).size
    by_gguf = dequantize(searched.reshape(-1, 34), Q8_0).reshape(-1)
    np.testing.assert_array_equal(dequantize_q8_0(searched), by_gguf)
    plain = dequantize(quantize(x, Q8_0), Q8_0).reshape(-1)
    assert (_block_errors(x, by_gguf) <= _block_errors(x, plain)).all()


def test_searched_q8_0_cuts_the_error_of_normal_weights():
    x = CASES["normal-4096"]
    searched = dequantize(encode(Encoding.GGUF_Q8_0, x, searched=True).reshape(-1, 34), Q8_0)
    plain = dequantize(quantize(x, Q8_0), Q8_0)
    ratio = np.linalg.norm(searched.reshape(-1) - x) / np.linalg.norm(plain.reshape(-1) - x)
    assert ratio < 0.92, ratio


def test_unsearched_q8_0_is_still_the_gguf_bytes():
    x = CASES["normal-4096"]
    assert encode(Encoding.GGUF_Q8_0, x).tobytes() == quantize(x, Q8_0).tobytes()


def test_searched_columns_are_the_searched_stream_of_the_transpose():
    w = np.random.default_rng(5).standard_normal((128, 40)).astype(np.float32)
    stream = encode(Encoding.GGUF_Q8_0, np.ascontiguousarray(w.T), searched=True)
    want = dequantize(stream.reshape(-1, 34), Q8_0).reshape(40, 128).T
    np.testing.assert_array_equal(roundtrip_q8_0_columns(w, searched=True), want)


def _reference_decode(data: np.ndarray, bits: int) -> np.ndarray:
    """q<bits>_0 blocks read one at a time: an f16 scale, then 32 codes of `bits` bits,
    least significant first, offset by 2^(bits-1); value = code x scale in float64."""
    block_bytes = 2 + 4 * bits
    out = []
    for block in np.asarray(data, np.uint8).reshape(-1, block_bytes):
        scale = float(np.frombuffer(block[:2].tobytes(), "<f2")[0])
        stream = int.from_bytes(block[2:].tobytes(), "little")
        for i in range(32):
            code = (stream >> (i * bits)) & ((1 << bits) - 1)
            out.append((code - (1 << (bits - 1))) * scale)
    return np.array(out)


@pytest.mark.parametrize("encoding", sorted(WIDE, key=str))
@pytest.mark.parametrize("name", ["normal-37", "spikes", "negative-maxima", "zeros",
                                  "f16-subnormal-scale", "constant-rows"])
def test_searched_wide_blocks_decode_as_the_format_says_and_no_block_loses(encoding, name):
    x = CASES[name]
    searched = encode(encoding, x, searched=True)
    assert searched.size == encode(encoding, x).size
    by_reference = _reference_decode(searched, WIDE[encoding])
    np.testing.assert_array_equal(decode(encoding, searched, x.size), by_reference)
    plain = _reference_decode(encode(encoding, x), WIDE[encoding])
    assert (_block_errors(x, by_reference) <= _block_errors(x, plain)).all()
    if name == "normal-37":
        assert np.linalg.norm(by_reference - x) < 0.95 * np.linalg.norm(plain - x)


def _importance(size: int, seed: int = 11) -> np.ndarray:
    """Per-value weights spread over four decades, some zero: what activations' mean
    squares look like across channels (dead ReLU channels among them)."""
    rng = np.random.default_rng(seed)
    weights = (10.0 ** rng.uniform(-2, 2, size)).astype(np.float32)
    weights[rng.random(size) < 0.05] = 0
    return weights


def _weighted_block_errors(x, decoded, weights) -> np.ndarray:
    gap = np.asarray(x, np.float64).reshape(-1, 32) - np.asarray(decoded, np.float64
                                                                  ).reshape(-1, 32)
    return (gap * gap * np.asarray(weights, np.float64).reshape(-1, 32)).sum(axis=1)


@pytest.mark.parametrize("name", CASES)
def test_weighted_q8_0_blocks_decode_with_gguf_and_no_block_loses_weighted(name):
    x = CASES[name]
    weights = _importance(x.size)
    stream = encode(Encoding.GGUF_Q8_0, x, searched=True, importance=weights)
    assert stream.size == quantize(x, Q8_0).size
    by_gguf = dequantize(stream.reshape(-1, 34), Q8_0).reshape(-1)
    np.testing.assert_array_equal(dequantize_q8_0(stream), by_gguf)
    plain = dequantize(quantize(x, Q8_0), Q8_0).reshape(-1)
    unweighted = dequantize(encode(Encoding.GGUF_Q8_0, x, searched=True).reshape(-1, 34), Q8_0)
    weighted = _weighted_block_errors(x, by_gguf, weights)
    assert (weighted <= _weighted_block_errors(x, plain, weights)).all()
    if name == "normal-4096":  # the weighting pays over the unweighted search's blocks
        assert weighted.sum() < 0.9 * _weighted_block_errors(x, unweighted, weights).sum()


@pytest.mark.parametrize("encoding", sorted(WIDE, key=str))
@pytest.mark.parametrize("name", ["normal-37", "spikes", "zeros", "constant-rows"])
def test_weighted_wide_blocks_decode_as_the_format_says_and_no_block_loses_weighted(
        encoding, name):
    x = CASES[name]
    weights = _importance(x.size)
    stream = encode(encoding, x, searched=True, importance=weights)
    assert stream.size == encode(encoding, x).size
    by_reference = _reference_decode(stream, WIDE[encoding])
    np.testing.assert_array_equal(decode(encoding, stream, x.size), by_reference)
    plain = _reference_decode(encode(encoding, x), WIDE[encoding])
    assert (_weighted_block_errors(x, by_reference, weights)
            <= _weighted_block_errors(x, plain, weights)).all()


def test_weighted_columns_are_the_weighted_stream_of_the_transpose():
    rng = np.random.default_rng(6)
    w = rng.standard_normal((128, 40)).astype(np.float32)
    importance = _importance(128).reshape(128, 1)  # one per row of K, as a MatMul's
    stream = encode(Encoding.GGUF_Q8_0, np.ascontiguousarray(w.T), searched=True,
                    importance=np.ascontiguousarray(np.broadcast_to(importance, w.shape).T))
    want = dequantize(stream.reshape(-1, 34), Q8_0).reshape(40, 128).T
    np.testing.assert_array_equal(roundtrip_q8_0_columns(w, True, importance), want)
