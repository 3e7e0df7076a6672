"""Run a multi-pass elementwise formula over cache-sized blocks.

A formula such as erf's rational approximation is ~20 NumPy passes. Over a whole large
array each pass streams it through memory; over blocks of `BLOCK` elements (128 KiB of
float32, well inside L2) the passes after the first hit the cache, which makes such a
formula about 5x cheaper: erf of 393k floats costs about what one `np.tanh` does. The
formula writes into `out` and may use scratch buffers of the block's size, allocated once
per call.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rlx.kernels import parallel

__all__ = ["BLOCK", "blockwise"]

BLOCK = 32768
"""Elements per block: 128 KiB of float32, so a formula's few buffers stay in L2."""

Formula = Callable[..., None]
"""`formula(out, x, *scratch)`: writes f(x) into `out`; `out` may be `x` itself."""


def blockwise(formula: Formula, x: np.ndarray, out: np.ndarray | None = None,
              scratch: int = 0) -> np.ndarray:
    """f(x) into `out` (a new array when None; `out` may be `x`) in blocks of `BLOCK`,
    with `scratch` temporary buffers of a block's size passed after `x`.

    Non-contiguous arrays run as one block (a flat view would be a copy). Arrays of
    `parallel.PARALLEL_MIN` elements or more are cut into one contiguous part per thread
    the BLAS limit allows (`parallel.workers`)."""
    if out is None:
        out = np.empty(x.shape, x.dtype)
    n = x.size
    if n <= BLOCK or not (x.flags.c_contiguous and out.flags.c_contiguous):
        formula(out, x, *(np.empty(x.shape, x.dtype) for _ in range(scratch)))
        return out
    flat_x, flat_out = x.reshape(-1), out.reshape(-1)
    threads = parallel.workers() if n >= parallel.PARALLEL_MIN else 1
    if threads == 1:
        _blocks(formula, flat_out, flat_x, scratch)
        return out
    per = -(-n // threads // BLOCK) * BLOCK  # whole blocks per part
    parts = [(formula, flat_out[i:i + per], flat_x[i:i + per], scratch)
             for i in range(0, n, per)]
    parallel.run_parts(_blocks, parts)
    return out


def _blocks(formula: Formula, flat_out: np.ndarray, flat_x: np.ndarray, scratch: int) -> None:
    n = flat_x.size
    buffers = [np.empty(min(BLOCK, n), flat_x.dtype) for _ in range(scratch)]
    for start in range(0, n, BLOCK):
        stop = min(start + BLOCK, n)
        size = stop - start
        formula(flat_out[start:stop], flat_x[start:stop], *(b[:size] for b in buffers))
