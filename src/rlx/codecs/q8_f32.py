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

from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from rlx.codecs._blocks import Layout, block_scale, inverse_scale, round_half_away

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["quantize_q8_f32", "quantize_q8_f32_on_grid", "dequantize_q8_f32", "int8_grid",
           "int8_grid_of_pieces", "int8_grid_of_row_pieces"]

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
    return int8_grid_of_pieces(lambda: iter((values,)))


def int8_grid_of_pieces(pieces: Callable[[], Iterator[np.ndarray]]) -> np.ndarray | None:
    """`int8_grid` of the `[rows, L]` matrix whose column ranges, in order, each call of
    `pieces` yields as `[rows, l]` float32 arrays: a weight too large to hold is checked a
    piece at a time, in two passes (its rows' maxima, then each candidate step's exactness),
    holding one piece."""
    row_max: np.ndarray | None = None
    for piece in pieces():
        piece_max = np.abs(piece).max(axis=1, initial=0)
        row_max = piece_max if row_max is None else np.maximum(row_max, piece_max)
    if row_max is None:
        return None
    for steps in _candidate_steps(row_max):
        found = _exact_steps(pieces, steps)
        if found is not None:
            return found
    return None


def int8_grid_of_row_pieces(pieces: Callable[[], Iterator[np.ndarray]]) -> np.ndarray | None:
    """`int8_grid` of the `[rows, L]` matrix whose consecutive row ranges each call of
    `pieces` yields as `[r, L]` float32 arrays (a table of many rows, read a block of rows
    at a time): the same steps, since a row's step depends on its own values and the whole
    matrix's max only."""
    maxima = [np.abs(piece).max(axis=1, initial=0) for piece in pieces()]
    if not maxima:
        return None
    row_max = np.concatenate(maxima)
    for steps in _candidate_steps(row_max):
        found: list[np.ndarray] = []
        start = 0
        for piece in pieces():
            exact = _exact_steps(partial(iter, (piece,)), steps[start:start + len(piece)])
            if exact is None:
                break
            found.append(exact)
            start += len(piece)
        else:
            return np.concatenate(found)
    return None


def _candidate_steps(row_max: np.ndarray) -> tuple[np.ndarray, ...]:
    """The grids `int8_grid` tries, in order: per row (max / 127), per tensor, steps of 1."""
    return (row_max / np.float32(127), np.full_like(row_max, row_max.max() / np.float32(127)),
            np.ones_like(row_max))


def _exact_steps(pieces: Callable[[], Iterator[np.ndarray]], guess: np.ndarray
                 ) -> np.ndarray | None:
    """Per row, the step near `guess` (the first of `_ULPS` around it) that reproduces every
    value of every piece bit for bit, or None. The first row of the first piece is tried
    alone first: a float weight fails there, without a pass over all of it."""
    trials = [guess]
    for ulps in _ULPS[1:]:
        trial = guess
        for _ in range(abs(ulps)):
            trial = np.nextafter(trial, np.float32(np.sign(ulps) * np.inf))
        trials.append(trial)
    exact = np.ones((len(trials), len(guess)), bool)  # trial x row: exact so far
    for index, piece in enumerate(pieces()):
        first = [trial[:1] for trial in trials]
        if index == 0 and _exact_rows(piece[:1], guess[:1], first, exact[:, :1]) is None:
            return None
        if _exact_rows(piece, guess, trials, exact) is None:
            return None
    found = exact.any(axis=0)
    if not found.all():
        return None
    steps = np.stack(trials)[exact.argmax(axis=0), np.arange(len(guess))]
    return steps.astype(np.float32)


def _exact_rows(values: np.ndarray, guess: np.ndarray, trials: list[np.ndarray],
                exact: np.ndarray) -> np.ndarray | None:
    """`exact` (trial x row) and-ed with which trials reproduce each row of `values` (one
    piece), or None where a code passes 127 or a value lies off every integer."""
    scaled = values * inverse_scale(guess)[:, None]
    codes = np.rint(scaled)
    if np.abs(codes).max(initial=0) > 127 or \
            np.abs(scaled - codes).max(initial=0) > _GRID_TOLERANCE:
        return None
    for row, trial in zip(exact, trials):
        row &= (codes * trial[:, None] == values).all(axis=1)
    if not exact.any(axis=0).all():
        return None
    return exact
