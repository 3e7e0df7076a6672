"""The cheap ops that run bf16 beside a bf16 plan's products, and where such a run rounds.

An engine running only the products bf16 converts every tensor between them twice: on a
YOLO-style detector OpenVINO ran 78 Reorder nodes (24 ms of 105) where its own default,
bf16 everywhere, ran 25 (2.7 ms of 53). So the ops between and around bf16 products run
bf16 too, chosen by a rule over op types and the graph (`region`): a carrier (an
elementwise op or activation, pooling, resizing, or an op that only moves data) joins when
all its computed float inputs come from bf16 nodes (forward: with one input f32, as a
detector's box decoding reading anchor points computed in f32, the plugin ran it f32
whatever the marks said, and the emulation would round where the run does not), or, when
it only moves data, when every reader of its output is bf16 (backward: the reshape or
transpose in front of a product). Arithmetic never joins backward: an Add taking a large
offset away ahead of a product the guard kept f32 would run on the offset's bf16
rounding, which no choice of products could undo. Reductions, normalisations, Softmax,
casts and shape arithmetic are never carriers: they stay f32, as the products the guard
keeps f32 do.

Where the run rounds (`RoundingPoints`), as OpenVINO's CPU plugin does (measured on
OpenVINO 2026.4): a bf16 node's computed float inputs are rounded to bf16 when their
producer runs f32 (the plugin's Reorder), constant operands of carriers are not (the plugin
applies them as f32 post-op scales and shifts); a bf16 node's output is rounded where it is
stored for a bf16 reader, which is not where an elementwise op fused into its producer
reads it (a product, or a fused op, with that op its only reader: the plugin's post-ops
keep the f32 accumulator, measured rms error 0.0113 against 0.0113 unrounded and 0.0159
rounded at every op), nor where only f32 ops read it or it is a graph output (the plugin
writes those f32), nor after an op that only moves bf16 values (rounding them again changes
nothing).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from rlx.ir.dtype import DType
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.blocks import DepthToSpace, Pad, SpaceToDepth, Tile
from rlx.ir.ops.channelwise import PRelu
from rlx.ir.ops.elementwise import Activation, Binary, BinaryOp, Clamp, Identity, Unary
from rlx.ir.ops.multi import TupleGet
from rlx.ir.ops.resize import Resize
from rlx.ir.ops.shaping import Expand, Flatten, Gather, Reshape, Squeeze, Transpose, Unsqueeze
from rlx.ir.ops.slicing import Concat, Slice, Split
from rlx.ir.ops.sources import Constant
from rlx.ir.ops.windows import GlobalPool, Pool, PoolKind

__all__ = ["RoundingPoints", "region", "rounding_points", "fixed_nodes", "label"]

_MOVES = (Reshape, Transpose, Concat, Flatten, Squeeze, Unsqueeze, Slice, Split, TupleGet,
          Gather, Expand, Tile, DepthToSpace, SpaceToDepth, Identity, Pad)
"""Ops whose output is some of their input's values: bf16 in, the same bf16 out."""
_ARITHMETIC = frozenset({BinaryOp.ADD, BinaryOp.SUB, BinaryOp.MUL, BinaryOp.DIV, BinaryOp.MAX,
                         BinaryOp.MIN})
_FUSED_UNARY = frozenset({Activation.RELU, Activation.GELU, Activation.GELU_APPROX,
                          Activation.SILU, Activation.SIGMOID, Activation.TANH,
                          Activation.HARD_SWISH, Activation.HARD_SIGMOID, Activation.ELU,
                          Activation.LEAKY_RELU, Activation.MISH, Activation.ABS,
                          Activation.SQRT, Activation.EXP, Activation.SOFTPLUS})


def label(node: Node) -> str:
    """The name a plan stores for `node`: its ONNX origin, else its own name."""
    return node.origin or node.name or ""


def fixed_nodes(graph: Graph) -> set[int]:
    """The nodes computed from constants only (a decoded weight, a shape)."""
    fixed: set[int] = set()
    for node in graph.nodes():
        if isinstance(node.op, Constant) or node.inputs and fixed.issuperset(node.inputs):
            fixed.add(node.id)
    return fixed


def _moves(node: Node) -> bool:
    op = node.op
    return isinstance(op, _MOVES) or isinstance(op, Pool) and op.kind is PoolKind.MAX \
        or isinstance(op, Resize) and op.mode.value == "nearest"


def _carrier(node: Node) -> bool:
    """An op that may run bf16 when its neighbours do (module doc)."""
    if not node.is_tuple and node.tensor_shape.dtype is not DType.F32 or not label(node):
        return False
    op = node.op
    return _moves(node) or isinstance(op, (Unary, Clamp, PRelu, Pool, GlobalPool, Resize)) \
        or isinstance(op, Binary) and op.op in _ARITHMETIC


def _float_inputs(graph: Graph, node: Node, fixed: set[int]) -> list[int]:
    """The computed f32 inputs of `node` (constants and shapes left out)."""
    return [i for i in node.inputs if i not in fixed
            and (graph.node(i).is_tuple or graph.node(i).tensor_shape.dtype is DType.F32)]


def region(graph: Graph, products: Collection[int]) -> set[int]:
    """The carriers that run bf16 with the nodes `products` (module doc)."""
    fixed = fixed_nodes(graph)
    users = graph.users()
    bf16 = set(products)
    grown: set[int] = set()
    for node in graph.nodes():  # forward, in graph order
        computed = _float_inputs(graph, node, fixed)
        if node.id not in fixed and _carrier(node) and computed \
                and all(i in bf16 for i in computed):
            bf16.add(node.id)
            grown.add(node.id)
    for node in reversed(list(graph.nodes())):  # backward: every reader bf16
        readers = users[node.id]
        if node.id not in bf16 and node.id not in fixed and _carrier(node) and _moves(node) \
                and readers \
                and node.id not in graph.outputs and all(r in bf16 for r in readers):
            bf16.add(node.id)
            grown.add(node.id)
    return grown


def _fusable(graph: Graph, node: Node, fixed: set[int]) -> bool:
    """An elementwise op OpenVINO applies as a post-op of the node it reads."""
    op = node.op
    if isinstance(op, Unary):
        return op.kind in _FUSED_UNARY
    if isinstance(op, (Clamp, PRelu)):
        return True
    return isinstance(op, Binary) and op.op in _ARITHMETIC \
        and len(_float_inputs(graph, node, fixed)) == 1


@dataclass(frozen=True)
class RoundingPoints:
    """Where a run with the nodes `bf16` in bf16 rounds (module doc): the computed inputs
    it rounds, as (node, input position), and the nodes whose output it rounds."""

    inputs: frozenset[tuple[int, int]]
    outputs: frozenset[int]


def _chained(graph: Graph, bf16: Collection[int], fixed: set[int]) -> set[int]:
    """The products of `bf16` (its nodes that are no carriers) and the elementwise ops fused
    into them: the only reader of a chained node, reading nothing else computed."""
    users = graph.users()
    chained: set[int] = set()
    for node in graph.nodes():
        if node.id not in bf16:
            continue
        computed = _float_inputs(graph, node, fixed)
        if not _carrier(node) or _fusable(graph, node, fixed) and computed \
                and computed[0] in chained and len(users[computed[0]]) == 1:
            chained.add(node.id)
    return chained


def rounding_points(graph: Graph, bf16: Collection[int]) -> RoundingPoints:
    """The rounding points of running `bf16` (products and carriers) in bf16 (module doc)."""
    fixed = fixed_nodes(graph)
    users = graph.users()
    bf16 = set(bf16)
    chained = _chained(graph, bf16, fixed)

    def fused(n: int, reader: int) -> bool:  # `reader` a post-op of `n`
        return n in chained and reader in chained and _carrier(graph.node(reader))

    outputs = {n for n in bf16 if any(r in bf16 for r in users[n]) and not (
        n in graph.outputs or graph.node(n).is_tuple or _moves(graph.node(n))
        or len(users[n]) == 1 and fused(n, users[n][0]))}
    valued = outputs | {n for n in bf16 if graph.node(n).is_tuple or _moves(graph.node(n))}
    inputs = {(node.id, k) for node in map(graph.node, sorted(bf16))
              for k, i in enumerate(node.inputs)
              if i in _float_inputs(graph, node, fixed) and i not in valued
              and not fused(i, node.id)}
    # a tuple is not a tensor to round: a part taken from an f32 one (a Split whose other
    # parts go to f32 readers) is rounded as it is taken, for its readers, all bf16
    taken = {n for n, k in inputs if graph.node(graph.node(n).inputs[k]).is_tuple}
    inputs = {(n, k) for n, k in inputs if n not in taken}
    return RoundingPoints(frozenset(inputs), frozenset(outputs | taken))
