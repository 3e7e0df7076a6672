"""Per-channel kernels of image models: those of `rlx.ir.ops.channelwise`. Half-precision
inputs are computed in float32 and cast back; float64 stays float64 (rlx.kernels.precision).
"""

from __future__ import annotations

import numpy as np

from rlx.ir.ops.channelwise import BatchNormInference, InstanceNorm, PRelu
from rlx.kernels.nn import standardize
from rlx.kernels.precision import compute_dtype, to_compute
from rlx.kernels.registry import kernel

__all__ = ["batch_norm", "instance_norm", "prelu"]


def _per_channel(v: np.ndarray, ndim: int, dtype: np.dtype) -> np.ndarray:
    """A [C] parameter shaped to broadcast over axis 1 of a rank-`ndim` tensor."""
    return v.astype(dtype, copy=False).reshape(-1, *[1] * (ndim - 2))


@kernel(BatchNormInference)
def batch_norm(node, x, scale, bias, mean, var):
    dt = compute_dtype(x.dtype)
    # folded into one multiply-add per element: y = x * a + (bias - mean * a)
    a = scale.astype(dt) / np.sqrt(var.astype(dt) + node.op.epsilon)
    shift = bias.astype(dt) - mean.astype(dt) * a
    y = to_compute(x) * _per_channel(a, x.ndim, dt) + _per_channel(shift, x.ndim, dt)
    return y.astype(x.dtype, copy=False)


@kernel(InstanceNorm)
def instance_norm(node, x, scale, bias):
    y = standardize(x, 2, node.op.epsilon)
    y = y * _per_channel(scale, x.ndim, y.dtype) + _per_channel(bias, x.ndim, y.dtype)
    return y.astype(x.dtype, copy=False)


@kernel(PRelu)
def prelu(node, x, slope):
    return np.where(x < 0, x * slope, x).astype(x.dtype, copy=False)
