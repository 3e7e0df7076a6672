"""Fold a per-channel scale and shift after a Conv into its weight and bias.

Exporters often write an inference BatchNorm as `Mul(Conv(x, W, b), s)` then `Add(·, c)`
with constant `s`, `c` holding one value per output channel (or one in all), which
`fold_batchnorm` does not see. As the Conv's own weight and bias they cost nothing:

    W'[m] = W[m] * s[m],   b'[m] = b[m] * s[m] + c[m]

The fast profile needs it (`rlx.baking.fast`): an int8 Conv can then quantise its output
after its Relu, the form onnxruntime runs as one QLinearConv, where with the Mul and Add
between them its output is quantised twice (measured on a CRNN whose BatchNorms are
exported this way: every Conv's error at its output alone about doubled).

Only when the Conv's weight and bias are constants and each folded node is the only reader
of the one before (and not a graph output). The new values are computed in float64 and
stored as float32; the result takes the last folded node's name.
"""

from __future__ import annotations

import logging

import numpy as np

from rlx.ir.dtype import DType
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.elementwise import Binary, BinaryOp
from rlx.ir.ops.windows import Conv
from rlx.ir.rewrite import Rewriter, constant_value

__all__ = ["fold_channel_scales"]

log = logging.getLogger(__name__)


def fold_channel_scales(graph: Graph) -> tuple[Graph, int]:
    """`graph` with every foldable Mul / Add after a Conv folded into it (module doc), and
    the number of Convs that took one."""
    users = graph.users()
    folds: dict[int, tuple[Node, np.ndarray, np.ndarray]] = {}  # last node -> Conv, W, b
    absorbed: set[int] = set()
    for node in graph.nodes():
        found = _fold(graph, node, users)
        if found is not None:
            chain, weight, bias = found
            folds[chain[-1].id] = (node, weight, bias)
            absorbed.update(n.id for n in (node, *chain[:-1]))
    if not folds:
        return graph, 0
    rw = Rewriter(graph)
    for node in graph.nodes():
        if node.id in absorbed:
            rw.drop(node.id)
        elif node.id in folds:
            conv, weight, bias = folds[node.id]
            inputs = (rw.id(conv.inputs[0]), rw.emit_constant(weight), rw.emit_constant(bias))
            rw.substitute(node, conv.op, inputs, node.shape)
        else:
            rw.copy(node)
    log.info("fold_channel_scales %r: %d Conv(s) took a scale or shift", graph.name, len(folds))
    return rw.finish(), len(folds)


def _fold(graph: Graph, conv: Node, users: list[list[int]]
          ) -> tuple[list[Node], np.ndarray, np.ndarray] | None:
    """(the Mul / Add chain after `conv`, the folded weight, the folded bias), or None."""
    if not isinstance(conv.op, Conv) or conv.tensor_shape.dtype is not DType.F32:
        return None
    weight = constant_value(graph.node(conv.inputs[1]))
    bias = constant_value(graph.node(conv.inputs[2])) if len(conv.inputs) == 3 \
        else None if weight is None else np.zeros(weight.shape[0], np.float32)
    if weight is None or bias is None:
        return None
    w, b = weight.astype(np.float64), bias.astype(np.float64).reshape(-1)
    chain: list[Node] = []
    last = conv
    for kind in (BinaryOp.MUL, BinaryOp.ADD):
        if len(users[last.id]) != 1 or last.id in graph.outputs:
            break
        user = graph.node(users[last.id][0])
        per = _per_channel(graph, user, last.id, kind, len(b))
        if per is None:
            continue
        if kind is BinaryOp.MUL:
            w, b = w * per.reshape(-1, *[1] * (w.ndim - 1)), b * per
        else:
            b = b + per
        chain.append(user)
        last = user
    if not chain:
        return None
    return chain, w.astype(np.float32), b.astype(np.float32)


def _per_channel(graph: Graph, node: Node, source: int, kind: BinaryOp,
                 channels: int) -> np.ndarray | None:
    """The [channels] values `node` multiplies / adds to `source`'s value channel by
    channel (axis 1), or None when it is not such a node."""
    if not isinstance(node.op, Binary) or node.op.op is not kind or node.is_tuple \
            or node.tensor_shape != graph.node(source).tensor_shape:
        return None
    other = node.inputs[1] if node.inputs[0] == source else node.inputs[0]
    value = constant_value(graph.node(other))
    rank = node.tensor_shape.rank
    if value is None or value.dtype != np.float32 or value.ndim > rank:
        return None
    full: tuple[int, ...] = (1,) * (rank - value.ndim) + tuple(value.shape)
    if any(n != 1 for axis, n in enumerate(full) if axis != 1) or full[1] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(-1).astype(np.float64), (channels,))
