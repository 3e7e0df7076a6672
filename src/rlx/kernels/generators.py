"""ShapeOf, Size, Range and Fill kernels (ONNX semantics), numpy only: those of
`rlx.ir.ops.generators`."""

from __future__ import annotations

import numpy as np

from rlx.ir.ops.generators import Fill, Range, ShapeOf, Size
from rlx.kernels.registry import kernel
from rlx.kernels.shaping import operand_ints

__all__ = ["shape_of", "size", "range_", "fill"]


@kernel(ShapeOf)
def shape_of(node, x):
    return np.array(x.shape[node.op.start:node.op.end], dtype=np.int64)


@kernel(Size)
def size(node, x):
    return np.array(x.size, dtype=np.int64)


@kernel(Range)
def range_(node, start, limit, delta):
    if delta == 0:
        raise ValueError("Range: delta is 0")
    if np.issubdtype(start.dtype, np.integer):
        # exact ceil division on Python ints: float64 would round large int64 bounds
        count = -((int(start) - int(limit)) // int(delta))
    else:
        count = int(np.ceil((limit - start) / delta))
    return start + np.arange(max(count, 0), dtype=start.dtype) * delta


@kernel(Fill)
def fill(node, shape=None):
    op = node.op
    return np.full(operand_ints(op.shape, shape), op.value, dtype=node.shape.dtype.numpy)
