"""OpenVINO's own int8 set: the products it runs u8 x i8, guarded in the form it runs them.

The form (`rlx.artifact.openvino_form`): a pair in front of each chosen product, every
other op as the plan's bf16 part runs it (bf16 where the part says, f32 elsewhere),
emulated as `rlx.baking.bf16.emulate_bf16` does, the bf16 region grown from the int8
products too (their Relu or HardSwish, the ops between them): marked f32, the ops after
an int8 Conv ran f32 between bf16 depthwise Convs, converted both ways, and
orientation-lcnet's 17 int8 Convs took 0.90x the bf16 part's CPU time, grown 0.80x. The
products are the wide int8 candidates (`rlx.baking.int8`; a narrow one's pair costs more
than int8 saves where no chain carries it), ranked per multiply-add as the int8 part ranks
them, and the set is the ranking's tail after the smallest k kept f32 that meets the int8
part's aim, by the same bisection (`rlx.baking.guard.fewest_kept`): one run when every
product int8 passes, about log2(n) otherwise.

A narrow ungrouped Conv reading a graph input (an image's first conv: 3 channels, 27
terms; not a depthwise one, whose `dw_I8` kernel ran slower than bf16) is a product too,
ranked first (on a miss it stays f32 first). The plugin converts a graph input to the
layout its Convs read in any case: f32 abcd -> acdb was its slowest Reorder on nudenet-320n
(217-560 us of a 3x320x320 image, 2-4% of the run), quantised it is a u8 one (93 us), and
the int8 conv writes u8 straight into the int8 conv after it (the f32 -> u8 Reorder there
goes): 0.95x / 0.98x the run at 1 / 2 threads, orientation-lcnet 0.99x / 1.0x.
A product whose label another product shares (an unrolled RNN's steps share their origin)
is left out: the set names nodes by label.

On a CPU without bf16 OpenVINO runs the set with every other op f32, which rounds less
than the form measured here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from rlx.artifact.openvino_form import openvino_int8_graph, product_axis
from rlx.artifact.precision import PrecisionPlan
from rlx.baking.bf16 import Bf16Unit, bf16_nodes, emulate_bf16, units
from rlx.baking.bf16_region import label
from rlx.baking.guard import OutputAccuracy, OutputRunner, fewest_kept, misses
from rlx.baking.int8 import ActivationRange, Candidate
from rlx.ir.graph import Graph
from rlx.ir.ops.quant import DequantizeLinear
from rlx.ir.ops.windows import Conv

__all__ = ["OpenVinoSet", "input_convs", "ranked_products", "plan_openvino"]

Product = tuple[str, tuple[float, int]]
"""A product's label and its activation's (scale, zero point)."""


@dataclass
class OpenVinoSet:
    """The chosen products (label -> (scale, zero point)), the nodes that run bf16 beside
    them (labels: the bf16 part's products not chosen, and their region as it is then), and
    the accuracy measured."""

    int8: dict[str, tuple[float, int]] = field(default_factory=dict)
    bf16: list[str] = field(default_factory=list)
    accuracy: list[OutputAccuracy] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"int8": {k: [s, z] for k, (s, z) in self.int8.items()}, "bf16": self.bf16,
                "outputs": [vars(a) for a in self.accuracy]}


def input_convs(graph: Graph, every: Sequence[Candidate], found: Collection[Candidate]
                ) -> list[Candidate]:
    """The narrow ungrouped Conv candidates of `every` that read a graph input and are not
    in `found` (the int8 part's): OpenVINO's set may run them int8 (module doc)."""
    inputs = {n.id for n in graph.inputs()}
    taken = {c.node for c in found}
    return [c for c in every if c.narrow and c.activation in inputs and c.node not in taken
            and isinstance(op := graph.node(c.node).op, Conv) and op.groups == 1]


def ranked_products(graph: Graph, ranked: Sequence[Candidate],
                    ranges: dict[int, ActivationRange], running: Sequence[Candidate]
                    ) -> list[Product]:
    """The wide candidates of `ranked` (most sensitive first) and the narrow ones reading a
    graph input, with a unique label, and the quantisation of the activation each reads in
    the exact graph: the smoothed tensor where onnxruntime's set (`running`) smooths it, the
    tensor itself elsewhere."""
    labels = Counter(label(n) for n in graph.nodes() if product_axis(graph, n) is not None)
    smoothed = {c.node for c in running}
    entries = {c.node for c in input_convs(graph, ranked, ())}
    found = []
    for c in ranked:
        name = label(graph.node(c.node))
        if c.narrow and c.node not in entries or not name or labels[name] > 1:
            continue
        seen = ranges[c.activation]
        if seen.smooth is not None and c.node not in smoothed:
            assert seen.channels is not None  # a smoothed range keeps its channels
            seen = ActivationRange(float(seen.channels[0].min()),
                                   float(seen.channels[1].max()))
        scale, zero = seen.parameters()
        found.append((name, (float(scale), int(zero))))
    return found


def plan_openvino(g: Graph, plan: PrecisionPlan, ranked: list[Product],
                  runner: OutputRunner, aim: float) -> OpenVinoSet:
    """The tail of `ranked` OpenVINO runs int8 on the file's graph `g` (module doc); empty
    when even one product int8 misses `aim`."""
    def measure(kept: int) -> list[OutputAccuracy]:
        chosen = dict(ranked[kept:])
        form = openvino_int8_graph(g, plan, chosen)
        return runner.measure_graph(emulate_bf16(form, *_beside(form, plan, chosen)),
                                    f"{len(chosen)} node(s) int8 on OpenVINO")

    if not ranked:
        return OpenVinoSet()
    accuracy = measure(0)
    kept = 0
    if misses(accuracy, aim) > 1:
        kept, accuracy = fewest_kept(len(ranked), measure, aim)
    if kept == len(ranked):
        return OpenVinoSet()
    chosen = dict(ranked[kept:])
    form = openvino_int8_graph(g, plan, chosen)
    names = {label(form.node(n)) for n in bf16_nodes(form, *_beside(form, plan, chosen))}
    return OpenVinoSet(chosen, sorted(names), accuracy)


def _beside(form: Graph, plan: PrecisionPlan, chosen: Collection[str]
            ) -> tuple[list[Bf16Unit], set[int]]:
    """The bf16 part's units of `form` that the products `chosen` leave bf16, and the
    chosen products (the bf16 region grows from them too, none when the part is empty)."""
    bf16 = set(plan.bf16)
    rest = [u for u in units(form) if label(form.node(u.node)) in bf16
            and label(form.node(u.node)) not in chosen]
    int8 = {n.id for n in form.nodes() if label(n) in chosen
            and product_axis(form, n) is None and n.inputs and len(n.inputs) > 1
            and isinstance(form.node(n.inputs[1]).op, DequantizeLinear)} if bf16 else set()
    return rest, int8
