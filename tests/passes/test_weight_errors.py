"""The plan's error measurement of weights read a block at a time (rlx.passes.weight_errors):
the same errors as the gguf package's Q8_0 (or numpy's f16) of the whole stored matrix, in
float64, without a whole read of the weight."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

from rlx.codecs import Encoding
from rlx.deferred import Computed
from rlx.passes import weight_errors
from rlx.passes.weight_errors import weight_error

RNG = np.random.default_rng(35)
Q8_0 = GGMLQuantizationType.Q8_0


def reference(values: np.ndarray, encoding: Encoding, rows: int, perm: tuple[int, ...],
              channels: int, scaled: bool) -> tuple[float, float]:
    """(whole, worst channel) relative error of the stored `[rows, L]` matrix (rows padded
    with zeros to whole blocks) decoded by gguf (Q8_0) or numpy (f16), in float64."""
    stored = np.ascontiguousarray(values.transpose(perm) if perm else values).reshape(rows, -1)
    exponents = np.zeros(channels, np.int32)
    if scaled:
        _, exponents = np.frexp(np.abs(stored.reshape(channels, -1)).max(axis=1))
    encoded = np.ldexp(stored.reshape(channels, -1), -exponents[:, None]).reshape(rows, -1)
    if encoding is Encoding.F16:
        decoded = encoded.astype(np.float16).astype(np.float32)
    else:
        length = stored.shape[1]
        padded = np.pad(encoded, ((0, 0), (0, -length % 32)))
        decoded = dequantize(quantize(padded, Q8_0), Q8_0)[:, :length]
    decoded = np.ldexp(decoded.reshape(channels, -1), exponents[:, None]).astype(np.float64)
    want = stored.reshape(channels, -1).astype(np.float64)
    diff2 = ((want - decoded) ** 2).sum(axis=1)
    norm2 = (want ** 2).sum(axis=1)
    return float(np.sqrt(diff2.sum() / norm2.sum())), float(np.sqrt(diff2 / norm2).max())


# (shape, encoding, rows, perm, channels, scaled): a Gather table's rows (one padded), a
# conv's channels as their own rows (row exponents), a conv run together in one row (its
# last block of channels padded at the end), a role-less weight's f16 (one channel), a
# MatMul weight's f16 and Q8_0 down its columns
CASES = [
    ((300, 96), Encoding.GGUF_Q8_0, 300, (), 300, False),
    ((300, 40), Encoding.GGUF_Q8_0, 300, (), 300, False),
    ((64, 8, 5), Encoding.GGUF_Q8_0, 64, (), 64, True),
    ((70, 3, 3, 3), Encoding.GGUF_Q8_0, 1, (), 70, False),
    ((70, 3, 3, 3), Encoding.GGUF_Q8_0, 1, (), 70, True),
    ((300, 7), Encoding.F16, 1, (), 1, False),
    ((512, 96), Encoding.F16, 96, (1, 0), 96, False),
    ((512, 96), Encoding.GGUF_Q8_0, 96, (1, 0), 96, False),
]


@pytest.mark.parametrize(("shape", "encoding", "rows", "perm", "channels", "scaled"), CASES)
def test_a_weight_is_measured_a_block_at_a_time(monkeypatch, shape, encoding, rows, perm,
                                                channels, scaled):
    monkeypatch.setattr(weight_errors, "SLAB_BYTES", 4096)  # many blocks of a small weight
    values = RNG.standard_normal(shape).astype(np.float32)
    values *= np.logspace(-3, 0, shape[0], dtype=np.float32).reshape(-1, *[1] * (len(shape) - 1))
    read: list[int] = []

    def rows_read(block: np.ndarray) -> np.ndarray:
        read.append(len(block))
        return block

    lazy = Computed(rows_read, (values,), (), shape, np.float32, rowwise=True)
    got = weight_error(lazy, encoding, rows, perm, channels, scaled)
    whole, worst = reference(values, encoding, rows, perm, channels, scaled)
    assert got.whole == pytest.approx(whole, rel=1e-9)
    assert got.worst_row == pytest.approx(worst, rel=1e-9)
    assert len(read) > 2 and max(read) < shape[0] and sum(read) == shape[0]
