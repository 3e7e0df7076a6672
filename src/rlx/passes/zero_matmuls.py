"""Skip-zero: `x @ W` with W an all-zero float constant becomes a zero constant.

Only the right operand is checked (as in the seed) and only when the output shape is static,
so the zero constant can be written out. The zero constant takes the MatMul's name.

Exactness: the rewrite is exact for finite `x`. If `x` holds inf or NaN, the real product
would have NaN where the rewrite gives 0 (0 * inf = NaN); the exact profile accepts this
IEEE edge case, as the reference does.
"""

from __future__ import annotations

import logging

import numpy as np

from rlx.deferred import all_rows, compute
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.linalg import MatMul
from rlx.ir.rewrite import Rewriter, constant_payload, rewrite_nodes

__all__ = ["skip_zero_matmul"]

log = logging.getLogger(__name__)


def skip_zero_matmul(graph: Graph) -> tuple[Graph, int]:
    """Replace MatMuls by all-zero float weights with zero constants; returns (graph, count)."""
    new, count = rewrite_nodes(graph, _skip)
    log.info("skip_zero_matmul %r: %d matmul(s) replaced by zeros", graph.name, count)
    return new, count


def _all_zero(block: np.ndarray) -> bool:
    return not np.any(block)  # np.any treats NaN as non-zero and -0.0 as zero


def _skip(rw: Rewriter, node: Node) -> bool:
    if not isinstance(node.op, MatMul) or not node.tensor_shape.is_static:
        return False
    weight = rw.node(node.inputs[1])
    w = constant_payload(weight)
    if w is None or not weight.tensor_shape.dtype.is_float or not all_rows(w, _all_zero):
        return False
    shape = node.tensor_shape  # static: checked above
    dims = tuple(int(d) for d in shape.dims)
    rw.substitute_constant(node, compute(np.zeros, (), (dims, shape.dtype.numpy), dims,
                                         shape.dtype.numpy))  # deferred when large
    log.debug("skip_zero_matmul: %s reads all-zero weight %s: now a zero constant %s",
              node.label, weight.label, node.shape)
    return True
