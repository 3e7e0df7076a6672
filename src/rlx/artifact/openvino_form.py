"""OpenVINO's own int8 set of a fast plan, and the graph it runs.

OpenVINO runs an int8 product as u8 x i8 only where a QuantizeLinear -> DequantizeLinear
pair feeds its activation and every other op in f32 or bf16 (`rlx.engines.openvino_int8`).
Held to the error of onnxruntime's QDQ form (int8 chains, every int8 output requantised),
it ran fewer products int8 than its own form allows: on a PP-LCNet classifier onnxruntime's
form with all 17 wide pointwise Convs int8 scored cosine 0.9982 on calibration, OpenVINO's
form of the same set 0.99982, so the seven widest stayed f32 (0.55x plain f32 with bf16
elsewhere, 0.47-0.49x all int8). So the bake plans a set of its own for OpenVINO, guarded
in the form OpenVINO runs (`rlx.baking.openvino_set`), and stores it in the plan's
`calibration[OPENVINO]`: {"int8": {label: [activation scale, zero point]}, "outputs"}.

`openvino_int8_graph` builds that form from the file's graph: the plan's exact graph (every
pair onnxruntime's set put in taken out, its int8 weights dequantised as stored), and in
front of every product the set names a pair with the stored scale and zero point, its
weight as int8 codes with one symmetric scale per output channel: the file's own where it
holds the weight int8 (mapped, no copy), else computed at load (`quantize_weight`, a
quarter of the f32 weight's bytes). The bake measures the graph this function builds, so
the guard checks what the engine runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rlx.artifact.planned import exact_graph
from rlx.artifact.precision import PrecisionPlan

if TYPE_CHECKING:
    from rlx.ir.graph import Graph, Node

__all__ = ["OPENVINO", "openvino_int8_set", "openvino_int8_graph", "quantize_weight",
           "product_axis"]

OPENVINO = "openvino"
"""The key of OpenVINO's own int8 set in a plan's `calibration` (module doc)."""


def openvino_int8_set(plan: PrecisionPlan) -> dict[str, tuple[float, int]]:
    """label -> (activation scale, zero point) of the products OpenVINO runs int8; empty
    for a plan baked before the set existed."""
    found = plan.calibration.get(OPENVINO, {}).get("int8", {})
    return {label: (float(p[0]), int(p[1])) for label, p in found.items()}


def quantize_weight(weight: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """(int8 codes, f32 scales along `axis`): symmetric, max |w| of each channel -> 127."""
    w = np.asarray(weight, np.float32)
    moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
    peak = np.abs(moved).max(axis=1) if moved.size else np.zeros(w.shape[axis], np.float32)
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    codes = np.clip(np.rint(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return codes, scale


def product_axis(graph: Graph, node: Node) -> int | None:
    """The output-channel axis of a Conv's or 2-D MatMul's constant f32 weight, else None."""
    from rlx.ir.dtype import DType
    from rlx.ir.ops.linalg import MatMul
    from rlx.ir.ops.sources import Constant
    from rlx.ir.ops.windows import Conv

    if node.is_tuple or len(node.inputs) < 2:
        return None
    weight = graph.node(node.inputs[1])
    if not isinstance(weight.op, Constant) or weight.is_tuple \
            or weight.tensor_shape.dtype is not DType.F32:
        return None
    if isinstance(node.op, Conv) and weight.tensor_shape.rank >= 3:
        return 0
    return 1 if isinstance(node.op, MatMul) and weight.tensor_shape.rank == 2 else None


def openvino_int8_graph(graph: Graph, plan: PrecisionPlan,
                        chosen: dict[str, tuple[float, int]] | None = None) -> Graph:
    """The plan's exact graph with the products of `chosen` (default: the plan's own
    OpenVINO set) reading their activation through a u8 pair with its stored scale and
    zero point and their weight as int8 codes (module doc). A tensor read by several of
    them at one scale is quantised once."""
    from rlx.ir.ops.quant import DequantizeLinear, QuantizeLinear
    from rlx.ir.rewrite import Rewriter, constant_value

    chosen = openvino_int8_set(plan) if chosen is None else chosen
    coded = {n.inputs[1] for n in graph.nodes() if (n.origin or n.name) in chosen
             and _coded_weight(graph, n)}
    exact = exact_graph(graph, plan, coded)
    if not chosen:
        return exact
    rw = Rewriter(exact)
    pairs: dict[tuple[int, float, int], int] = {}

    def pair(source: int, scale: float, zero: int, name: str) -> int:
        key = (source, scale, zero)
        if key not in pairs:
            s = rw.emit_constant(np.asarray(scale, np.float32))
            z = rw.emit_constant(np.asarray(zero, np.uint8))
            q = rw.emit(QuantizeLinear(axis=1), (rw.id(source), s, z),
                        name=rw.fresh_name(f"{name}/quantize"))
            pairs[key] = rw.emit(DequantizeLinear(axis=1), (q, s, z))
        return pairs[key]

    for node in exact.nodes():
        label = node.origin or node.name or ""
        axis = product_axis(exact, node)
        if label not in chosen or axis is None and not _coded_weight(exact, node):
            rw.copy(node)
            continue
        if axis is None:  # the file's own codes, mapped
            w = rw.id(node.inputs[1])
        else:
            weight = constant_value(exact.node(node.inputs[1]))
            assert weight is not None  # product_axis: a constant
            codes, scales = quantize_weight(weight, axis)
            w = rw.emit(DequantizeLinear(axis=axis), tuple(rw.emit_constant(a) for a in (
                codes, scales, np.zeros(scales.shape, np.int8))))
        x = pair(node.inputs[0], *chosen[label], label)
        rw.substitute(node, node.op, (x, w, *(rw.id(i) for i in node.inputs[2:])), node.shape)
    return rw.finish()


def _coded_weight(graph: Graph, node: Node) -> bool:
    """Whether `node` is a Conv or MatMul whose weight is int8 codes the file holds."""
    from rlx.ir.ops.linalg import MatMul
    from rlx.ir.ops.quant import DequantizeLinear
    from rlx.ir.ops.sources import Constant
    from rlx.ir.ops.windows import Conv

    if not isinstance(node.op, (Conv, MatMul)) or len(node.inputs) < 2:
        return False
    weight = graph.node(node.inputs[1])
    return isinstance(weight.op, DequantizeLinear) \
        and isinstance(graph.node(weight.inputs[0]).op, Constant)
