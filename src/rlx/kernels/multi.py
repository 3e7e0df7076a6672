"""The projection of one output out of a tuple-valued node."""

from __future__ import annotations

from rlx.ir.ops.multi import TupleGet
from rlx.kernels.registry import kernel

__all__ = ["tuple_get"]


@kernel(TupleGet)
def tuple_get(node, parts):
    return parts[node.op.index]
