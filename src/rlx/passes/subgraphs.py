"""Baking through control flow: constants cross subgraph boundaries both ways.

A subgraph sees outer values only as captured inputs (`rlx.ir.ops.control`). Three tools:

- `sink_constant_captures` moves every captured Constant into the subgraphs that take it,
  so that folding inside a subgraph sees weights as values (silero-vad's LSTM weights are
  sliced and re-concatenated into ONNX gate order on every call until this folds them);
- `in_subgraphs(pass)` runs a pass on a graph and then on each of its subgraphs, nested
  ones included;
- `hoist_subgraph_weights` moves the big constants of subgraphs back out, as captures, up
  to the top graph: there the weight table lists them and the memory modes apply to them
  (strip in compact, keep twice in duplex) as to any other weight.
"""

from __future__ import annotations

import functools
import logging
from typing import Callable

from rlx.ir.graph import Graph, Node, unique_name
from rlx.ir.ops.base import Op
from rlx.ir.ops.control import If, Loop
from rlx.ir.ops.sources import Constant, Input
from rlx.ir.rewrite import Rewriter

__all__ = [
    "HOIST_MIN_BYTES", "capture_offsets", "captured_inputs", "hoist_subgraph_weights",
    "in_subgraphs",
    "sink_constant_captures",
]

log = logging.getLogger(__name__)

HOIST_MIN_BYTES = 1024
"""Subgraph constants of at least this size are weights and go to the top graph; smaller
ones (shapes, axes, scalars) stay where shape resolution and folding need them."""

Pass = Callable[[Graph], tuple[Graph, int]]


def _capture_offsets(op: Op) -> tuple[int, int] | None:
    """(first captured input of the op, first subgraph input it binds to), for ops whose
    trailing inputs are loop-invariant captures; None for other ops."""
    if isinstance(op, If):
        return 1, 0  # [cond, *captured] -> each branch's [*captured]
    if isinstance(op, Loop):
        first = 2 + op.n_carried  # [max_trip, cond, *carried, *captured] -> body, same slots
        return first, first
    return None


capture_offsets = _capture_offsets  # public name: the weight-encoding pass follows captures


def captured_inputs(node: Node) -> tuple[int, ...]:
    """The ids a control-flow node passes to its subgraphs as captures (empty otherwise)."""
    offsets = _capture_offsets(node.op)
    return () if offsets is None else node.inputs[offsets[0]:]


def in_subgraphs(pass_fn: Pass) -> Pass:
    """`pass_fn` applied to a graph, then (recursively) to every subgraph; counts add up."""

    @functools.wraps(pass_fn)
    def run(graph: Graph) -> tuple[Graph, int]:
        graph, count = pass_fn(graph)
        ops: dict[int, Op] = {}
        for node in graph.nodes():
            subs = node.op.subgraphs()
            if not subs:
                continue
            results = [run(sub) for sub in subs]
            count += sum(n for _, n in results)
            op = node.op.with_subgraphs([new for new, _ in results])
            if op is not node.op:
                ops[node.id] = op
        return (graph.replace_ops(ops) if ops else graph), count

    return run


def _sink_one_level(graph: Graph) -> tuple[Graph, int]:
    rw = Rewriter(graph)
    sunk = 0
    for node in graph.nodes():
        offsets = _capture_offsets(node.op)
        constants = {} if offsets is None else {
            pos: graph.node(i) for pos, i in enumerate(node.inputs)
            if pos >= offsets[0] and _has_bytes(graph.node(i))
        }
        if not constants:
            rw.copy(node)
            continue
        outer, inner = offsets
        by_slot = {pos - outer + inner: const for pos, const in constants.items()}
        subs = [_inline_inputs(sub, by_slot) for sub in node.op.subgraphs()]
        inputs = [rw.id(i) for pos, i in enumerate(node.inputs) if pos not in constants]
        rw.substitute(node, node.op.with_subgraphs(subs), inputs, node.shape)
        sunk += len(constants)
    return rw.finish(), sunk


sink_constant_captures: Pass = in_subgraphs(_sink_one_level)
sink_constant_captures.__doc__ = """Move captured Constants into the subgraphs reading them
(at every depth); returns (graph, captures sunk)."""


def _has_bytes(node: Node) -> bool:
    return isinstance(node.op, Constant) and not node.op.is_stripped


def _inline_inputs(sub: Graph, by_slot: dict[int, Node]) -> Graph:
    """`sub` with its inputs at the `by_slot` positions replaced by those Constants."""
    rw = Rewriter(sub)
    slot = 0
    for node in sub.nodes():
        if isinstance(node.op, Input):
            const = by_slot.get(slot)
            if const is None:
                rw.copy(node)
            else:
                rw.substitute(node, const.op, (), const.shape)
            slot += 1
        else:
            rw.copy(node)
    return rw.finish()


def hoist_subgraph_weights(graph: Graph,
                           min_bytes: int = HOIST_MIN_BYTES) -> tuple[Graph, int]:
    """Move subgraph Constants of `min_bytes` or more out to `graph` (from any depth) as
    captures; returns (graph, constants moved across one boundary or more)."""
    rw = Rewriter(graph)
    hoisted = 0
    for node in graph.nodes():
        if _capture_offsets(node.op) is None:
            rw.copy(node)
            continue
        subs = []
        for sub in node.op.subgraphs():  # innermost first: nested weights reach `sub`
            sub, count = hoist_subgraph_weights(sub, min_bytes)
            hoisted += count
            subs.append(sub)
        lifted = [[n for n in sub.nodes() if _has_bytes(n) and n.op.nbytes >= min_bytes]
                  for sub in subs]
        flat = [n for nodes in lifted for n in nodes]
        if not flat:
            op = node.op.with_subgraphs(subs)
            if op is not node.op:
                rw.substitute(node, op, rw.inputs(node), node.shape)
            else:
                rw.copy(node)
            continue
        outer = [rw.emit(c.op, (), c.shape, rw.fresh_name(c.name or f"{node.name or 'w'}.w"))
                 for c in flat]
        new_subs = []
        start = 0
        for sub, nodes in zip(subs, lifted):
            new_subs.append(_lift_constants(sub, flat, range(start, start + len(nodes))))
            start += len(nodes)
        rw.substitute(node, node.op.with_subgraphs(new_subs), [*rw.inputs(node), *outer],
                      node.shape)
        hoisted += len(flat)
        log.debug("hoist: %d constant(s) out of %s", len(flat), node.label)
    return rw.finish(), hoisted


def _lift_constants(sub: Graph, lifted: list[Node], own: range) -> Graph:
    """`sub` taking one more input per `lifted` constant (after its own inputs); its own
    constants (`lifted[i]` for i in `own`) read that input instead."""
    rw = Rewriter(sub)
    for node in sub.nodes():
        if isinstance(node.op, Input):
            rw.copy(node)
    names = {n.op.name for n in sub.inputs()}
    new_inputs = []
    for i, const in enumerate(lifted):
        name = unique_name(f"captured.{i}", names)
        new_inputs.append(rw.emit(Input(name), (), const.shape, name))
    replaced = {lifted[i].id: new_inputs[i] for i in own}
    for node in sub.nodes():
        if isinstance(node.op, Input):
            continue
        if node.id in replaced:
            rw.replace(node.id, replaced[node.id])
        else:
            rw.copy(node)
    return rw.finish()
