"""int8 nodes in ONNX's QDQ form: which nodes can run int8, their quantisation parameters,
and the nodes that say so in the graph.

A candidate is a float32 Conv (weight `[M, C/g, *kernel]`) or a MatMul with a constant 2-D
float32 weight `[K, N]` and a computed activation, whose products sum at least
`MIN_REDUCTION` terms (C/g * kernel size, or K). A shorter sum is too little arithmetic per
activation byte for int8 to pay for quantising that activation: depthwise convolutions (9
or 25 terms), a 3-channel image's first conv (27) and narrow 1x1 convs are memory-bound,
and their Q/DQ pairs cost more than int8 saves (measured on a MobileNetV3 classifier:
every Conv int8 ran 4x slower than f32 on onnxruntime). As int8 it reads

    x -> QuantizeLinear -> DequantizeLinear       (u8, scale and zero point from x's range)
    W (int8 codes) -> DequantizeLinear            (symmetric, one scale per output channel)

and its output, after the bias Add when its only reader adds a constant, goes through the
same activation pair. That is the form onnxruntime fuses into its int8 kernels (QLinearConv,
QGemm, QLinearMatMul: measured, an unquantised Conv output leaves the Conv f32) and
OpenVINO's low-precision transformations run as u8 x i8; the numpy runtime computes the
same numerics op by op, as the reference.

u8 activations and s8 weights are the pair the VNNI instructions multiply; the activation
range always holds 0, so zero (padding, ReLU's floor) is exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rlx.ir.dtype import DType
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.elementwise import Binary, BinaryOp
from rlx.ir.ops.linalg import MatMul
from rlx.ir.ops.nn import Conv
from rlx.ir.ops.quant import DequantizeLinear, QuantizeLinear
from rlx.ir.ops.sources import Constant
from rlx.ir.rewrite import Rewriter, constant_value

MIN_REDUCTION = 64
"""Fewest terms per output value for a node to be an int8 candidate (module doc)."""

__all__ = ["MIN_REDUCTION", "Candidate", "ActivationRange", "candidates", "quantize_weight",
           "Int8Emitter", "apply_int8"]


@dataclass(frozen=True)
class Candidate:
    """A node that may run int8: its id, its activation and weight inputs, and `output`,
    the node whose value is quantised as its output (itself, or its bias Add)."""

    node: int
    activation: int
    weight: int
    output: int | None  # None: the node's value is a graph output, left unquantised
    axis: int  # the weight's output-channel axis

    def label(self, graph: Graph) -> str:
        node = graph.node(self.node)
        return node.origin or node.name or f"%{node.id}"


@dataclass(frozen=True)
class ActivationRange:
    """What calibration saw of a tensor: its smallest and largest value."""

    low: float
    high: float

    def parameters(self) -> tuple[np.ndarray, np.ndarray]:
        """(scale f32 [], zero point u8 []): [min(low, 0), max(high, 0)] onto 0..255."""
        low, high = min(self.low, 0.0), max(self.high, 0.0)
        if not np.isfinite(low) or not np.isfinite(high) or high == low:
            return np.asarray(1.0, np.float32), np.asarray(0, np.uint8)
        scale = np.float32((high - low) / 255.0)
        zero = np.clip(np.rint(-low / scale), 0, 255)
        return np.asarray(scale, np.float32), np.asarray(zero, np.uint8)


def _is_f32_constant(node: Node) -> bool:
    return isinstance(node.op, Constant) and not node.is_tuple \
        and node.tensor_shape.dtype is DType.F32 and constant_value(node) is not None


def candidates(graph: Graph) -> list[Candidate]:
    """Every node of the top graph that may run int8 (module doc), in graph order."""
    users = graph.users()
    found = []
    for node in graph.nodes():
        if node.is_tuple or node.tensor_shape.dtype is not DType.F32 or len(node.inputs) < 2:
            continue
        x, w = (graph.node(i) for i in node.inputs[:2])
        if _is_f32_constant(x) or not _is_f32_constant(w):
            continue
        dims = [int(d) for d in w.tensor_shape.dims]  # a constant's: static
        if isinstance(node.op, Conv) and len(dims) >= 3:
            axis, terms = 0, math.prod(dims[1:])
        elif isinstance(node.op, MatMul) and len(dims) == 2 and x.tensor_shape.rank >= 2:
            axis, terms = 1, dims[0]
        else:
            continue
        if terms < MIN_REDUCTION:
            continue
        found.append(Candidate(node.id, x.id, w.id, _output(graph, node, users), axis))
    return found


def _output(graph: Graph, node: Node, users: list[list[int]]) -> int | None:
    """The node's bias Add when that is its only reader, else the node itself; None when
    that is a graph output (its name and its accuracy are the user's)."""
    out = node.id
    if len(users[node.id]) == 1 and node.id not in graph.outputs:
        add = graph.node(users[node.id][0])
        if isinstance(add.op, Binary) and add.op.op is BinaryOp.ADD and not add.is_tuple \
                and add.tensor_shape == node.tensor_shape:
            other = graph.node(add.inputs[1] if add.inputs[0] == node.id else add.inputs[0])
            if _is_f32_constant(other):
                out = add.id
    return None if out in graph.outputs else out


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


class Int8Emitter:
    """Emits the QDQ nodes of int8 candidates into a `Rewriter`'s new graph, naming each
    activation quantiser it makes (`quantizers`, what `precision="exact"` takes out)."""

    def __init__(self, rw: Rewriter, ranges: dict[int, ActivationRange]):
        self.rw, self.ranges = rw, ranges  # ranges: by source node id
        self.quantizers: list[str] = []
        self._weights: dict[tuple[int, int], int] = {}  # (weight id, axis) -> its DQ

    def activation(self, source_id: int, new_id: int, name: str) -> int:
        """The DequantizeLinear of source node `source_id`'s value (at `new_id`)."""
        scale, zero = self.ranges[source_id].parameters()
        s, z = self.rw.emit_constant(scale), self.rw.emit_constant(zero)
        qname = self.rw.fresh_name(f"{name}/quantize")
        self.quantizers.append(qname)
        q = self.rw.emit(QuantizeLinear(axis=1), (new_id, s, z), name=qname)
        return self.rw.emit(DequantizeLinear(axis=1), (q, s, z))

    def weight(self, weight: np.ndarray, axis: int) -> int:
        """The DequantizeLinear of `weight` stored as int8 codes with per-channel scales."""
        codes, scale = quantize_weight(weight, axis)
        zero = np.zeros(scale.shape, np.int8)
        ids = [self.rw.emit_constant(a) for a in (codes, scale, zero)]
        return self.rw.emit(DequantizeLinear(axis=axis), ids)

    def inputs(self, graph: Graph, c: Candidate, activation: int) -> tuple[int, ...]:
        """Candidate `c`'s inputs: `activation` (a new id), its weight as int8 codes, the
        rest as they are."""
        node = graph.node(c.node)
        key = (c.weight, c.axis)
        if key not in self._weights:  # a weight shared by many nodes (an unrolled RNN's)
            weight = constant_value(graph.node(c.weight))
            assert weight is not None  # candidates have constant weights
            self._weights[key] = self.weight(weight, c.axis)
        return (activation, self._weights[key], *(self.rw.id(i) for i in node.inputs[2:]))


def apply_int8(graph: Graph, chosen: list[Candidate],
               ranges: dict[int, ActivationRange]) -> tuple[Graph, list[str]]:
    """`graph` with the `chosen` candidates in QDQ form (module doc), and the names of the
    activation quantisers inserted. A tensor read by several int8 nodes, or an int8 node's
    output read by another, is quantised once."""
    rw = Rewriter(graph)
    emit = Int8Emitter(rw, ranges)
    by_node = {c.node: c for c in chosen}
    by_output = {c.output: c for c in chosen if c.output is not None}
    quantized: dict[int, int] = {}  # source id -> the DequantizeLinear standing for it
    for node in graph.nodes():
        c = by_node.get(node.id)
        if c is None:
            rw.copy(node)
        else:
            x = quantized.get(c.activation)
            if x is None:
                x = quantized[c.activation] = emit.activation(
                    c.activation, rw.id(c.activation), c.label(graph))
            rw.substitute(node, node.op, emit.inputs(graph, c, x))
        owner = by_output.get(node.id)
        if owner is not None:
            quantized[node.id] = emit.activation(node.id, rw.id(node.id), owner.label(graph))
            rw.replace(node.id, quantized[node.id])
    return rw.finish(), emit.quantizers
