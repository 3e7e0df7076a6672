"""The multi-output convention.

An op that yields several tensors (Split, TopK, LSTM, If, Loop, ...) makes a *tuple-valued*
node whose shape is a tuple of `Shape`s. Its outputs are read by `TupleGet(index)` nodes,
and only `TupleGet` may consume a tuple-valued node. The builder's `Graph.unpack` adds them.
"""

from __future__ import annotations

from rlx.errors import ShapeError
from rlx.ir.ops.base import Op
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = ["TupleGet"]


@dataclass(frozen=True)
class TupleGet(Op):
    index: int

    def infer(self, inputs):
        (parts,) = inputs
        if not isinstance(parts, tuple):
            raise ShapeError("TupleGet: input is not tuple-valued")
        if not 0 <= self.index < len(parts):
            raise ShapeError(f"TupleGet: index {self.index} out of range for {len(parts)} outputs")
        return parts[self.index]
