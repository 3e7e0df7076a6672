"""Whether OpenVINO runs a fast plan's int8 part, and on which graph.

OpenVINO's low-precision transformations run a Conv or MatMul whose activation comes
through a u8 QuantizeLinear -> DequantizeLinear pair and whose weight is int8 codes through
a per-channel DequantizeLinear as one u8 x i8 kernel (VNNI), a HardSwish or SiLU after it a
fused f32 post-op. What they do with the plan's other pairs is what made them slow and
wrong before: a Conv's output pair read by an f32 residual Add is fused into the Conv with
the Add as a sum post-op and ran off by far (an unrolled CRNN: cosine 0.52 against
onnxruntime f32, where onnxruntime on the same QDQ graph kept 0.9994), and a detector's
8-bit SiLU / Add / Concat chains were requantised in u8 with other rounding (cosine 0.987)
and 116 Reorders. So OpenVINO runs `rlx.artifact.planned.int8_products_graph`: the
pairs only where an int8 product reads them, every other op f32 (both models then agree
with onnxruntime on the same graph to 1e-5; the CRNN ran 0.33x plain f32, one thread).
That graph drops some of the plan's quantisations, so the bake's guard checks it too
(`calibration["int8_products"]`); a file baked without that check runs the bf16 part.

Where the CPU also computes bf16, the plan's bf16 part may cover more of the work than its
int8 part (depthwise and narrow Convs stay f32 in int8): on a MobileNetV3 classifier int8
covered 30% of the multiply-adds and ran 0.85x plain f32, bf16 covered all and ran 0.6x.
The engine estimates each form's time from the share of multiply-adds it runs fast and the
speedups measured on a Zen 4 (int8 3x f32 on a BERT encoder, bf16 2x) and runs the faster.

A file baked with OpenVINO's own int8 set (`rlx.artifact.openvino_form`: chosen and guarded
in the form above, with the bf16 part's nodes bf16 beside it) runs that instead where
`runs_own_int8` estimates it no slower than the bf16 part, the products the set leaves to
bf16 counted at the bf16 speedup; on a CPU without bf16, or where the set leaves too few
products to bf16 (`MIN_BF16_BESIDE`: else mostly the cheap ops between int8 products run
bf16, converted to and from, and nudenet-320n's 60 int8 Convs ran 1.09-1.16x slower with
its SiLU / Add / Concat bf16 than f32), it runs the set with f32 beside it, which rounds
less than the form the guard measured.
`runs_int8` is the rule of files baked before the set.
"""

from __future__ import annotations

import math
from collections.abc import Collection

import openvino as ov

from rlx.artifact.openvino_form import OPENVINO
from rlx.artifact.precision import PrecisionPlan
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.linalg import MatMul
from rlx.ir.ops.quant import DequantizeLinear
from rlx.ir.ops.sources import Constant
from rlx.ir.ops.windows import Conv

__all__ = ["has_int8", "runs_int8", "runs_own_int8", "bf16_beside"]

INT8_SPEEDUP = 3.0  # u8 x i8 products against f32, one Zen 4 thread (module doc)
BF16_SPEEDUP = 2.0
MIN_BF16_BESIDE = 0.1
"""Least share of the multiply-adds the products left bf16 beside the int8 set must hold for
that set to run with bf16 beside it: orientation-lcnet's 0.25 ran 0.83x main's bf16 part,
nudenet-320n's under 0.01 1.09-1.16x slower than f32 beside (module doc)."""


def has_int8(core: ov.Core) -> bool:
    """Whether OpenVINO runs int8 kernels on this CPU (its own reading of the features)."""
    return "INT8" in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def runs_int8(graph: Graph, plan: PrecisionPlan, bf16: bool) -> bool:
    """Whether OpenVINO runs the plan's int8 part of `graph` (the file's planned graph):
    the plan has int8 nodes, the guard passed its int8 products' form, and (`bf16`: the CPU
    has bf16) that is estimated faster than the bf16 part (module doc)."""
    checked = plan.calibration.get("int8_products", {})
    if not plan.counts.get("int8") or not checked.get("passed"):
        return False
    if not bf16 or not plan.bf16:
        return True
    total, int8, bf16_part = _work_shares(graph, set(plan.bf16))
    if not total:
        return False
    return _time(int8 / total, INT8_SPEEDUP) <= _time(bf16_part / total, BF16_SPEEDUP)


def runs_own_int8(graph: Graph, form: Graph, plan: PrecisionPlan, bf16: bool) -> bool:
    """Whether OpenVINO runs its own int8 set (`form`, `rlx.artifact.openvino_form`) rather
    than the bf16 part of `graph` (the file's planned graph; `bf16`: the CPU has bf16):
    estimated faster, or no bf16 to run (module doc)."""
    if not bf16 or not plan.bf16:
        return True
    beside = plan.calibration.get(OPENVINO, {}).get("bf16", [])
    total, int8, rest = _work_shares(form, set(beside), coded=False)
    _, _, bf16_part = _work_shares(graph, set(plan.bf16))
    if not total:
        return False
    own = _time(int8 / total, INT8_SPEEDUP) - rest / total * (1 - 1 / BF16_SPEEDUP)
    return own <= _time(bf16_part / total, BF16_SPEEDUP)


def bf16_beside(form: Graph, plan: PrecisionPlan) -> list[str]:
    """The nodes that run bf16 beside the int8 set in `form` on a CPU with bf16: the ones
    the bake planned, when they hold products the set leaves f32; else none (module doc)."""
    beside = plan.calibration.get(OPENVINO, {}).get("bf16", [])
    total, _, rest = _work_shares(form, set(beside), coded=False)
    return beside if total and rest / total >= MIN_BF16_BESIDE else []


def _time(share: float, speedup: float) -> float:
    return share / speedup + (1 - share)


def _work_shares(graph: Graph, bf16: Collection[str], coded: bool = True
                 ) -> tuple[float, float, float]:
    """Multiply-adds of the products with a constant weight: all, the int8 ones', the
    `bf16` ones' (the int8 ones among them only when `coded`: the bf16 part runs those
    bf16, the int8 set int8), symbolic dims counted once."""
    total = int8 = bf16_part = 0.0
    for node in graph.nodes():
        weight = _constant_weight(graph, node)
        if weight is None:
            continue
        dims = [int(d) for d in weight.tensor_shape.dims]
        terms = math.prod(dims[1:]) if isinstance(node.op, Conv) else dims[-2]
        macs = terms * math.prod(d if isinstance(d, int) else 1 for d in node.tensor_shape.dims)
        total += macs
        is_int8 = isinstance(weight.op, DequantizeLinear)
        int8 += macs if is_int8 else 0
        bf16_part += macs if (node.origin or node.name) in bf16 and (coded or not is_int8) \
            else 0
    return total, int8, bf16_part


def _constant_weight(graph: Graph, node: Node) -> Node | None:
    """A Conv's or MatMul's weight when it is a constant or int8 codes dequantised."""
    if not isinstance(node.op, (Conv, MatMul)) or len(node.inputs) < 2:
        return None
    weight = graph.node(node.inputs[1])
    source = graph.node(weight.inputs[0]) if isinstance(weight.op, DequantizeLinear) else weight
    return weight if isinstance(source.op, Constant) else None
