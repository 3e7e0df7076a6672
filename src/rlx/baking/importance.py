"""How much each weight's values weigh in what they compute: the mean square, over the
calibration feeds, of the activation each value multiplies (llama.cpp's imatrix).

A MatMul output is sum_j x_j w_j, so rounding w_j moves it by x_j (w_j - q(w_j)): its
expected square is sum_j E[x_j^2] (w_j - q(w_j))^2 when the errors are uncorrelated. The
block-scale search (`rlx.codecs.scale_search`) minimises that, not the plain squared error,
where importance is given. For a MatMul's `[..., K, N]` weight the activation's channel is
its last axis K; for a Conv's `[M, C/groups, *kernel]` weight, the input channel (every
kernel position of a channel gets the channel's mean square, over all positions). Each feed
weighs alike. The means are reduced inside the graph (as extra outputs), so a run holds no
intermediate tensor beyond its usual life.

Identical constants (the same bytes, as `rlx.passes.dedupe_constants` finds them) share one
importance, the mean over all their readers: the bake merges identical encoded streams after
encoding, and weights given each their own readers' importance no longer encode alike (an
unrolled recurrent export's per-step copies of one weight: captcha-crnn's size file went
from 0.27x to 0.35x the exact one).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from rlx.ir.graph import Graph, Node
from rlx.ir.ops.elementwise import Binary, BinaryOp
from rlx.ir.ops.linalg import MatMul
from rlx.ir.ops.reduce import Reduce, ReduceOp
from rlx.ir.ops.sources import Constant
from rlx.ir.ops.windows import Conv
from rlx.ir.rewrite import Rewriter
from rlx.passes.dedupe_constants import constant_key, same_constant
from rlx.runtime.session import Session

__all__ = ["input_importance"]

Feeds = Mapping[str, np.ndarray]


def input_importance(graph: Graph, feeds: Sequence[Feeds]) -> dict[int, np.ndarray]:
    """Per constant weight of a MatMul (right operand) or Conv, by id: the mean square of
    the activation channel each of its values multiplies, float32, broadcastable to the
    weight's shape; the mean over the readers where several read it. One run per feed."""
    readers = [n for n in graph.nodes() if _weight_of(graph, n) is not None]
    if not readers or not feeds:
        return {}
    rw = Rewriter(graph)
    for node in graph.nodes():
        rw.copy(node)
    extra = []
    for node in readers:
        x = node.inputs[0]
        rank = graph.node(x).tensor_shape.rank
        axes = tuple(range(rank - 1)) if isinstance(node.op, MatMul) else \
            (0, *range(2, rank))
        square = rw.emit(Binary(BinaryOp.MUL), (rw.id(x), rw.id(x)))
        extra.append(rw.emit(Reduce(ReduceOp.MEAN, axes=axes, keepdims=False), (square,)))
    probed = rw.finish()
    probed.set_outputs([*(rw.id(o) for o in graph.outputs), *extra])
    compiled = Session().compile(probed)
    first = len(graph.outputs)
    sums: list[np.ndarray | float] = [0.0] * len(readers)
    for feed in feeds:
        values = compiled.run(feed)[first:]
        sums = [s + np.asarray(v, np.float64) for s, v in zip(sums, values, strict=True)]
    found: dict[int, list[np.ndarray]] = defaultdict(list)
    for node, total in zip(readers, sums, strict=True):
        weight = _weight_of(graph, node)
        assert weight is not None
        found[weight.id].append(_laid_out(node, weight, np.asarray(total) / len(feeds)))
    result = {}
    for copies in _identical(graph, list(found)):
        parts = [part for w in copies for part in found[w]]
        pooled = np.asarray(sum(parts) / len(parts), np.float32)
        result.update(dict.fromkeys(copies, pooled))
    return result


def _identical(graph: Graph, weights: list[int]) -> list[list[int]]:
    """`weights` (constant ids) grouped by identical bytes."""
    groups: dict[tuple, list[list[int]]] = defaultdict(list)
    for w in weights:
        node = graph.node(w)
        same_key = groups[constant_key(node)]
        group = next((g for g in same_key if same_constant(graph.node(g[0]), node)), None)
        if group is None:
            same_key.append([w])
        else:
            group.append(w)
    return [group for same_key in groups.values() for group in same_key]


def _weight_of(graph: Graph, node: Node) -> Node | None:
    """The constant weight `node` multiplies its first input by: a MatMul's right operand
    of rank 2 or more, or a Conv's kernel."""
    if not isinstance(node.op, (MatMul, Conv)):
        return None
    weight = graph.node(node.inputs[1])
    if not isinstance(weight.op, Constant) or weight.tensor_shape.rank < 2:
        return None
    return weight


def _laid_out(node: Node, weight: Node, channels: np.ndarray) -> np.ndarray:
    """The activation channels' mean squares laid out along `weight`'s axes: `[K, 1]` for
    a MatMul's `[..., K, N]`, `[M or 1, C/groups, 1, ...]` for a Conv's kernel (with
    groups, each output channel reads its group's inputs)."""
    dims = weight.tensor_shape.dims
    if isinstance(node.op, MatMul):
        return channels.reshape(-1, 1)
    assert isinstance(node.op, Conv)  # `_weight_of` lets MatMul and Conv through
    groups = node.op.groups
    ones = (1,) * (len(dims) - 2)
    if groups == 1:
        return channels.reshape(1, -1, *ones)
    per_group = channels.reshape(groups, -1)
    return np.repeat(per_group, int(dims[0]) // groups, axis=0).reshape(int(dims[0]), -1, *ones)
