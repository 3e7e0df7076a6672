"""Algebraic simplification: remove operations that provably give back their input.

Rules (each a small function below, chosen by op type):

- `x * 1`, `1 * x`, `x + 0`, `0 + x`, `x - 0`, `x / 1` -> `x`, when the constant is all ones
  (zeros) and broadcasting it changes neither the output's shape nor its dtype;
- `Transpose(Transpose(x, p), q)` -> one Transpose with the composed permutation, and an
  identity Transpose -> `x`;
- `Reshape(Reshape(x))` -> one Reshape of `x`, and a Reshape to `x`'s own shape -> `x`
  (static target shapes only);
- `Cast` to the dtype `x` already has -> `x`; `Identity(x)` -> `x`;
- `Squeeze(Unsqueeze(x, axes), axes)` -> `x`.

No rule changes what a NaN or inf produces (there is no `x * 0 -> 0` nor `x - x -> 0`). One
IEEE subtlety is accepted, as in other graph optimisers: `x + 0.0` turns `-0.0` into `+0.0`,
which the rewrite to `x` does not; the two compare equal.

Names belong to nodes: a node replaced by an existing one disappears with its name (a graph
output pointing at it now points at the survivor, which keeps its own name); a node replaced
by a NEW node (a composed Transpose or Reshape) hands its name to it.
"""

from __future__ import annotations

import logging

import numpy as np

from rlx.ir.graph import Graph, Node
from rlx.ir.ops.base import Op
from rlx.ir.ops.elementwise import Binary, BinaryOp, Cast, Identity
from rlx.ir.ops.shaping import Reshape, Squeeze, Transpose, Unsqueeze
from rlx.ir.rewrite import Rewriter, Rule, constant_value, rewrite_nodes
from rlx.ir.shape import normalize_axis

__all__ = ["algebraic_simplify"]

log = logging.getLogger(__name__)


def algebraic_simplify(graph: Graph) -> tuple[Graph, int]:
    """Apply the rules above in one forward sweep; returns (graph, nodes simplified)."""

    def simplify(rw: Rewriter, node: Node) -> bool:
        rule = _RULES.get(type(node.op))
        return rule is not None and rule(rw, node)

    new, count = rewrite_nodes(graph, simplify)
    log.info("algebraic_simplify %r: %d node(s) simplified", graph.name, count)
    return new, count


def _forward(rw: Rewriter, node: Node, survivor: int, why: str) -> bool:
    """Let the (new) node `survivor` stand for `node`."""
    rw.replace(node.id, survivor)
    log.debug("simplify: %s is %s: replaced by %s", node.label, why, rw.target.node(survivor).label)
    return True


def _rebuild(rw: Rewriter, node: Node, op: Op, source: int, why: str) -> bool:
    """Compute `node` as `op(source)` instead (the new node takes `node`'s name)."""
    new_id = rw.substitute(node, op, (source,), node.shape)
    log.debug("simplify: %s is %s: now %s", node.label, why, rw.target.node(new_id).label)
    return True


# -- x*1, x+0, x-0, x/1 -------------------------------------------------------------------------
# op -> ((neutral value, index of the constant operand), ...): the other operand survives
_NEUTRAL = {
    BinaryOp.MUL: ((1, 1), (1, 0)),
    BinaryOp.ADD: ((0, 1), (0, 0)),
    BinaryOp.SUB: ((0, 1),),
    BinaryOp.DIV: ((1, 1),),
}


def _neutral_operand(rw: Rewriter, node: Node) -> bool:
    assert isinstance(node.op, Binary)  # the rule of Binary nodes
    for value, side in _NEUTRAL.get(node.op.op, ()):
        kept = rw.node(node.inputs[1 - side])
        if kept.shape != node.shape:
            continue  # checked first: the constant may be a large weight, not worth a read
        const = constant_value(rw.node(node.inputs[side]))
        if const is not None and np.all(const == value):
            return _forward(rw, node, kept.id, f"{node.op.op.value} by all-{value} constant")
    return False


# -- Transpose ----------------------------------------------------------------------------------
def _transpose(rw: Rewriter, node: Node) -> bool:
    x = rw.node(node.inputs[0])
    assert isinstance(node.op, Transpose)  # the rule of Transpose nodes
    perm = node.op.resolved_perm(x.tensor_shape.rank)
    source = x
    if isinstance(x.op, Transpose):
        inner = x.op.resolved_perm(rw.target.node(x.inputs[0]).tensor_shape.rank)
        perm = tuple(inner[p] for p in perm)
        source = rw.target.node(x.inputs[0])
    if perm == tuple(range(len(perm))):
        return _forward(rw, node, source.id, "an identity transpose")
    if source is x:
        return False
    return _rebuild(rw, node, Transpose(perm), source.id, "a transpose of a transpose")


# -- Reshape ------------------------------------------------------------------------------------
def _is_static_reshape(node: Node) -> bool:
    return isinstance(node.op, Reshape) and node.op.shape is not None


def _reshape(rw: Rewriter, node: Node) -> bool:
    out = node.tensor_shape
    if not _is_static_reshape(node) or not out.is_static:
        return False
    x = rw.node(node.inputs[0])
    source = rw.target.node(x.inputs[0]) if _is_static_reshape(x) else x
    if source.tensor_shape.dims == out.dims:
        return _forward(rw, node, source.id, "a reshape to its input's shape")
    if source is x:
        return False
    # the target is spelled out in full: a 0 in it is a real size, not "copy this dim"
    op = Reshape(tuple(int(d) for d in out.dims), allowzero=0 in out.dims)  # static
    return _rebuild(rw, node, op, source.id, "a reshape of a reshape")


# -- Cast, Identity, Squeeze(Unsqueeze) ---------------------------------------------------------
def _cast(rw: Rewriter, node: Node) -> bool:
    x = rw.node(node.inputs[0])
    assert isinstance(node.op, Cast)  # the rule of Cast nodes
    return x.tensor_shape.dtype == node.op.to and _forward(rw, node, x.id,
                                                           "a cast to the same dtype")


def _identity(rw: Rewriter, node: Node) -> bool:
    return _forward(rw, node, rw.id(node.inputs[0]), "an Identity")


def _squeeze(rw: Rewriter, node: Node) -> bool:
    x = rw.node(node.inputs[0])
    assert isinstance(node.op, Squeeze)  # the rule of Squeeze nodes
    if node.op.axes is None or not isinstance(x.op, Unsqueeze) or x.op.axes is None:
        return False
    rank = x.tensor_shape.rank
    squeezed = {normalize_axis(a, rank) for a in node.op.axes}
    inserted = {normalize_axis(a, rank) for a in x.op.axes}
    if squeezed != inserted:
        return False
    return _forward(rw, node, x.inputs[0], "an unsqueeze undone")


_RULES: dict[type, Rule] = {
    Binary: _neutral_operand,
    Transpose: _transpose,
    Reshape: _reshape,
    Cast: _cast,
    Identity: _identity,
    Squeeze: _squeeze,
}
