"""How far an encoding moves a weight: the relative error of the whole tensor and of its
worst row (output channel).

The whole tensor's ||w - decoded|| / ||w|| hides a crushed channel. A 1x1 conv with rows of
16 values stored as one Q8_0 stream, its channels' ranges 10^3 apart (BatchNorm folded in),
measured 6.3e-3 over the tensor while its smallest channels decoded to zero (their rows'
error 1.0); on calibration feeds that one weight alone took the output's cosine to 0.962.
What reads a channel next (the next conv's folded BatchNorm, an activation, a LayerNorm)
scales it back up, so the worst row's error is what the plan compares layouts by.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rlx.codecs import (
    Encoding,
    decode_rows,
    encode_rows,
    padded_length,
    roundtrip_q8_0_columns,
    row_exponents,
    scale_rows,
)
from rlx.deferred import Payload, materialize, row_blocks

__all__ = ["WeightError", "weight_error", "stored_matrix", "stored_rows", "normalised_rows"]


@dataclass(frozen=True)
class WeightError:
    """||w - decoded|| / ||w|| over the whole tensor, and the largest over its rows."""

    whole: float
    worst_row: float


def stored_matrix(values: np.ndarray, rows: int, perm: tuple[int, ...], copy: bool = True
                  ) -> np.ndarray:
    """The weight as the `[rows, L]` matrix it is stored as (a view where numpy can make
    one, unless `copy`: a MatMul weight's W^T, for reading only)."""
    stored = values.transpose(perm) if perm else values
    if copy:
        stored = np.ascontiguousarray(stored, np.float32)
    return stored.reshape(rows, -1)


def normalised_rows(stored: np.ndarray, channels: int) -> np.ndarray:
    """`stored` with each of its `channels` rows (in stored order) divided by 2^e, its row
    exponent e (`rlx.codecs.row_exponents`), in `stored`'s shape."""
    by_channel = stored.reshape(channels, -1)
    return scale_rows(by_channel, -row_exponents(by_channel).astype(np.int32)
                      ).reshape(stored.shape)


def weight_error(values: Payload, encoding: Encoding, rows: int, perm: tuple[int, ...],
                 channels: int, scaled: bool = False, searched: bool = False,
                 importance: np.ndarray | None = None) -> WeightError:
    """The error of `values` stored as `rows` encoded rows in `perm` order, its `channels`
    rows (in stored order) normalised by their row exponents first when `scaled`. A `[K, N]`
    MatMul weight's Q8_0 stream of W^T (or its f16) is measured down its columns, and an
    untransposed weight a block of its channels (or leading rows) at a time (`values`
    deferred stays unread whole); the rest (transposed layouts of padded rows) read it
    whole. `searched`: block scales searched (`rlx.codecs.encode`), weighted by
    `importance` (broadcastable to the weight's shape) if given."""
    length = values.size // rows
    weights = None if importance is None else np.broadcast_to(importance, values.shape)
    if perm == (1, 0) and not scaled and rows == values.shape[1] and (
            encoding is Encoding.F16 or encoding is Encoding.GGUF_Q8_0
            and padded_length(encoding, length) == length):
        return _column_errors(values, encoding, searched, weights)
    if not perm and rows in (1, channels) and (channels > 1 or not scaled):
        return _untransposed_errors(values, encoding, rows, channels, scaled, searched,
                                    weights)
    stored = stored_matrix(materialize(values), rows, perm)
    stored_weights = None if weights is None else stored_matrix(weights, rows, perm)
    return _summary(*_squared_errors(stored, encoding, channels, scaled, searched,
                                     stored_weights))


def _untransposed_errors(values: Payload, encoding: Encoding, rows: int, channels: int,
                         scaled: bool, searched: bool, weights: np.ndarray | None
                         ) -> WeightError:
    """`weight_error` of a weight stored untransposed, as its channels' own rows or as one
    row, a block of units at a time: its channels, or (one channel) the rows of its leading
    axis. Where the units run together in one row, a block holds whole encoding blocks, so
    it encodes to its own part of the whole stream."""
    units = channels if channels > 1 else (values.shape[0] if values.ndim else 1)
    by_unit = stored_rows(values, units)
    own_rows = rows == units
    multiple = 1 if own_rows else \
        encoding.block_size // math.gcd(by_unit.shape[1], encoding.block_size)
    unit_weights = None if weights is None else weights.reshape(units, -1)
    sums, done = [], 0
    for block in row_blocks(by_unit, multiple, SLAB_BYTES):
        block = np.asarray(block, np.float32)
        stored = block if own_rows else block.reshape(1, -1)
        part = None if unit_weights is None else \
            unit_weights[done:done + len(block)].reshape(stored.shape)
        sums.append(_squared_errors(stored, encoding, len(block), scaled, searched, part))
        done += len(block)
    diff2, norm2 = (np.concatenate(parts) for parts in zip(*sums))
    if channels == 1:
        diff2, norm2 = diff2.sum(keepdims=True), norm2.sum(keepdims=True)
    return _summary(diff2, norm2)


def stored_rows(values: Payload, rows: int) -> Payload:
    """A weight stored untransposed as `rows` rows, as that `[rows, L]` matrix (a deferred
    one stays unread)."""
    return values.reshape((rows, values.size // max(rows, 1)))


def _squared_errors(stored: np.ndarray, encoding: Encoding, channels: int, scaled: bool,
                    searched: bool, weights: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Per channel of the `[rows, L]` matrix `stored` encoded (its `channels` rows
    normalised first when `scaled`; its search weighted by `weights`, `[rows, L]`, if
    given), the squared error and the squared norm."""
    rows, length = stored.shape
    encoded = normalised_rows(stored, channels) if scaled else stored
    decoded = decode_rows(encoding, encode_rows(encoding, encoded, searched, weights), rows,
                          length)
    if scaled:
        exponents = row_exponents(stored.reshape(channels, -1))
        decoded = scale_rows(decoded.reshape(channels, -1), exponents)
    by_channel = stored.reshape(channels, -1)
    gap = by_channel - decoded.reshape(channels, -1)
    return (np.einsum("ij,ij->i", gap, gap, dtype=np.float64),
            np.einsum("ij,ij->i", by_channel, by_channel, dtype=np.float64))


SLAB_BYTES = 4 << 20
"""What `_column_errors` decodes at a time: a slab of whole Q8_0 blocks, not a decoded copy
of the weight and a difference beside it (two weights' worth of temporaries, which put a
streaming bake of 64 MiB weights over its memory bound)."""


def _column_errors(values: Payload, encoding: Encoding, searched: bool,
                   weights: np.ndarray | None) -> WeightError:
    """The error of a `[K, N]` MatMul weight stored as the Q8_0 stream (or f16) of W^T (its
    N rows run down the columns), a slab of whole blocks of K at a time."""
    k, n = values.shape
    diff2, norm2 = np.zeros(n), np.zeros(n)
    done = 0
    for block in row_blocks(values, encoding.block_size, SLAB_BYTES):
        slab = np.asarray(block, np.float32)
        part = None if weights is None else weights[done:done + len(slab)]
        done += len(slab)
        decoded = roundtrip_q8_0_columns(slab, searched, part) \
            if encoding is Encoding.GGUF_Q8_0 else slab.astype(np.float16).astype(np.float32)
        gap = slab - decoded
        diff2 += np.einsum("kn,kn->n", gap, gap, dtype=np.float64)
        norm2 += np.einsum("kn,kn->n", slab, slab, dtype=np.float64)
    return _summary(diff2, norm2)


def _summary(diff2: np.ndarray, norm2: np.ndarray) -> WeightError:
    """The whole tensor's and the worst row's relative error from each row's squared error
    and squared norm."""
    whole = float(np.sqrt(diff2.sum() / norm2.sum())) if norm2.any() else 0.0
    nonzero = norm2 > 0
    worst = float(np.sqrt(diff2[nonzero] / norm2[nonzero]).max(initial=0))
    return WeightError(whole, worst)
