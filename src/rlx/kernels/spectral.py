"""The DFT kernel (NumPy's FFT): that of `rlx.ir.ops.spectral`."""

from __future__ import annotations

import numpy as np

from rlx.ir.ops.spectral import DFT
from rlx.kernels.elementwise import widen_half
from rlx.kernels.registry import kernel

__all__ = ["dft"]


@kernel(DFT)
def dft(node, x):
    """numpy's FFT on the signal as onnx.reference builds it (real, or real + 1j * imag: a
    complex64 signal for float32), so that its float32 rounding is the reference's."""
    op = node.op
    axis = op.axis % x.ndim
    x = widen_half(x)
    signal = x[..., 0] if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]
    if op.inverse and op.onesided:
        out = np.fft.irfft(signal, op.length, axis)[..., None]
    else:
        y = (np.fft.ifft if op.inverse else np.fft.fft)(signal, op.length, axis)
        if op.onesided:
            y = y[(slice(None),) * axis + (slice(0, op.length // 2 + 1),)]
        out = np.stack([y.real, y.imag], axis=-1)
    return out.astype(node.shape.dtype.numpy, copy=False)
