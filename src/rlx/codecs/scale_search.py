"""Error-minimising block scales: the codes of a block under the f16 scale, of those tried,
that decodes it with the least squared error.

A block quantiser's scale max|x| / limit puts the largest value on a code and leaves the
rest wherever they fall; a slightly larger scale moves every code, and for some blocks the
values then land nearer their codes. Trying `SEARCH_FACTORS` times that scale (each rounded
to f16, the codes computed with the scale stored), each trial's codes also with their
least-squares scale, and keeping per block the best decode measured 0.87x the error of
max / limit on normal blocks and 0.87-0.91x on Student-t (3) ones, for Q8_0 and q9_0 to
q12_0 (llama.cpp searches its k-quants' scales likewise). The blocks stay what they
were: a scale and codes in range, decoded by the format's own decoder (the `gguf` package's
for Q8_0). A block keeps its plain codes unless a trial is strictly better in float64, so
no block gets worse.

Given `weights` (a value's importance: `rlx.baking.importance`, the mean square of the
activation it multiplies), the error minimised and checked is sum w (x - decoded)^2, and
the least-squares scale is weighted alike: llama.cpp's imatrix, for these blocks. On normal
blocks with weights log-uniform over two decades, the weighted squared error was 0.60x the
plain quantiser's (0.76x searching unweighted), for Q8_0 and q10_0 alike.
"""

from __future__ import annotations

import numpy as np

from rlx.codecs._blocks import inverse_scale

__all__ = ["SEARCH_FACTORS", "search_scales"]

SEARCH_FACTORS = 1 + np.arange(-2, 41, dtype=np.float32) / 200
"""The multiples of max / limit tried: 0.99 to 1.2 in steps of 0.005. Measured on normal
blocks, 8-bit codes: 1-1.1 in 11 steps 0.92x the plain error, 21 steps 0.90x, this grid
0.89x; factors under 0.99 (clipping the largest value) were almost never the best."""

_STRICTLY = 1 - 1e-12  # a search must beat a block's error by more than rounding in a sum


def search_scales(blocks: np.ndarray, codes: np.ndarray, scales: np.ndarray, lowest: int,
                  highest: int, weights: np.ndarray | None = None) -> None:
    """Replace, in place, a block's `codes` (`[B, size]` float32, integral) and stored
    `scales` (`[B]` float32 holding f16 values) by the trial's that decodes the float32
    `blocks` with less squared error (weighted by `weights`, `[B, size]` >= 0, if given);
    trial codes lie in [lowest, highest].

    Each trial's codes are also tried with their least-squares scale sum(x c) / sum(c c)
    rounded to f16 (0.886 -> 0.871x the plain error on normal blocks, for 1.5x the time).
    Trials are compared in float32, with codes rounded half to even (any codes in range
    make a valid block, so the rounding need not be the plain quantiser's): one pass fewer
    each. Only the best trial is checked in float64 against the plain codes, which a block
    keeps unless the trial is strictly better."""
    best_codes, best_scales = codes.copy(), scales.copy()
    best = _squared_errors(blocks, codes, scales, weights)
    base = np.abs(blocks).max(axis=1) / np.float32(highest)
    trial = np.empty_like(blocks)
    for factor in SEARCH_FACTORS:
        grid = _f16(base * factor)
        np.multiply(blocks, inverse_scale(grid)[:, None], out=trial)
        np.rint(trial, out=trial)
        np.clip(trial, lowest, highest, out=trial)
        with np.errstate(divide="ignore", invalid="ignore"):
            fitted = _f16(_dot(blocks, trial, weights) / _dot(trial, trial, weights))
        for trial_scales in (grid, fitted):
            errors = _squared_errors(blocks, trial, trial_scales, weights)
            better = errors < best
            best_codes[better] = trial[better]
            best_scales[better] = trial_scales[better]
            best[better] = errors[better]
    values = blocks.astype(np.float64)
    exact = None if weights is None else weights.astype(np.float64)
    better = _squared_errors(values, best_codes, best_scales, exact) < \
        _squared_errors(values, codes, scales, exact) * _STRICTLY
    codes[better] = best_codes[better]
    scales[better] = best_scales[better]


def _f16(scales: np.ndarray) -> np.ndarray:
    """Float32 scales rounded to f16 (as float32); 0 where that is not finite (past f16, or
    a block of zeros' 0 / 0): a scale of 0 decodes every code to 0, never the best trial of
    a block that is not all zeros."""
    with np.errstate(over="ignore"):
        rounded = scales.astype(np.float16).astype(np.float32)
    rounded[~np.isfinite(rounded)] = 0
    return rounded


def _squared_errors(values: np.ndarray, codes: np.ndarray, scales: np.ndarray,
                    weights: np.ndarray | None) -> np.ndarray:
    """Per block, the squared error (weighted by `weights` if given) against `values` (in
    their dtype) of `codes * scales` in float32, as the decoders compute it."""
    gap = values - (codes * scales[:, None]).astype(values.dtype, copy=False)
    return _dot(gap, gap, weights)


def _dot(a: np.ndarray, b: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
    """Per block (row), sum a b, each product times its weight if `weights`."""
    if weights is None:
        return np.einsum("ij,ij->i", a, b)
    return np.einsum("ij,ij,ij->i", a, b, weights)
