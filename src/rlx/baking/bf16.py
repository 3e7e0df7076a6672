"""The fast plan's bf16 part: which compute nodes an engine with bf16 arithmetic may run in
bf16, checked on the calibration feeds by the same guard as the int8 part.

A unit is a float32 MatMul or Conv of the top graph with a constant weight and a name the
artifact keeps (its ONNX origin or its own), with its bias Add when that is its only reader
and adds a constant: the products are where bf16 pays (half the bytes, twice the lanes).
The cheap ops between and around the units the plan runs bf16 (activations, elementwise
ops, pooling, ops that move data) run bf16 with them, so that a run does not convert every
tensor twice (`rlx.baking.bf16_region`); normalisations, Softmax and reductions stay f32,
and the plan lists every bf16 node, units and region. Products of two
computed tensors (attention's) are not units: OpenVINO fuses such a MatMul with the Softmax
and mask Add before it into one kernel that runs in the MatMul's precision whatever the
others' marks say (measured on a BERT encoder: the attention MatMuls bf16 took the held-out
cosine to 0.82 where the emulation, Softmax f32, saw >= 0.999). The plan is independent of the
int8 part: an engine runs one or the other (onnxruntime the int8 QDQ nodes, OpenVINO bf16,
`rlx.engines.openvino_engine`), so every unit is a candidate whatever int8 made of it.

The numpy runtime is the reference of what bf16 does (`emulate_bf16`): a unit's two
operands (activation and weight) rounded to bf16, round to nearest even, and the products
summed in f32 (the AVX512-BF16 dot products OpenVINO's CPU plugin uses); every bf16 node's
result rounded where the plugin stores it as bf16 (`bf16_region.rounding_points`).
The guard runs every unit so first (one run, the usual outcome); when that misses the
targets it ranks the units by their effect alone at the outputs (one run each: a unit's own
error says nothing of what comes after it, such as a large offset taken away downstream,
which bf16's 8-bit mantissa loses where f32 keeps it) and keeps the k most harmful f32,
the smallest k found by bisection as the int8 part does (`rlx.baking.fast`). The units
reading one weight (an unrolled RNN's steps) are ranked and kept as one group: a run per
weight, not per step. When even no unit in bf16 misses the targets (the file's int8
weights, as stored, may already), nothing is planned bf16 and no ranking is run.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from rlx.baking.bf16_region import fixed_nodes, label, region, rounding_points
from rlx.baking.guard import OutputAccuracy, OutputRunner, fewest_kept, misses
from rlx.ir.dtype import DType
from rlx.ir.graph import Graph
from rlx.ir.ops.elementwise import Binary, BinaryOp, Cast
from rlx.ir.ops.linalg import MatMul
from rlx.ir.ops.sources import Constant
from rlx.ir.ops.windows import Conv
from rlx.ir.rewrite import Rewriter

__all__ = ["Bf16Unit", "Bf16Plan", "units", "emulate_bf16", "plan_bf16"]

@dataclass(frozen=True)
class Bf16Unit:
    """A product node that may run bf16, and its bias Add (or None)."""

    node: int
    bias: int | None

    def names(self, graph: Graph) -> list[str]:
        """The labels the plan stores: the product's, and its bias Add's."""
        ids = [self.node] if self.bias is None else [self.node, self.bias]
        return [label(graph.node(i)) for i in ids]


@dataclass
class Bf16Plan:
    """The units planned bf16 (`names`: their labels), how many units there were, the
    units kept f32 with why, and the accuracy of the final plan on the calibration feeds."""

    names: list[str] = field(default_factory=list)
    count: int = 0
    candidates: int = 0
    kept: list[dict[str, str]] = field(default_factory=list)
    accuracy: list[OutputAccuracy] = field(default_factory=list)


def units(graph: Graph) -> list[Bf16Unit]:
    """Every unit of the top graph (module doc), in graph order."""
    users = graph.users()
    fixed = fixed_nodes(graph)  # a decoded weight
    found = []
    for node in graph.nodes():
        if node.is_tuple or not isinstance(node.op, (MatMul, Conv)) or not label(node) \
                or node.tensor_shape.dtype is not DType.F32 or node.inputs[1] not in fixed:
            continue
        bias = None
        if len(users[node.id]) == 1 and node.id not in graph.outputs:
            add = graph.node(users[node.id][0])
            if isinstance(add.op, Binary) and add.op.op is BinaryOp.ADD and label(add) \
                    and any(isinstance(graph.node(i).op, Constant) for i in add.inputs):
                bias = add.id
        found.append(Bf16Unit(node.id, bias))
    return found


def _rounded(rw: Rewriter, value: int) -> int:
    """`value` (a new id) through bf16 and back: round to nearest even."""
    return rw.emit(Cast(DType.F32), (rw.emit(Cast(DType.BF16), (value,)),))


def bf16_nodes(graph: Graph, chosen: Sequence[Bf16Unit], exact: Collection[int] = ()
               ) -> set[int]:
    """The nodes that run bf16 with the `chosen` units: theirs and their region's, the
    region grown from the nodes `exact` too (int8 products, whose output the plugin may
    store bf16 for bf16 readers)."""
    nodes = {u.node for u in chosen} | {u.bias for u in chosen if u.bias is not None}
    return nodes | region(graph, nodes | set(exact)) | set(exact)


def emulate_bf16(graph: Graph, chosen: Sequence[Bf16Unit], exact: Collection[int] = ()
                 ) -> Graph:
    """`graph` with the `chosen` units and their region computed as bf16 hardware does
    (module doc, `rlx.baking.bf16_region`): a product's two operands rounded to bf16 and
    f32 sums, every node of the region rounding where OpenVINO rounds; the nodes `exact`
    (`bf16_nodes`) read their inputs unrounded and round their output as the region's do."""
    points = rounding_points(graph, bf16_nodes(graph, chosen, exact))
    products = {u.node for u in chosen}
    rw = Rewriter(graph)
    for node in graph.nodes():
        rounded = {k for k in range(len(node.inputs)) if (node.id, k) in points.inputs
                   and node.id not in exact}
        if node.id in products:
            rounded |= {0, 1}
        if rounded:
            ids = rw.inputs(node)
            rw.substitute(node, node.op, [_rounded(rw, i) if k in rounded else i
                                          for k, i in enumerate(ids)], node.shape)
        else:
            rw.copy(node)
        if node.id in points.outputs:
            rw.replace(node.id, _rounded(rw, rw.id(node.id)))
    return rw.finish()


def _by_weight(graph: Graph, found: list[Bf16Unit]) -> list[list[Bf16Unit]]:
    """The units grouped by the weight they read (an unrolled RNN's steps: one group), in
    graph order."""
    groups: dict[int, list[Bf16Unit]] = {}
    for u in found:
        groups.setdefault(graph.node(u.node).inputs[1], []).append(u)
    return list(groups.values())


def plan_bf16(graph: Graph, runner: OutputRunner, target: float) -> Bf16Plan:
    """The units of `graph` that may run bf16 with every output within `target` (and the
    argmax rule) on the runner's feeds, against its exact outputs (module doc)."""
    found = units(graph)
    ranked = _by_weight(graph, found)

    def measure(kept: int) -> list[OutputAccuracy]:
        chosen = [u for group in ranked[kept:] for u in group]
        return runner.measure_graph(emulate_bf16(graph, chosen), f"{len(chosen)} node(s) bf16")

    accuracy = measure(0) if found else []
    kept, why = 0, {}
    if found and misses(accuracy, target) > 1:
        kept, accuracy = len(ranked), measure(len(ranked))
        if misses(accuracy, target) <= 1:  # else: the file's own weights miss already
            why = {id(g): misses(runner.measure_graph(
                emulate_bf16(graph, g), f"{label(graph.node(g[0].node))} alone bf16"), target)
                for g in ranked}
            ranked.sort(key=lambda g: -why[id(g)])  # most harmful first (stable)
            kept, found_accuracy = fewest_kept(len(ranked), measure, target)
            accuracy = found_accuracy or accuracy
    rows = [{"node": label(graph.node(u.node)), "op": type(graph.node(u.node).op).__name__,
             "reason": _reason(why.get(id(g)), len(g))} for g in ranked[:kept] for u in g]
    chosen = [u for g in ranked[kept:] for u in g]
    names = {label(graph.node(n)) for n in bf16_nodes(graph, chosen)}
    count = sum(len(g) for g in ranked[kept:])
    return Bf16Plan(sorted(names), count, len(found), rows, accuracy)


def _reason(share: float | None, readers: int) -> str:
    if share is None:
        return "with no node bf16 the calibration outputs already missed the targets"
    group = f" (with the {readers} nodes reading its weight)" if readers > 1 else ""
    return (f"bf16 alone{group} it takes {share:.3g} of the error allowed at the outputs; "
            "with it bf16 the calibration outputs missed the targets")
