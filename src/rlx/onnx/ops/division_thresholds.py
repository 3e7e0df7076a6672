"""Quantising by a division by a constant scale, exactly, on an engine that will not divide.

onnxruntime quantises a float32 x as saturate(rint(x / scale + zero)), each step rounded to
float32. OpenVINO turns a division by a constant into a product with its reciprocal, which
lands a step off when x / scale is a rounding tie (QLinearAveragePool: 1 of 15,360 outputs).
That code is monotone in x, so it is read from thresholds instead: T[i] is the least float32
x whose code is at least the type's lowest + i, found now by bisection over the float32s in
onnxruntime's arithmetic. The body takes any code k0 within one step (from the reciprocal
product) and corrects it by two exact comparisons: k0 + (x >= T[k0 + 1]) - (x < T[k0]).
"""

from __future__ import annotations

import numpy as np

__all__ = ["division_thresholds", "divided_codes"]

_F32 = np.float32
_MAX = np.finfo(_F32).max


def divided_codes(x: np.ndarray, scale, zero, dtype) -> np.ndarray:
    """saturate(rint(float32(float32(x / scale) + zero))), onnxruntime's arithmetic."""
    info = np.iinfo(dtype)
    with np.errstate(over="ignore"):
        y = (np.asarray(x, _F32) / _F32(scale)).astype(_F32) + _F32(zero)
    return np.clip(np.rint(y), info.min, info.max)


def division_thresholds(scale, zero, dtype) -> np.ndarray:
    """float32 [257]: T[0] = -inf, T[i] the least float32 whose code is >= lowest + i,
    T[256] = +inf (no float32 reaches the code past the highest)."""
    low = int(np.iinfo(dtype).min)
    wanted = np.arange(low + 1, low + 256, dtype=np.int64)
    lo = np.full(wanted.shape, _order(np.array(-_MAX, _F32)), np.int64)
    hi = np.full(wanted.shape, _order(np.array(_MAX, _F32)), np.int64)
    while (lo < hi).any():  # the least order key whose float32 reaches each wanted code
        mid = (lo + hi) // 2
        reached = divided_codes(_from_order(mid), scale, zero, dtype) >= wanted
        hi = np.where(reached, mid, hi)
        lo = np.where(reached, lo, mid + 1)
    inner = _from_order(lo)
    return np.concatenate([[-np.inf], inner, [np.inf]]).astype(_F32)


def _order(x: np.ndarray) -> np.ndarray:
    """float32 -> int64 keys in the floats' order (negative floats' magnitude bits flipped)."""
    bits = np.asarray(x, _F32).view(np.int32).astype(np.int64)
    return np.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


def _from_order(key: np.ndarray) -> np.ndarray:
    bits = np.where(key < 0, key ^ 0x7FFFFFFF, key).astype(np.int32)
    return bits.view(_F32)
