"""Neural-network ops: convolution, pooling, normalisation, softmax, resize."""

from __future__ import annotations

__all__: list[str] = []
