"""The precision plan a `fast` bake stores in the artifact (`meta.precision_plan`), and the
exact graph of a planned file.

The plan is written into the graph itself: an int8 node reads its activation through a
QuantizeLinear -> DequantizeLinear pair (calibrated scale and zero point), its weight as
int8 codes through a DequantizeLinear (per-channel scales), and its output is quantised the
same way; a bf16 node is one whose name the plan lists. What the meta holds is what the
engines and reports need beside the graph: the names of the activation quantisers the plan
inserted (so `precision="exact"` can take them out again), the bf16 nodes, the counts per
precision, the nodes kept f32 and why, and what the guard measured on the calibration feeds.

`exact_graph` is what `precision="exact"` runs on a planned file: every activation pair the
plan inserted removed, the int8 weights dequantised as stored (f32 products of the codes and
their scales, computed as DequantizeLinear does: the original f32 weights are not in the
file, so "exact" is f32 arithmetic on the weights the file holds).

`int8_products_graph` is what OpenVINO runs of the int8 part: the plan's activation pairs
read only by the int8 products, every other op computing f32 (`rlx.engines.openvino_int8`
says why; the bake's guard checks this form too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from rlx.record import dataclass, field  # dataclasses', cheaper to create

if TYPE_CHECKING:  # a warm load reads the plan from the header and imports no graph IR
    from rlx.ir.graph import Graph

__all__ = ["PrecisionPlan", "exact_graph", "int8_products_graph", "runnable_graph"]


@dataclass
class PrecisionPlan:
    """`counts`: precision -> compute nodes planned so (int8 and f32: the int8 part; bf16:
    the MatMul / Conv nodes of the bf16 part, `rlx.baking.bf16`, which engines with bf16
    run instead of the int8 part); `quantizers`: the activation QuantizeLinear nodes the
    plan inserted, by name; `bf16`: the nodes that may run in bf16, by label (origin or
    name); `kept`: [{"node", "op", "reason"}] for candidates kept f32;
    `calibration`: {"samples", "min_cosine", "outputs": [{"name", "cosine", "max_abs",
    "argmax"}]} as the guard measured the final plan."""

    counts: dict[str, int] = field(default_factory=dict)
    quantizers: list[str] = field(default_factory=list)
    bf16: list[str] = field(default_factory=list)
    kept: list[dict[str, str]] = field(default_factory=list)
    calibration: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "quantizers": list(self.quantizers),
                "bf16": list(self.bf16), "kept": [dict(k) for k in self.kept],
                "calibration": dict(self.calibration)}

    @classmethod
    def from_json(cls, value: Any, fail: Callable[[str], Any]) -> PrecisionPlan:
        """The plan of a header's `meta.precision_plan`; `fail(message)` raises."""
        if not isinstance(value, dict):
            fail("meta.precision_plan must be an object")
        counts = value.get("counts", {})
        if not isinstance(counts, dict) or not all(
                isinstance(k, str) and isinstance(n, int) for k, n in counts.items()):
            fail("meta.precision_plan.counts must map precisions to node counts")
        names = {}
        for key in ("quantizers", "bf16"):
            names[key] = value.get(key, [])
            if not isinstance(names[key], list) or not all(
                    isinstance(n, str) for n in names[key]):
                fail(f"meta.precision_plan.{key} must be a list of node names")
        kept = value.get("kept", [])
        if not isinstance(kept, list) or not all(isinstance(k, dict) for k in kept):
            fail("meta.precision_plan.kept must be a list of objects")
        calibration = value.get("calibration", {})
        if not isinstance(calibration, dict):
            fail("meta.precision_plan.calibration must be an object")
        return cls(dict(counts), names["quantizers"], names["bf16"], kept, calibration)

    @property
    def label(self) -> str:
        """What an engine running the int8 part says it runs (`Model.precision`): "fast:
        int8, f32", or "fast: f32" when nothing is int8 (OpenVINO, running the bf16 part,
        says its own: `rlx.engines.openvino_bf16`)."""
        return "fast: " + ", ".join((["int8"] if self.counts.get("int8") else []) + ["f32"])

    @property
    def summary(self) -> str:
        """One line: the counts per precision, e.g. "int8 12, bf16 30, f32 2"."""
        return ", ".join(f"{k} {n}" for k, n in self.counts.items() if n) or "nothing planned"


def exact_graph(graph: Graph, plan: PrecisionPlan) -> Graph:
    """`graph` without the plan's activation quantisers (each DequantizeLinear reading one
    reads its input instead) and its int8 weights dequantised into f32 constants (one float
    copy: every engine then runs a plain f32 graph). The graph itself when the plan made
    nothing int8."""
    from rlx.ir.ops.quant import DequantizeLinear, QuantizeLinear
    from rlx.ir.rewrite import Rewriter

    names = set(plan.quantizers)
    if not names:
        return graph
    rw = Rewriter(graph)
    for node in graph.nodes():
        source = graph.node(node.inputs[0]) if node.inputs else None
        if isinstance(node.op, QuantizeLinear) and node.name in names:
            rw.drop(node.id)
        elif isinstance(node.op, DequantizeLinear) and source is not None \
                and isinstance(source.op, QuantizeLinear) and source.name in names:
            rw.replace(node.id, rw.id(source.inputs[0]))
        elif isinstance(node.op, DequantizeLinear) and (value := _dequantized(graph, node)) \
                is not None:
            rw.substitute_constant(node, value)
        else:
            rw.copy(node)
    return rw.finish()


def int8_products_graph(graph: Graph, plan: PrecisionPlan) -> Graph:
    """`graph` with the plan's activation pairs read only by the int8 products (Convs and
    MatMuls whose weight is a DequantizeLinear of constants) reading them as their
    activation: every other reader reads the unquantised tensor."""
    from rlx.ir.ops.quant import DequantizeLinear, QuantizeLinear
    from rlx.ir.rewrite import Rewriter

    names = set(plan.quantizers)
    if not names:
        return graph
    plain = {n.id: q.inputs[0] for n in graph.nodes() if isinstance(n.op, DequantizeLinear)
             and n.inputs and isinstance((q := graph.node(n.inputs[0])).op, QuantizeLinear)
             and q.name in names}  # pair (its DequantizeLinear) -> the unquantised tensor
    users = graph.users()
    read = {i for i in plain if any(_reads_as_int8_activation(graph, graph.node(u), i)
                                    for u in users[i])}
    live = {graph.node(i).inputs[0] for i in read}  # the quantisers a pair still read uses
    rw = Rewriter(graph)
    for node in graph.nodes():
        if isinstance(node.op, QuantizeLinear) and node.name in names and node.id not in live \
                or node.id in plain and node.id not in read:
            rw.drop(node.id)
        elif any(i in plain for i in node.inputs) \
                and not _reads_as_int8_activation(graph, node, node.inputs[0]):
            rw.substitute(node, node.op, [rw.id(plain.get(i, i)) for i in node.inputs],
                          node.shape)
        else:
            rw.copy(node)
    return rw.finish()


def _reads_as_int8_activation(graph: Graph, user: Any, value: int) -> bool:
    """Whether `user` is an int8 product whose activation (input 0) is node `value`."""
    from rlx.ir.ops.linalg import MatMul
    from rlx.ir.ops.quant import DequantizeLinear
    from rlx.ir.ops.sources import Constant
    from rlx.ir.ops.windows import Conv

    if not isinstance(user.op, (Conv, MatMul)) or len(user.inputs) < 2 \
            or user.inputs[0] != value:
        return False
    weight = graph.node(user.inputs[1])
    return isinstance(weight.op, DequantizeLinear) \
        and isinstance(graph.node(weight.inputs[0]).op, Constant)


def _dequantized(graph: Graph, node: Any) -> np.ndarray | None:
    """The f32 value of a per-tensor or per-axis DequantizeLinear of constants, or None."""
    from rlx.ir.rewrite import constant_value

    codes, scale, zero = (constant_value(graph.node(i)) for i in node.inputs)
    if codes is None or scale is None or zero is None or node.op.block_size \
            or scale.dtype != np.float32:
        return None
    shape = [1] * codes.ndim
    if scale.ndim == 1 and scale.size > 1:
        shape[node.op.axis % codes.ndim] = -1
    value = (codes.astype(np.float32) - zero.astype(np.float32).reshape(shape)) \
        * scale.reshape(shape)
    return value.astype(np.float32)


def runnable_graph(graph: Graph, plan: PrecisionPlan | None, precision: str) -> Graph:
    """The graph an engine runs for `precision`: a planned file's exact graph for "exact",
    else `graph` as it is."""
    return exact_graph(graph, plan) if plan is not None and precision == "exact" else graph
