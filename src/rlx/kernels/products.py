"""The product of two matrices by the cheaper of NumPy's two calls into BLAS.

`ndarray.dot` and `np.matmul` of two float matrices make the same BLAS call (the same
bits), but `dot` sets it up for less: [1, 64] @ [64, 12] 0.50 us against 1.06, a GRU step's
[1, 256] @ [256, 768] 8.4 against 9.4, [64, 64] @ [64, 125] 10.2 against 10.6. From larger
outputs on it ran as fast or slower ([32, 64] @ [64, 600] 21.4 against 20.2, [512, 384] @
[384, 384] twice matmul's; thread CPU time, the runtime's kept heap), and there a batched
matmul of [1, M, K] @ [1, 1, K, N] ran faster than either 2-D call ([512, 128] @ [128, 160]
108 us, 2-D matmul 121): convolutions keep theirs past `DOT_OUTPUTS`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DOT_OUTPUTS", "matrix_product", "grouped_product"]

DOT_OUTPUTS = 16384
"""Products of at most this many outputs go through `ndarray.dot`."""


def matrix_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b of two matrices (2-D arrays)."""
    if a.shape[0] * b.shape[1] <= DOT_OUTPUTS:
        return a.dot(b)
    return np.matmul(a, b)


def grouped_product(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """w [g, M, K] @ x [N, g, K, P], a convolution's GEMM: [N, g, M, P], or [M, P] for one
    image of one group with at most `DOT_OUTPUTS` outputs, one `ndarray.dot` (the caller
    reshapes either)."""
    if x.shape[0] == x.shape[1] == 1 and w.shape[1] * x.shape[3] <= DOT_OUTPUTS:
        return w[0].dot(x[0, 0])
    return np.matmul(w, x)
