"""onnxruntime's QLinearAdd arithmetic, as tables of the 8-bit codes built at import.

onnxruntime's x86 kernel (MLAS, AVX2) adds the raw codes of its operands p and q with fused
multiply-adds, in float32, one rounding each:

    rp, rq = sp / sc, sq / sc
    fixed  = zc - fma(zp, rp, rq * zq)
    C      = saturate(rint(fma(p, rp, fma(q, rq, fixed))))

where p is input A and q input B, except when A is the operand broadcast along the innermost
dimension (its input0-scalar path passes B as p). The product p * rp is never rounded on its
own: a float32 body (numpy, or OpenVINO, which fuses or not as it likes) lands a step off
on 1 in 700 or so of the 65,536 code pairs (90 of them for one set measured).

Here C is read from tables: y = (high_p[p] + high_q[q]) + (low_p[p] + low_q[q]) in float32,
where each inner sum is exact (the parts sit on grids narrow enough for 24 bits), so the
only rounding is the last addition's, onto what the fused product-sum rounds to. That holds
whenever the low parts keep every bit of p * rp + fma(q, rq, fixed), which is checked on all
65,536 pairs; where it fails, the table holds C itself for every pair (64 KiB).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["add_tables", "fma32", "mlas_add"]

_F32 = np.float32
_F64 = np.float64


def fma32(x, y, z) -> np.ndarray:
    """float32(x * y + z) rounded once, for x * y exact in float64 (a code or zero point times
    a float32): the float64 sum rounded to odd, whose rounding to float32 is then the only
    one (53 >= 24 + 2 bits)."""
    product = np.asarray(x, _F64) * np.asarray(y, _F64)
    addend = np.asarray(z, _F32).astype(_F64)
    total = np.asarray(product + addend)
    late = total - product
    error = (product - (total - late)) + (addend - late)  # total + error is the exact sum
    even = (total.view(np.int64) & 1) == 0
    odd = np.where((error != 0) & even, np.nextafter(total, np.copysign(np.inf, error)), total)
    return odd.astype(_F32)


def _fixed(rp, zp, rq, zq, zc) -> np.float32:
    return _F32(_F32(zc) - fma32(zp, rp, _F32(rq) * _F32(zq)))


def mlas_add(p, q, rp, zp, rq, zq, zc) -> np.ndarray:
    """The kernel's float32 sum before rounding, for codes p and q in its operand order."""
    return fma32(p, rp, fma32(q, rq, _fixed(rp, zp, rq, zq, zc)))


def add_tables(codes: np.ndarray, rp, zp, rq, zq, zc) -> list[np.ndarray]:
    """[high_p, low_p, high_q, low_q] float32 tables over `codes` (all 256, in order) whose
    sums give the kernel's output on every pair, or [C] (uint8 / int8 [65536], indexed
    p * 256 + q) when they do not."""
    terms_p = codes.astype(_F64) * _F64(_F32(rp))  # exact: an 8-bit code times a float32
    terms_q = fma32(codes, rq, _fixed(rp, zp, rq, zq, zc)).astype(_F64)
    largest = float(np.abs(terms_p).max() + np.abs(terms_q).max())
    unit = 2.0 ** (math.ceil(math.log2(largest + 1.0)) - 22)  # the high parts' grid
    high_p, low_p = _split(terms_p, unit)
    high_q, low_q = _split(terms_q, unit)
    split = (high_p[:, None] + high_q[None, :]) + (low_p[:, None] + low_q[None, :])
    info = np.iinfo(codes.dtype)
    want = mlas_add(codes[:, None], codes[None, :], rp, zp, rq, zq, zc)
    if np.array_equal(_saturated(split, info), _saturated(want, info)):
        return [high_p, low_p, high_q, low_q]
    return [_saturated(want, info).astype(codes.dtype).reshape(-1)]


def _split(terms: np.ndarray, unit: float) -> tuple[np.ndarray, np.ndarray]:
    """terms = high + low: high a multiple of `unit`, low in [0, unit] on a grid 2^23 times
    finer (rounded to it; exact where the term has no finer bits)."""
    high = np.floor(terms / unit) * unit
    fine = unit * 2.0 ** -23
    low = np.round((terms - high) / fine) * fine
    return high.astype(_F32), low.astype(_F32)


def _saturated(y: np.ndarray, info: np.iinfo) -> np.ndarray:
    return np.clip(np.rint(y), info.min, info.max)
