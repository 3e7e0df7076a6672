"""The precision plan a `fast` bake stores in the artifact (`meta.precision_plan`), and the
graph an engine runs of a planned file (`runnable_graph`).

The plan is written into the graph itself: an int8 node reads its activation through a
QuantizeLinear -> DequantizeLinear pair (calibrated scale and zero point), its weight as
int8 codes through a DequantizeLinear (per-channel scales), and its output is quantised the
same way; a bf16 node is one whose name the plan lists. What the meta holds is what the
engines and reports need beside the graph: the names of the activation quantisers the plan
inserted (so `precision="exact"` can take them out again), the bf16 nodes, the counts per
precision, the nodes kept f32 and why, and what the guard measured on the calibration feeds.

The graphs a planned file runs as are `rlx.artifact.planned`, imported only for one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rlx.record import dataclass, field  # dataclasses', cheaper to create

if TYPE_CHECKING:  # a warm load reads the plan from the header and imports no graph IR
    from rlx.ir.graph import Graph

__all__ = ["PrecisionPlan", "runnable_graph"]


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


def runnable_graph(graph: Graph, plan: PrecisionPlan | None, precision: str) -> Graph:
    """The graph an engine runs for `precision`: a planned file's exact graph for "exact",
    else `graph` as it is."""
    if plan is None or precision != "exact":
        return graph
    from rlx.artifact.planned import exact_graph  # a file without a plan never needs it

    return exact_graph(graph, plan)
