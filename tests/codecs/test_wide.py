"""q9_0 .. q12_0 (rlx.codecs.wide): the bytes against a reference written here independently
(float64 numpy for the scale and codes, Python integers for the bit packing), and the
error each width buys against Q8_0 (the `gguf` package's quantizer) and f16."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize, quantize
from hypothesis import given, settings
from hypothesis import strategies as st

from rlx.codecs import Encoding, decode, encode
from rlx.errors import BakeError

WIDE = {Encoding.Q9_0: 9, Encoding.Q10_0: 10, Encoding.Q11_0: 11, Encoding.Q12_0: 12}


def _reference(values: np.ndarray, bits: int) -> bytes:
    """The blocks built one at a time: f16 scale max / limit rounded up, codes rounded half
    away from zero in float64, offset by 2^(bits-1), bits laid out least significant first."""
    limit = (1 << (bits - 1)) - 1
    out = bytearray()
    for block in np.asarray(values, np.float64).reshape(-1, 32):
        want = float(np.abs(block).max()) / limit
        scale = np.float16(want)
        if float(scale) < want:
            scale = np.nextafter(scale, np.float16(np.inf))
        out += scale.astype("<f2").tobytes()
        stream = 0
        for i, x in enumerate(block):
            q = 0.0 if scale == 0 else x / float(scale)
            code = int(np.sign(q) * np.floor(abs(q) + 0.5))
            stream |= (max(-limit, min(limit, code)) + limit + 1) << (i * bits)
        out += stream.to_bytes(32 * bits // 8, "little")
    return bytes(out)


@settings(max_examples=40, deadline=None)
@given(encoding=st.sampled_from(sorted(WIDE, key=str)), blocks=st.integers(1, 6),
       magnitude=st.sampled_from([1e-6, 1e-2, 1.0, 3e2, 1e4]), seed=st.integers(0, 2**32 - 1))
def test_bytes_and_values_match_the_reference(encoding, blocks, magnitude, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(32 * blocks) * magnitude).astype(np.float32)
    x[rng.random(x.size) < 0.1] = 0
    data = encode(encoding, x)
    assert data.tobytes() == _reference(x, WIDE[encoding])
    limit = (1 << (WIDE[encoding] - 1)) - 1
    decoded = decode(encoding, data, x.size)
    scales = np.repeat(np.frombuffer(data.reshape(blocks, -1)[:, :2].tobytes(), "<f2"), 32)
    assert np.all(np.abs(decoded.astype(np.float64) - x) <= scales.astype(np.float64) / 2 * 1.001)
    assert np.all(np.abs(decoded) <= limit * scales.astype(np.float32))


@pytest.mark.parametrize("encoding", [Encoding.Q9_0, Encoding.Q12_0])
def test_streams_longer_than_a_slab_are_the_same_blocks(encoding):
    """Blocks are encoded a slab at a time: the last ones, past the first slab, are the
    reference's bytes for those blocks alone, and the whole stream decodes within half a
    step of every value."""
    x = np.random.default_rng(4).standard_normal(32 * 4100).astype(np.float32)
    data = encode(encoding, x)
    tail = 5 * encoding.block_bytes
    assert data[-tail:].tobytes() == _reference(x[-5 * 32:], WIDE[encoding])
    limit = (1 << (WIDE[encoding] - 1)) - 1
    step = np.repeat(np.abs(x).reshape(-1, 32).max(axis=1) / limit, 32)
    assert np.all(np.abs(decode(encoding, data, x.size) - x) <= step * 0.5005)


def test_each_bit_halves_the_error_from_q8_0_to_f16():
    x = np.random.default_rng(3).standard_normal(32 * 4096).astype(np.float32)
    q8 = dequantize(quantize(x, gguf.GGMLQuantizationType.Q8_0), gguf.GGMLQuantizationType.Q8_0)
    errors = [np.linalg.norm(x - q8.reshape(-1))]
    for encoding in sorted(WIDE, key=lambda e: WIDE[e]):
        errors.append(np.linalg.norm(x - decode(encoding, encode(encoding, x), x.size)))
    errors.append(np.linalg.norm(x - x.astype(np.float16)))
    ratios = np.array(errors[:-2]) / np.array(errors[1:-1])
    assert np.all((ratios > 1.85) & (ratios < 2.15)), ratios
    assert errors[-2] > errors[-1]  # q12_0 still short of f16, at 1.5625 bytes a value


@pytest.mark.parametrize("encoding", sorted(WIDE, key=str))
def test_a_scale_past_f16_is_refused(encoding):
    with pytest.raises(BakeError, match="f16"):
        encode(encoding, np.full(32, 7e4 * 4096, np.float32))
    with pytest.raises(BakeError, match="non-finite"):
        encode(encoding, np.array([np.nan] + [0.0] * 31, np.float32))


def test_lengths_are_checked():
    with pytest.raises(BakeError, match="multiple of 32"):
        encode(Encoding.Q10_0, np.zeros(31, np.float32))
    with pytest.raises(BakeError, match="bytes"):
        decode(Encoding.Q12_0, np.zeros(49, np.uint8), 32)
