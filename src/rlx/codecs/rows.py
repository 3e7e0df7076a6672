"""Matrices stored as padded rows: each row of L values padded with zeros to whole blocks.

A block never straddles two rows, so any row (a Conv output channel, an embedding) decodes
on its own. Plain floats (f16, bf16) have blocks of one value and need no padding.
"""

from __future__ import annotations

import numpy as np

from rlx.codecs.encodings import Encoding, decode, encode
from rlx.errors import BakeError

__all__ = ["padded_length", "encode_rows", "decode_rows"]


def padded_length(encoding: Encoding | str, length: int) -> int:
    """`length` rounded up to whole blocks of `encoding`."""
    size = Encoding.parse(str(encoding)).block_size
    return -(-length // size) * size


def encode_rows(encoding: Encoding | str, matrix: np.ndarray) -> np.ndarray:
    """A `[R, L]` float matrix as flat u8: R rows, each padded to whole blocks."""
    matrix = np.asarray(matrix, np.float32)
    if matrix.ndim != 2:
        raise BakeError(f"encode_rows needs a [rows, length] matrix, got shape {matrix.shape}")
    rows, length = matrix.shape
    padded = padded_length(encoding, length)
    if padded != length:
        matrix = np.pad(matrix, ((0, 0), (0, padded - length)))
    return encode(encoding, np.ascontiguousarray(matrix))


def decode_rows(encoding: Encoding | str, data: np.ndarray, rows: int,
                length: int) -> np.ndarray:
    """The `[rows, length]` float32 matrix of `encode_rows` bytes (a view of the padded one)."""
    padded = padded_length(encoding, length)
    values = decode(encoding, data, rows * padded).astype(np.float32, copy=False)
    return values.reshape(rows, padded)[:, :length]
