"""int8 nodes in ONNX's QDQ form: which nodes can run int8, their quantisation parameters,
and the nodes that say so in the graph.

A candidate is a float32 Conv (weight `[M, C/g, *kernel]`) or a MatMul with a constant 2-D
float32 weight `[K, N]` and a computed activation, whose products sum at least
`MIN_REDUCTION` terms (C/g * kernel size, or K). A shorter sum is too little arithmetic per
activation byte for int8 to pay for quantising that activation: depthwise convolutions (9
or 25 terms), a 3-channel image's first conv (27) and narrow 1x1 convs are memory-bound,
and their Q/DQ pairs cost more than int8 saves (measured on a MobileNetV3 classifier:
every Conv int8 ran 4x slower than f32 on onnxruntime). Such a `narrow` candidate runs int8
only where the plan quantises its input and reads its output quantised anyway (its input
is another int8 node's output or chain node, its output another int8 node's input or read
by a chain node, `rlx.baking.int8_chain`): there its Q/DQ pairs are already paid for, and
int8 saves the f32 round trip (`plan_int8`). As int8 it reads

    x -> QuantizeLinear -> DequantizeLinear       (u8, scale and zero point from x's range)
    W (int8 codes) -> DequantizeLinear            (symmetric, one scale per output channel)

A Conv's output goes through the same activation pair, after its bias Add and its Relu:
onnxruntime needs it to run QLinearConv (the Relu fused; measured, an unquantised Conv
output leaves the Conv f32). Each quantisation of an output adds about as much error as the
node's own (measured on a CRNN: a Conv's relative error 0.012 with it, 0.006 without), so
where the next node quantises the same tensor (after a Relu) the two are one. A MatMul's
output stays f32, its bias Add after it: onnxruntime runs that as MatMulIntegerToFloat and
an Add, as fast as QGemm with a quantised output (0.20 ms either way for [64, 1536] x
[1536, 384] on one Zen 4 thread) and without the output's error, most of the node's on a
BERT encoder's FFN output (outlier channels: relative error 0.131 with it, 0.026 without;
once its fusion of MatMul + Add into one f32 Gemm over dequantised weights, 1.8 ms there,
is off: `rlx.engines.onnxruntime_engine.disabled_optimizers`). OpenVINO's low-precision
transformations run this form as u8 x i8; the numpy runtime computes the same numerics op
by op, as the reference.

A MatMul of two computed tensors (attention's Q.K^T and P.V) stays f32: as u8 x u8
onnxruntime runs it no faster at a 64-token sequence (0.041 ms either way for 12 heads
[64, 32] x [32, 64]) and 16% faster at 128 tokens (0.21 vs 0.25 ms), on about 3% of a
BERT layer's multiply-adds, for a second quantisation of each input.

u8 activations and s8 weights are the pair the VNNI instructions multiply; the activation
range always holds 0, so zero (padding, ReLU's floor) is exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from rlx.artifact.openvino_form import quantize_weight
from rlx.baking.int8_chain import Chain, chain, data_inputs
from rlx.ir.dtype import DType
from rlx.ir.graph import Graph, Node
from rlx.ir.naming import node_title
from rlx.ir.ops.elementwise import Activation, Binary, BinaryOp, Unary
from rlx.ir.ops.linalg import MatMul
from rlx.ir.ops.quant import DequantizeLinear, QuantizeLinear
from rlx.ir.ops.slicing import Concat
from rlx.ir.ops.sources import Constant
from rlx.ir.ops.windows import Conv
from rlx.ir.rewrite import Rewriter, constant_value

MIN_REDUCTION = 64
"""Fewest terms per output value for a node to be an int8 candidate (module doc)."""

COPIED_SPAN = 4.0
"""Widest a range may grow for a Concat to copy codes (`copied_ranges`): two bits of the
narrowest member's resolution."""

MACS_PER_WEIGHT_BYTE = 5
"""f32 multiply-adds that take as long as reading one weight byte from memory: measured on
a 2-thread AMD EPYC, a Conv runs ~150 G multiply-adds/s and a matrix-vector product reads
its 6.5 MB weight at ~32 GB/s (`work`)."""

__all__ = ["MIN_REDUCTION", "COPIED_SPAN", "MACS_PER_WEIGHT_BYTE", "Candidate", "ActivationRange",
           "candidates", "work", "quantize_weight", "Int8Emitter", "apply_int8", "plan_int8",
           "shared_ranges", "copied_ranges"]


@dataclass(frozen=True)
class Candidate:
    """A node that may run int8: its id, its activation and weight inputs, and `output`,
    the node whose value is quantised as its output (itself, or its bias Add)."""

    node: int
    activation: int
    weight: int
    output: int | None  # None: the output stays f32 (a MatMul's, or a graph output)
    axis: int  # the weight's output-channel axis
    tail: tuple[int, ...] = ()  # its bias Add (and a Conv's Relu): local error measured after
    narrow: bool = False  # sums fewer than MIN_REDUCTION terms (module doc)

    def label(self, graph: Graph) -> str:
        return node_title(graph.node(self.node))


@dataclass(frozen=True)
class ActivationRange:
    """What calibration saw of a tensor: its smallest and largest value; for a MatMul's
    activation those of each channel of its last axis (`channels`: lows, highs); and when it
    is smoothed (`rlx.baking.smoothing`), the factors each channel is divided by before it is
    quantised, `low` and `high` then being the range of the divided tensor."""

    low: float
    high: float
    channels: tuple[np.ndarray, np.ndarray] | None = field(default=None, compare=False)
    smooth: np.ndarray | None = field(default=None, compare=False)

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
        tail = _tail(graph, node, users, relu=isinstance(node.op, Conv))
        out = tail[-1] if tail else node.id
        float_out = out in graph.outputs or isinstance(node.op, MatMul)
        found.append(Candidate(node.id, x.id, w.id, None if float_out else out, axis, tail,
                               terms < MIN_REDUCTION))
    return found


def work(graph: Graph, c: Candidate) -> float:
    """What candidate `c` costs in f32, in multiply-adds: its products (symbolic dims
    counted once) plus `MACS_PER_WEIGHT_BYTE` per byte of its f32 weight, the part int8
    quarters for a node that streams its weight (a matrix-vector product of an RNN step)."""
    node, weight = graph.node(c.node), graph.node(c.weight)
    dims = [int(d) for d in weight.tensor_shape.dims]
    terms = math.prod(dims[1:]) if isinstance(node.op, Conv) else dims[0]
    outputs = math.prod(d if isinstance(d, int) else 1 for d in node.tensor_shape.dims)
    return float(outputs * terms + MACS_PER_WEIGHT_BYTE * 4 * math.prod(dims))


def _tail(graph: Graph, node: Node, users: list[list[int]], relu: bool) -> tuple[int, ...]:
    """The nodes after `node` its local error is measured on: its bias Add, then (`relu`)
    the Relu, each when it is the only reader of the one before; a Conv's output is
    quantised after them (module doc)."""
    tail: list[int] = []
    last = node
    while len(users[last.id]) == 1 and last.id not in graph.outputs:
        user = graph.node(users[last.id][0])
        if user.is_tuple or user.tensor_shape != node.tensor_shape:
            break
        if not tail and isinstance(user.op, Binary) and user.op.op is BinaryOp.ADD:
            other = graph.node(user.inputs[1] if user.inputs[0] == last.id else user.inputs[0])
            if not _is_f32_constant(other):
                break
        elif not (relu and isinstance(user.op, Unary) and user.op.kind is Activation.RELU):
            break
        tail.append(user.id)
        last = user
        if isinstance(user.op, Unary):
            break
    return tuple(tail)


class Int8Emitter:
    """Emits the QDQ nodes of int8 candidates into a `Rewriter`'s new graph, naming each
    activation quantiser it makes (`quantizers`, what `precision="exact"` takes out)."""

    def __init__(self, rw: Rewriter, ranges: dict[int, ActivationRange]):
        self.rw, self.ranges = rw, ranges  # ranges: by source node id
        self.quantizers: list[str] = []
        # (weight id, axis, the activation whose factors scale it) -> its DequantizeLinear
        self._weights: dict[tuple[int, int, int | None], int] = {}

    def activation(self, source_id: int, new_id: int, name: str,
                   value_range: ActivationRange | None = None) -> int:
        """The DequantizeLinear of source node `source_id`'s value (at `new_id`), over
        `value_range` (default: the range calibration saw of it), divided by its smoothing
        factors first where it has them."""
        found = value_range or self.ranges[source_id]
        scale, zero = found.parameters()
        if found.smooth is not None:
            inverse = self.rw.emit_constant((1 / found.smooth).astype(np.float32))
            new_id = self.rw.emit(Binary(BinaryOp.MUL), (new_id, inverse))
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
        """Candidate `c`'s inputs: `activation` (a new id), its weight as int8 codes (its
        rows times the activation's smoothing factors, where it has them), the rest as they
        are."""
        node = graph.node(c.node)
        smooth = self.ranges[c.activation].smooth
        key = (c.weight, c.axis, None if smooth is None else c.activation)
        if key not in self._weights:  # a weight shared by many nodes (an unrolled RNN's)
            weight = constant_value(graph.node(c.weight))
            assert weight is not None  # candidates have constant weights
            if smooth is not None:
                weight = weight * smooth[:, None]
            self._weights[key] = self.weight(weight, c.axis)
        return (activation, self._weights[key], *(self.rw.id(i) for i in node.inputs[2:]))


def apply_int8(graph: Graph, chosen: list[Candidate],
               ranges: dict[int, ActivationRange]) -> tuple[Graph, list[str]]:
    """`graph` with the `chosen` candidates and their chain (`rlx.baking.int8_chain`) in
    QDQ form (module doc), and the names of the activation quantisers inserted. A tensor
    read by several int8 nodes, or an int8 node's output read by another, is quantised
    once; a Concat and its sources share one range where they may (`copied_ranges`)."""
    chosen, links = plan_int8(graph, chosen)
    rw = Rewriter(graph)
    ranges = {**ranges, **copied_ranges(graph, links, ranges)}
    emit = Int8Emitter(rw, {**ranges, **shared_ranges(links, ranges)})
    by_node = {c.node: c for c in chosen}
    labels = {c.output: c.label(graph) for c in chosen if c.output is not None}
    labels.update((n, node_title(graph.node(n))) for n in links.requantised | set(links.shared))
    quantized: dict[int, int] = {}  # source id -> the DequantizeLinear standing for it

    def read(source: int, label: str) -> int:
        if source not in quantized:
            quantized[source] = emit.activation(source, rw.id(source), label)
        return quantized[source]

    for node in graph.nodes():
        c = by_node.get(node.id)
        if c is not None:
            rw.substitute(node, node.op, emit.inputs(graph, c, read(c.activation, c.label(graph))))
        elif node.id in links.nodes:
            data = (i for i in data_inputs(graph, node) or ()  # a Relu reads its input f32
                    if not graph.node(i).is_tuple and i not in links.inner)
            _emit_chain_node(emit, graph, node, {i: read(i, node_title(node)) for i in data})
        else:
            rw.copy(node)
        label = labels.get(node.id)
        if label is not None:
            quantized[node.id] = emit.activation(node.id, rw.id(node.id), label)
            rw.replace(node.id, quantized[node.id])
    return rw.finish(), emit.quantizers


def plan_int8(graph: Graph, chosen: list[Candidate]) -> tuple[list[Candidate], Chain]:
    """The candidates of `chosen` that run int8, and their chain: every wide one, and the
    narrow ones whose input the rest quantise and whose output they read quantised (module
    doc). Starting from all of them, narrow ones that fail drop until none does (a narrow
    one's input or reader may be another narrow one)."""
    wide = [c for c in chosen if not c.narrow]
    narrow = [c for c in chosen if c.narrow]
    users = graph.users()
    while True:
        plan = wide + narrow
        outputs = {c.output for c in plan if c.output is not None}
        links = chain(graph, {c.activation for c in plan} | outputs,
                      {c.activation for c in plan})
        values = outputs | links.requantised | set(links.shared)
        fed = values | {c.activation for c in wide}
        kept = [c for c in narrow if c.activation in fed and c.output is not None and (
            any(u in links.nodes for u in users[c.output])
            or any(d.activation == c.output for d in plan))]
        if len(kept) == len(narrow):
            order = {c.node: k for k, c in enumerate(chosen)}
            return sorted(plan, key=lambda c: order[c.node]), links
        narrow = kept


def shared_ranges(links: Chain, ranges: dict[int, ActivationRange]
                  ) -> dict[int, ActivationRange]:
    """The ranges of the chain nodes that take their input's scale, in graph order."""
    found: dict[int, ActivationRange] = {}
    for node_id in sorted(links.shared):
        source = links.shared[node_id]
        found[node_id] = found.get(source) or ranges[source]
    return found


def copied_ranges(graph: Graph, links: Chain, ranges: dict[int, ActivationRange]
                  ) -> dict[int, ActivationRange]:
    """One range for each requantised Concat of the chain and the tensors its inputs take
    their scale from, the union of theirs, so that onnxruntime's QLinearConcat copies codes
    instead of looking each input up in a table of its own (nudenet-320n's 13 Concats:
    0.40 ms, 0.16 copied, one thread at any thread count; its held-out cosine 0.999948,
    0.999956 with copies). Concats sharing a source share the range. A Concat keeps its
    tables where the union would be over `COPIED_SPAN` times a member's span (nudenet's
    widest: 2.4), mix a Relu's output (its range [0, high], what lets onnxruntime drop the
    Relu) with signed tensors, or take in a smoothed or per-channel range (a MatMul's)."""
    parent: dict[int, int] = {}
    joined: dict[int, list[ActivationRange]] = {}  # a group's root -> its members' ranges

    def root(t: int) -> int:
        while t in links.shared:  # a MaxPool's or a Split part's: its source's scale
            t = links.shared[t]
        while parent.get(t, t) != t:
            t = parent[t]
        return t

    for node_id in sorted(links.requantised):
        if not isinstance(graph.node(node_id).op, Concat):
            continue
        top = root(node_id)
        sources = {root(i) for i in graph.node(node_id).inputs} - {top}
        members = [r for t in (top, *sources) for r in joined.get(t, [ranges[t]])]
        if _joinable(members):
            parent.update((t, top) for t in sources)
            joined[top] = members
            for t in sources:
                joined.pop(t, None)
    found: dict[int, ActivationRange] = {}
    for top, members in joined.items():
        union = ActivationRange(min(r.low for r in members), max(r.high for r in members))
        found.update((t, union) for t in [top, *(t for t in parent if root(t) == top)])
    return found


def _joinable(members: list[ActivationRange]) -> bool:
    """Whether the ranges may become their union (`copied_ranges`)."""
    if len({r.low >= 0 for r in members}) != 1 or any(
            r.smooth is not None or r.channels is not None for r in members):
        return False
    spans = [max(r.high, 0.0) - min(r.low, 0.0) for r in members]
    union = max(max(r.high for r in members), 0.0) - min(min(r.low for r in members), 0.0)
    return union <= COPIED_SPAN * min(spans)


def _emit_chain_node(emit: Int8Emitter, graph: Graph, node: Node, read: dict[int, int]
                     ) -> None:
    """`node` reading the DequantizeLinear of its quantised inputs (`read`); a SiLU as
    Sigmoid, its quantised output and a Mul, the form onnxruntime runs on u8."""
    rw = emit.rw
    if graph.node(node.inputs[0]).is_tuple:  # a Split's part reads the Split as it is
        rw.copy(node)
        return
    inputs = tuple(read.get(i, rw.id(i)) for i in node.inputs)
    if isinstance(node.op, Unary) and node.op.kind is Activation.SILU:
        x = inputs[0]
        gate = rw.emit(Unary(Activation.SIGMOID), (x,))
        high = emit.ranges[node.inputs[0]].high
        gate_range = ActivationRange(0.0, float(1 / (1 + np.exp(-np.float64(high)))))
        gate = emit.activation(node.id, gate, node_title(node) + "/gate", gate_range)
        rw.substitute(node, Binary(BinaryOp.MUL), (x, gate))
    else:
        rw.substitute(node, node.op, inputs)
