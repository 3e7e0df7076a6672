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
