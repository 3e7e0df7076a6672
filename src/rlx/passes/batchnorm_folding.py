"""Fold BatchNormalization (inference) into the convolution or matmul before it.

`BN(y) = y * a + (beta - mean * a)` with `a = scale / sqrt(var + eps)` per channel, so when
y is a `Conv` (optionally with bias) or a `MatMul` (optionally + a bias `Add`) whose weights
are Constants, the BN disappears into them:

- `Conv(x, W[, b]) -> BN`: `W'[m] = W[m] * a[m]`, `b' = (b - mean) * a + beta` (a Conv
  always gets the bias);
- `MatMul(x, W[, + b]) -> BN` for a 2-D `[N, C]` result, where BN's channel axis is the last
  one: `W'[:, c] = W[:, c] * a[c]` and an `Add` of `b'`.

Only when the BN's scale/bias/mean/var are Constants and the folded node has no reader but
the chain (nor is a graph output). The new weights are computed in float64 and stored in the
weight's dtype (deferred when large: `rlx.deferred`); the result takes the BN node's name.
Run it after `specialize` and `fold_constants` (so weights are Constants) and before
weight packing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from rlx.deferred import Payload, byte_view, compute
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.channelwise import BatchNormInference
from rlx.ir.ops.elementwise import Binary, BinaryOp
from rlx.ir.ops.linalg import MatMul
from rlx.ir.ops.sources import Constant
from rlx.ir.ops.windows import Conv
from rlx.ir.rewrite import Rewriter, constant_value
from rlx.ir.shape import Shape

__all__ = ["fold_batchnorm"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Fold:
    """One BN to fold: the producer chain it reads and the folded weight and bias."""

    bn: Node
    chain: tuple[Node, ...]  # the nodes folded away: the Conv/MatMul, then the Add if any
    weight: tuple[int, Payload]  # (old weight node, new value: deferred when large)
    bias: tuple[int | None, np.ndarray]  # (old bias node or None, new value)

    def rewritten(self, users: list[list[int]], outputs: set[int]) -> dict[int, Payload]:
        """Old weight/bias Constants that only this chain reads: they take the new values
        (and keep their names, which name the weight rows)."""
        chain = {n.id for n in self.chain}
        return {node: value for node, value in (self.weight, self.bias)
                if node is not None and node not in outputs and set(users[node]) <= chain}


def fold_batchnorm(graph: Graph) -> tuple[Graph, int]:
    """Fold every foldable BatchNormInference; returns (graph, BNs folded)."""
    folds = _find(graph)
    if not folds:
        return graph, 0
    users = graph.users()
    by_bn = {f.bn.id: f for f in folds}
    absorbed = {n.id for f in folds for n in f.chain}
    replaced = {k: v for f in folds for k, v in f.rewritten(users, set(graph.outputs)).items()}
    rw = Rewriter(graph)
    for node in graph.nodes():
        if node.id in absorbed:
            rw.drop(node.id)
        elif node.id in replaced:
            rw.substitute_constant(node, replaced[node.id])
        elif node.id in by_bn:
            _emit(rw, by_bn[node.id], replaced)
        else:
            rw.copy(node)
    log.info("fold_batchnorm %r: %d BatchNorm(s) folded", graph.name, len(folds))
    return rw.finish(), len(folds)


def _find(graph: Graph) -> list[_Fold]:
    users = graph.users()
    outputs = set(graph.outputs)

    def only_feeds(node: Node, reader: int) -> bool:
        return node.id not in outputs and users[node.id] == [reader]

    folds = []
    for bn in graph.nodes():
        if not isinstance(bn.op, BatchNormInference):
            continue
        params = [p for p in (constant_value(graph.node(i)) for i in bn.inputs[1:])
                  if p is not None]
        producer = graph.node(bn.inputs[0])
        if len(params) != len(bn.inputs) - 1 or not only_feeds(producer, bn.id):
            continue
        found = _conv(graph, producer) or _matmul(graph, producer, only_feeds)
        if found is None:
            continue
        chain, weight, (bias_id, bias) = found
        shape = weight.tensor_shape  # a constant's: static
        dims, dtype = tuple(int(d) for d in shape.dims), shape.dtype.numpy
        scale, beta, mean, var = (p.astype(np.float64) for p in params)
        a = scale / np.sqrt(var + bn.op.epsilon)
        per_out = a.reshape(-1, *[1] * (len(dims) - 1)) if isinstance(chain[0].op, Conv) \
            else a  # a Conv's output channels are W's axis 0, a MatMul's its axis 1
        new_bias = beta - mean * a if bias is None else bias.astype(np.float64) * a + \
            beta - mean * a
        assert isinstance(weight.op, Constant)  # _conv and _matmul find constant weights
        scaled = compute(_scaled, (weight.op.data, per_out), (dims, dtype), dims, dtype)
        folds.append(_Fold(bn, chain, (weight.id, scaled), (bias_id, new_bias.astype(dtype))))
        log.debug("fold_batchnorm: %s folds into %s", bn.label, chain[0].label)
    return folds


def _scaled(dims: tuple[int, ...], dtype: np.dtype, weight: np.ndarray,
            per_out: np.ndarray) -> np.ndarray:
    """The weight (its bytes) times the BN's per-channel factor, in float64."""
    values = byte_view(weight).view(dtype).reshape(dims)
    return (values.astype(np.float64) * per_out).astype(dtype)


def _weight(graph: Graph, node_id: int) -> Node | None:
    """The node if it is a Constant with bytes and a static shape (not read)."""
    node = graph.node(node_id)
    shape = node.shape
    if not isinstance(node.op, Constant) or not isinstance(shape, Shape) \
            or not shape.is_static or node.op.is_stripped:
        return None
    return node


def _conv(graph: Graph, node: Node):
    if not isinstance(node.op, Conv):
        return None
    weight = _weight(graph, node.inputs[1])
    bias_id = node.inputs[2] if len(node.inputs) == 3 else None
    bias = None if bias_id is None else constant_value(graph.node(bias_id))
    if weight is None or (bias_id is not None and bias is None):
        return None
    return (node,), weight, (bias_id, bias)


def _matmul(graph: Graph, node: Node, only_feeds):
    """A 2-D MatMul with a constant weight, or an Add of a constant [C] bias to one."""
    chain: tuple[Node, ...] = (node,)
    bias_id, bias = None, None
    if isinstance(node.op, Binary) and node.op.op is BinaryOp.ADD:
        for side in (0, 1):
            inner = graph.node(node.inputs[side])
            value = constant_value(graph.node(node.inputs[1 - side]))
            if isinstance(inner.op, MatMul) and value is not None and \
                    only_feeds(inner, node.id) and value.size == node.tensor_shape.dims[-1]:
                chain, bias_id, bias = (inner, node), node.inputs[1 - side], value.reshape(-1)
                break
        else:
            return None
    matmul = chain[0]
    if not isinstance(matmul.op, MatMul) or matmul.tensor_shape.rank != 2:
        return None
    weight = _weight(graph, matmul.inputs[1])
    if weight is None or weight.tensor_shape.rank != 2:
        return None
    return chain, weight, (bias_id, bias)


def _emit(rw: Rewriter, fold: _Fold, replaced: dict[int, Payload]) -> None:
    """The folded Conv, or MatMul + Add, in place of the BN (taking its name)."""

    def constant(old: int | None, value: Payload) -> int:
        return rw.id(old) if old in replaced else rw.emit_constant(value)

    head = fold.chain[0]
    weight, bias = constant(*fold.weight), constant(*fold.bias)
    x = rw.id(head.inputs[0])
    if isinstance(head.op, Conv):
        rw.substitute(fold.bn, head.op, (x, weight, bias), fold.bn.shape)
    else:
        product = rw.emit(MatMul(), (x, weight), head.shape)
        rw.substitute(fold.bn, Binary(BinaryOp.ADD), (product, bias), fold.bn.shape)
