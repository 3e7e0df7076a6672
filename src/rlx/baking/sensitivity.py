"""What the fast plan measures on the calibration feeds, each in one numpy run per feed.

- `calibrate`: the exact outputs and the range of every tensor an int8 node would quantise
  (of each channel of its last axis, for a MatMul's activation: `rlx.baking.smoothing`).
  The ranges are reduced inside the graph (ReduceMin / ReduceMax as extra outputs), so a
  run holds no intermediate tensor beyond its usual life.
- `local_errors`: each candidate's own error: beside the exact graph, a branch per
  candidate runs it in QDQ form on its exact inputs, and the graph reduces
  ||int8 - exact||^2 and ||exact||^2 at its output. The relative error ranks the
  candidates by sensitivity for the guard (`rlx.baking.fast`) at the cost of one run,
  where measuring each one alone at the outputs costs one run per candidate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from rlx.baking.int8 import ActivationRange, Candidate, Int8Emitter, plan_int8
from rlx.ir.graph import Graph
from rlx.ir.ops.elementwise import Binary, BinaryOp
from rlx.ir.ops.linalg import MatMul
from rlx.ir.ops.reduce import Reduce, ReduceOp
from rlx.ir.rewrite import Rewriter
from rlx.runtime.session import Session

__all__ = ["calibrate", "local_errors", "quantised_tensors"]

Feeds = Mapping[str, np.ndarray]


def quantised_tensors(graph: Graph, chosen: Sequence[Candidate]) -> list[int]:
    """The source ids an int8 plan of `chosen` quantises with their own range: its
    nodes' activations and outputs, and its chain's requantised nodes."""
    ids = {c.activation for c in chosen} | {c.output for c in chosen if c.output is not None}
    return sorted(ids | plan_int8(graph, list(chosen))[1].requantised)


def _copy(graph: Graph) -> Rewriter:
    rw = Rewriter(graph)
    for node in graph.nodes():
        rw.copy(node)
    return rw


def _with_outputs(rw: Rewriter, graph: Graph, extra: list[int]) -> Graph:
    g = rw.finish()
    g.set_outputs([*(rw.id(o) for o in graph.outputs), *extra])
    return g


def _reduce(rw: Rewriter, op: ReduceOp, value: int, axes: tuple[int, ...] | None = None
            ) -> int:
    return rw.emit(Reduce(op, axes=axes, keepdims=False), (value,))


def calibrate(graph: Graph, chosen: Sequence[Candidate], feeds: Sequence[Feeds]
              ) -> tuple[list[list[np.ndarray]], dict[int, ActivationRange]]:
    """(exact outputs per feed, the range of every tensor `chosen` quantises over all
    feeds, by source id; per last-axis channel too for a MatMul's activation)."""
    tensors = quantised_tensors(graph, chosen)
    channelled = {c.activation for c in chosen if isinstance(graph.node(c.node).op, MatMul)}
    rw = _copy(graph)
    extra = []
    for t in tensors:
        axes = tuple(range(graph.node(t).tensor_shape.rank - 1)) if t in channelled else None
        extra += [_reduce(rw, ReduceOp.MIN, rw.id(t), axes),
                  _reduce(rw, ReduceOp.MAX, rw.id(t), axes)]
    compiled = Session().compile(_with_outputs(rw, graph, extra))
    n = len(graph.outputs)
    refs: list[list[np.ndarray]] = []
    low: dict[int, np.ndarray] = {}
    high: dict[int, np.ndarray] = {}
    for feed in feeds:
        values = compiled.run(feed)
        refs.append(values[:n])
        for k, t in enumerate(tensors):
            lo, hi = (np.asarray(v, np.float64) for v in values[n + 2 * k:n + 2 * k + 2])
            low[t] = np.minimum(low[t], lo) if t in low else lo
            high[t] = np.maximum(high[t], hi) if t in high else hi
    return refs, {t: ActivationRange(float(low[t].min()), float(high[t].max()),
                                     (low[t], high[t]) if t in channelled else None)
                  for t in tensors}


def local_errors(graph: Graph, chosen: Sequence[Candidate], ranges: dict[int, ActivationRange],
                 feeds: Sequence[Feeds]) -> dict[int, float]:
    """Each candidate's relative error at its output with only itself int8, over all
    feeds, by candidate node id."""
    rw = _copy(graph)
    emit = Int8Emitter(rw, ranges)
    extra = []
    for c in chosen:
        x = emit.activation(c.activation, rw.id(c.activation), "probe")
        node = graph.node(c.node)
        y = rw.emit(node.op, emit.inputs(graph, c, x))
        exact = c.node
        for after in c.tail:  # its bias Add and Relu, on the int8 value
            step = graph.node(after)
            y = rw.emit(step.op, tuple(y if i == exact else rw.id(i) for i in step.inputs))
            exact = after
        if c.output is not None:
            y = emit.activation(c.output, y, "probe")
        diff = rw.emit(Binary(BinaryOp.SUB), (y, rw.id(exact)))
        extra += [_reduce(rw, ReduceOp.SUM_SQUARE, diff),
                  _reduce(rw, ReduceOp.SUM_SQUARE, rw.id(exact))]
    compiled = Session().compile(_with_outputs(rw, graph, extra))
    n = len(graph.outputs)
    error = np.zeros(len(chosen))
    norm = np.zeros(len(chosen))
    for feed in feeds:
        values = compiled.run(feed)
        error += [float(values[n + 2 * k]) for k in range(len(chosen))]
        norm += [float(values[n + 2 * k + 1]) for k in range(len(chosen))]
    relative = np.sqrt(error / np.maximum(norm, 1e-30))
    return {c.node: float(r) if np.isfinite(r) else np.inf for c, r in zip(chosen, relative)}
