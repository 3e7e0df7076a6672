"""Ops whose axis is only known at run time: one If branch per possible axis.

Each branch is the op along one static axis; the branches are chained (`axis == 0 ? b0 :
(axis == 1 ? b1 : ...)`), every subgraph taking `(axis, x)` as its inputs. Shapes that
differ between branches become UNKNOWN, as for any If.
"""

from __future__ import annotations

from collections.abc import Callable

from rlx.ir import BinaryOp, CompareOp, DType, If, Shape
from rlx.onnx.emit import Builder, Emitter

__all__ = ["normalized_axis", "per_axis"]

Along = Callable[[int, Emitter, int], int]
"""`along(axis, emitter, x)`: the op along a static axis, built with `emitter`."""


def normalized_axis(s: Emitter, axis: int, rank: int) -> int:
    """A run-time axis (any integer node of one element) as a rank-0 i64 in [0, rank)."""
    axis = s.reshape(s.cast(axis, DType.I64), ())
    r = s.scalar(rank, DType.I64)
    return s.binary(BinaryOp.MOD, s.add(axis, r), r)


def per_axis(s: Emitter, x: int, axis: int, count: int, along: Along) -> int:
    """`along(a, ...)` for the a in [0, count) that the rank-0 i64 node `axis` holds."""
    shape = s.shape(x)

    def branch(a: int, otherwise: Builder | None = None) -> Builder:
        b = Builder(f"axis_{a}")
        at = b.graph.input("axis", Shape((), DType.I64))
        inner = b.graph.input("x", shape)
        if otherwise is None:
            out = along(a, b, inner)
        else:
            taken = b.compare(CompareOp.EQ, at, b.scalar(a, DType.I64))
            out = b.parts(b.emit(If(branch(a).graph, otherwise.graph), taken, at, inner),
                          1)[0]
        b.graph.set_outputs([out])
        return b

    if count == 1:
        return along(0, s, x)
    chain = branch(count - 1)
    for a in reversed(range(1, count - 1)):
        chain = branch(a, chain)
    taken = s.compare(CompareOp.EQ, axis, s.scalar(0, DType.I64))
    return s.parts(s.emit(If(branch(0).graph, chain.graph), taken, axis, x), 1)[0]
