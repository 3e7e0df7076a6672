"""Comparison, logic and select kernels: those of `rlx.ir.ops.logic`, imported only for a
graph that has one of them (issue 35)."""

from __future__ import annotations

import numpy as np

from rlx.ir.ops.logic import Compare, CompareOp, Logical, LogicalOp, Not, Where
from rlx.kernels.registry import kernel

__all__ = ["compare", "logical", "logical_not", "where"]


_COMPARE = {
    CompareOp.EQ: np.equal,
    CompareOp.NE: np.not_equal,
    CompareOp.LT: np.less,
    CompareOp.LE: np.less_equal,
    CompareOp.GT: np.greater,
    CompareOp.GE: np.greater_equal,
}


@kernel(Compare)
def compare(node, a, b):
    return np.asarray(_COMPARE[node.op.op](a, b))


_LOGICAL = {LogicalOp.AND: np.logical_and, LogicalOp.OR: np.logical_or,
            LogicalOp.XOR: np.logical_xor}


@kernel(Logical)
def logical(node, a, b):
    return np.asarray(_LOGICAL[node.op.op](a, b))


@kernel(Not)
def logical_not(node, x):
    return np.asarray(np.logical_not(x))  # a ufunc returns a NumPy scalar for rank 0


@kernel(Where)
def where(node, cond, a, b):
    return np.where(cond, a, b)
