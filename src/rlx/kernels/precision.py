"""The dtype the window, normalisation and resize kernels compute in: half precision widened
to float32 (numpy has no fast f16 GEMM, and sums need the range), float64 and integers in
float64, so that a kernel casts back once at its end."""

from __future__ import annotations

import numpy as np

__all__ = ["compute_dtype", "to_compute"]


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """float64 for float64 and integers (resize), else float32."""
    return np.dtype(np.float64 if dtype == np.float64 or dtype.kind in "iu" else np.float32)


def to_compute(x: np.ndarray) -> np.ndarray:
    """`x` in its `compute_dtype` (no copy when it is already)."""
    if x.dtype == np.float32:  # the common case, without working out the dtype
        return x
    return x.astype(compute_dtype(x.dtype), copy=False)
