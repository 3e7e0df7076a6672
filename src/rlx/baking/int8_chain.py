"""The nodes between int8 nodes that stay in 8 bits: an int8 plan's chains.

An int8 Conv's output and the next int8 node's input are often one op apart: a SiLU, a
residual Add, a Concat, a MaxPool, a nearest Resize, a Split. Computed in f32, each such
op costs a DequantizeLinear -> f32 op -> QuantizeLinear round trip; measured on a YOLO-style
detector (onnxruntime, 1 thread), its SiLUs alone (two DequantizeLinear each, as
onnxruntime gives every reader its own, a Sigmoid, a Mul and a QuantizeLinear) took as
long as its int8 Convs. Quantised on both sides, onnxruntime runs them on u8 instead:

- `REQUANTISED`: an op whose output gets its own calibrated scale: Sigmoid and LeakyRelu
  (QLinearSigmoid / QLinearLeakyRelu, a 256-entry table), Add and Mul of two quantised
  tensors (QLinearAdd / QLinearMul), Concat (QLinearConcat), average pooling
  (QLinearAveragePool / QLinearGlobalAveragePool), and SiLU, written as Sigmoid, its
  quantised output (range [0, sigmoid(high)], read off its input's) and a QLinearMul;
  where such an op's only reader is a Relu, the Relu's output is quantised instead (zero
  point 0: onnxruntime drops the Relu, as after a Conv), an Add of a residual block;
- `SHARED`: an op that only moves or selects values (MaxPool, nearest Resize, Reshape,
  Transpose, Flatten, Squeeze, Unsqueeze, Slice, a Split's parts): its output takes its
  input's scale and zero point, so onnxruntime drops the pair and runs it on u8, and the
  quantisation is exact (it selects codes).

At 2 threads these u8 kernels mostly run on one: onnxruntime 1.32 prices them at one cycle
an element and splits only tensors of >= ~160k elements (a SiLU's table and product on
[1, 64, 40, 40]: 53 us at 1 thread, 56 at 2; on [1, 32, 80, 80]: 98 and 61 us), so they
are most of what a detector's int8 graph does not gain from a second thread (1.7 of
6.8 ms on nudenet-320n). The f32 round trip is no way out: its DequantizeLinear is a
one-thread scalar loop, and the SiLU costs 1.6x more at 1 and 2 threads (87 us there).

A chain node joins when every float input it reads is quantised (an int8 node's input or
output, or a chain node's output), and stays only where a reader needs its output quantised
(an int8 node's input, or another chain node): a chain that ends in f32 readers would add a
quantisation for nothing. Its output is never a graph output. The chain follows from the
int8 nodes the plan picks, so the guard's bisection over them (`rlx.baking.fast`) checks it
too: an int8 node kept f32 takes the chain nodes that needed it with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlx.ir.dtype import DType
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.elementwise import Activation, Binary, BinaryOp, Unary
from rlx.ir.ops.multi import TupleGet
from rlx.ir.ops.resize import Resize, ResizeMode
from rlx.ir.ops.shaping import Flatten, Reshape, Squeeze, Transpose, Unsqueeze
from rlx.ir.ops.slicing import Concat, Slice, Split
from rlx.ir.ops.sources import Constant
from rlx.ir.ops.windows import GlobalPool, Pool, PoolKind

__all__ = ["Chain", "chain", "data_inputs"]

_TABLES = (Activation.SIGMOID, Activation.LEAKY_RELU, Activation.SILU)
_MOVES = (Reshape, Transpose, Flatten, Squeeze, Unsqueeze, Slice, TupleGet)


@dataclass
class Chain:
    """`requantised`: chain nodes quantised with their own calibrated range; `shared`: chain
    node -> the quantised tensor whose scale and zero point its output takes; `split`:
    tuple-valued chain nodes (a Split), read quantised and not quantised themselves;
    `inner`: chain nodes whose Relu is quantised instead of them."""

    requantised: set[int] = field(default_factory=set)
    shared: dict[int, int] = field(default_factory=dict)
    split: set[int] = field(default_factory=set)
    inner: set[int] = field(default_factory=set)

    @property
    def nodes(self) -> set[int]:
        return self.requantised | set(self.shared) | self.split | self.inner


def data_inputs(graph: Graph, node: Node) -> list[int] | None:
    """The inputs that must be quantised for `node` to run on u8, or None when it cannot."""
    op, first = node.op, list(node.inputs[:1])
    if isinstance(op, Unary):
        return first if op.kind in _TABLES else None
    if isinstance(op, Binary) and op.op in (BinaryOp.ADD, BinaryOp.MUL):
        ins = [graph.node(i) for i in node.inputs]
        return None if any(isinstance(i.op, Constant) for i in ins) else list(node.inputs)
    if isinstance(op, Concat):
        return list(node.inputs)
    if isinstance(op, Pool | GlobalPool) or isinstance(op, Resize) and \
            op.mode is ResizeMode.NEAREST or isinstance(op, (*_MOVES, Split)):
        rest = (graph.node(i) for i in node.inputs[1:])  # shapes, indices, scales
        return None if any(r.tensor_shape.dtype.is_float and not isinstance(r.op, Constant)
                           for r in rest) else first
    return None


def _shares(node: Node) -> bool:
    op = node.op
    return isinstance(op, (*_MOVES, Split, Resize)) or \
        isinstance(op, Pool) and op.kind is PoolKind.MAX


def _relu_after(graph: Graph, node: Node, joined: dict[int, int | None],
                users: list[list[int]]) -> bool:
    """Whether `node` is a Relu and the only reader of a requantised chain node."""
    if not (isinstance(node.op, Unary) and node.op.kind is Activation.RELU):
        return False
    source = node.inputs[0]
    return source in joined and joined[source] is None and users[source] == [node.id] \
        and not graph.node(source).is_tuple


def chain(graph: Graph, quantised: set[int], int8_inputs: set[int]) -> Chain:
    """The chain of a plan whose int8 nodes quantise the tensors `quantised` and read
    `int8_inputs` quantised (module doc)."""
    joined: dict[int, int | None] = {}  # chain node -> the tensor it shares, or None
    users = graph.users()
    inner: set[int] = set()
    for node in graph.nodes():
        f32 = node.is_tuple or node.tensor_shape.dtype is DType.F32
        if not f32 or node.id in graph.outputs:
            continue
        if _relu_after(graph, node, joined, users):
            inner.add(node.inputs[0])
            joined[node.id] = None
            continue
        data = data_inputs(graph, node)
        if data and all(i in quantised or i in joined for i in data):
            # a Split's part takes the scale of the Split's input
            source = joined[data[0]] if graph.node(data[0]).is_tuple else data[0]
            joined[node.id] = source if _shares(node) else None
    kept: set[int] = set()
    for node_id in sorted(joined, reverse=True):  # readers come after: one pass settles it
        if node_id in int8_inputs or any(u in kept for u in users[node_id]):
            kept.add(node_id)
        else:
            del joined[node_id]
    found = Chain()
    for node_id, source in joined.items():
        if graph.node(node_id).is_tuple:
            found.split.add(node_id)
        elif node_id in inner:
            found.inner.add(node_id)
        elif source is None:
            found.requantised.add(node_id)
        else:
            found.shared[node_id] = source
    return found
