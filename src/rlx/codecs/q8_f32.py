"""`q8_f32`: blocks of 32 int8 codes with a float32 scale (36 bytes), rlx's own encoding
for weights an int8 quantiser made, which it stores exactly.

A QDQ model's `DequantizeLinear(int8 W, scale)` folds into float32 values `fl(k * s)`.
GGUF's Q8_0 holds its scale in f16, 11 of float32's 24 bits: with the codes kept, the
decoded weight is the original times `f16(s) / s`, off by up to 2^-11, and a quantised
graph turns that into whole quantiser steps (PP-OCR's classifier, statically quantised,
came out at cosine 0.99898 against its exact bake). Here the scale is the original f32
step, so decoding (`code * scale`, one float32 product, what DequantizeLinear computes)
gives back every value bit for bit. Block: the scale as little-endian float32, then the 32
codes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rlx.codecs._blocks import Layout, block_scale, inverse_scale, round_half_away

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["quantize_q8_f32", "quantize_q8_f32_on_grid", "dequantize_q8_f32", "int8_grid"]

LAYOUT = Layout("q8_f32", 32, 36)
_F32_LE = np.dtype("<f4")


def quantize_q8_f32(values: ArrayLike) -> np.ndarray:
    """`values` (size a multiple of 32) as blocks with scale max|x| / 127, codes rounded
    half away from zero (Q8_0's rule, with the scale kept in float32)."""
    blocks = LAYOUT.value_blocks(values)
    scale = block_scale(np.abs(blocks).max(axis=1), 127, LAYOUT.name)
    return _pack(scale, blocks)


def quantize_q8_f32_on_grid(values: ArrayLike, steps: np.ndarray) -> np.ndarray:
    """Values on an int8 grid (block i's values `k * steps[i]`, integer |k| <= 127) with the
    step as each block's scale: decoding gives back exactly the values `int8_grid` checked."""
    return _pack(np.asarray(steps, np.float32), LAYOUT.value_blocks(values))


def _pack(scale: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    out = np.empty((len(blocks), LAYOUT.block_bytes), dtype=np.uint8)
    out[:, :4] = scale.astype(_F32_LE).view(np.uint8).reshape(-1, 4)
    codes = round_half_away(blocks * inverse_scale(scale)[:, None])
    out[:, 4:] = codes.astype(np.int8).view(np.uint8)
    return out.reshape(-1)


def dequantize_q8_f32(data: object, count: int | None = None) -> np.ndarray:
    """Float32 values of a q8_f32 stream (exactly `count` of them when given)."""
    blocks = LAYOUT.byte_blocks(data, count)
    codes = blocks[:, 4:].view(np.int8).astype(np.float32)
    codes *= np.ascontiguousarray(blocks[:, :4]).view(_F32_LE).astype(np.float32)
    return codes.reshape(-1)


_GRID_TOLERANCE = 1e-3
"""How far from an integer x / step may be for x to count as on the grid (float32 rounding
of k * step moves it by about 127 * 2^-23)."""

_ULPS = (0, -1, 1, -2, 2)
"""Candidate steps around max / 127 (whose division can round away from the quantiser's
own scale by an ulp or two), nearest first."""


def int8_grid(matrix: np.ndarray) -> np.ndarray | None:
    """Per-row float32 steps such that every value of the `[rows, L]` matrix is exactly
    `fl(k * step)` with an integer |k| <= 127, or None. Weights a symmetric int8 quantiser
    made (dequantised, as a folded DequantizeLinear leaves them) lie on one, per row (per
    channel: the row's max / 127) or per tensor (the tensor's max / 127); integer-valued
    ones (the operands of integer ops) on steps of 1."""
    values = np.asarray(matrix, np.float32)
    row_max = np.abs(values).max(axis=1)
    for steps in (row_max / np.float32(127),
                  np.full_like(row_max, row_max.max() / np.float32(127)),
                  np.ones_like(row_max)):
        # the first row first: a float weight fails there, without a pass over all of it
        if _exact_steps(values[:1], steps[:1]) is not None:
            found = _exact_steps(values, steps)
            if found is not None:
                return found
    return None


def _exact_steps(values: np.ndarray, guess: np.ndarray) -> np.ndarray | None:
    """Per row, the step near `guess` that reproduces every value bit for bit, or None."""
    scaled = values * inverse_scale(guess)[:, None]
    codes = np.rint(scaled)
    if np.abs(codes).max(initial=0) > 127 or \
            np.abs(scaled - codes).max(initial=0) > _GRID_TOLERANCE:
        return None
    steps = guess.copy()
    missing = np.ones(len(guess), bool)
    for ulps in _ULPS:
        trial = guess
        for _ in range(abs(ulps)):
            trial = np.nextafter(trial, np.float32(np.sign(ulps) * np.inf))
        rows = np.flatnonzero(missing)
        exact = (codes[rows] * trial[rows, None] == values[rows]).all(axis=1)
        steps[rows[exact]] = trial[rows[exact]]
        missing[rows[exact]] = False
        if not missing.any():
            return steps
    return None
