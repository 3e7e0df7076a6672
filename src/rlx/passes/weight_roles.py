"""The role a weight constant plays, read off its readers: what decides how it may be stored.

The weight-encoding stage (`rlx.passes.weight_encoding`) plans by role:

- MatMul right operand `[K, N]` with K a whole number of blocks: `DequantMatMul` over the
  GGUF stream of W^T (the "BT [N, K]" layout, blocks along K);
- Gather (axis 0) of a `[V, D]` table: `DequantGather` over V padded rows (embeddings);
- Conv `[Co, Ci/g, kH, kW]`: Co rows of Ci/g x kH x kW (the reduction axis);
- ConvTranspose `[Ci, Co/g, kH, kW]`: stored transposed `[Co/g, Ci, kH, kW]`, rows along
  its reduction axis;
- MatMul right operand that DequantMatMul cannot take (K not whole blocks, batched):
  stored transposed, rows along K; left operand `[.., M, K]`: rows along K;
- LSTM / GRU / RNN W and R `[dirs, gates x H, I]`: rows along I;
- anything else: no rows (blocks along no meaningful axis would be arbitrary).
"""

from __future__ import annotations

import enum

import numpy as np

from rlx.codecs import is_ternary
from rlx.deferred import all_rows
from rlx.ir.dtype import DType
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.channelwise import BatchNormInference, InstanceNorm, PRelu
from rlx.ir.ops.control import GRU, LSTM, RNN
from rlx.ir.ops.elementwise import Activation, Binary, Cast, Clamp, Identity, Unary
from rlx.ir.ops.linalg import MatMul
from rlx.ir.ops.logic import Where
from rlx.ir.ops.nn import LayerNorm, Softmax
from rlx.ir.ops.quant import (
    DequantizeLinear,
    DynamicQuantizeLinear,
    QLinearConv,
    QLinearMatMul,
    QuantizeLinear,
)
from rlx.ir.ops.reduce import Reduce
from rlx.ir.ops.shaping import Expand, Flatten, Gather, Reshape, Squeeze, Transpose, Unsqueeze
from rlx.ir.ops.slicing import Concat, Slice
from rlx.ir.ops.sources import Constant
from rlx.ir.ops.windows import Conv, ConvTranspose, GlobalPool, Pool
from rlx.ir.rewrite import constant_payload
from rlx.passes.subgraphs import capture_offsets

__all__ = ["WeightRole", "LINEAR", "DECODED_WHOLE", "SkipReason", "all_finite", "weight_role",
           "reaching_a_rounding", "fits_dequant_matmul", "matmul_skip_reason"]


class WeightRole(str, enum.Enum):
    MATMUL = "matmul weight"
    GATHER = "gather table"
    CONV = "conv weight"
    CONV_TRANSPOSE = "conv-transpose weight"
    MATMUL_DECODED = "matmul weight (decoded)"
    MATMUL_LEFT = "matmul left operand"
    RECURRENT = "recurrent weight"
    OTHER = "other constant"

    def __str__(self) -> str:
        return self.value

    @property
    def reads_rows(self) -> bool:
        """Its reader decodes the rows it reads (DequantMatMul, DequantGather); every other
        encoded weight is decoded whole, once, by a `DecodeWeight`."""
        return self in (WeightRole.MATMUL, WeightRole.GATHER)


LINEAR = frozenset({WeightRole.MATMUL, WeightRole.GATHER, WeightRole.CONV,
                    WeightRole.CONV_TRANSPOSE, WeightRole.MATMUL_DECODED,
                    WeightRole.MATMUL_LEFT, WeightRole.RECURRENT})
"""Roles with a reduction axis for blocks to run along."""

DECODED_WHOLE = frozenset(role for role in LINEAR if not role.reads_rows)
"""Roles `DecodeWeight` decodes as a whole (DequantMatMul and DequantGather read rows)."""


class SkipReason(str, enum.Enum):
    """Why a MatMul's weight cannot be a DequantMatMul's (values are what reports print)."""

    NOT_CONSTANT = "weight is not a constant"
    STRIPPED = "weight constant has no bytes (stripped)"
    NOT_F32 = "weight is not float32"
    RANK = "weight rank is not 2 (vectors and batched weights are not packed)"
    BLOCK = "weight rows (K) are not whole blocks (packed rows would be misaligned)"
    NOT_TERNARY = "weight is not exactly ternary"
    NOT_FINITE = "weight holds inf or NaN"

    def __str__(self) -> str:
        return self.value


def fits_dequant_matmul(shape: tuple[int, ...], block_size: int) -> bool:
    """A right operand DequantMatMul takes packed: `[K, N]`, K a whole number of blocks
    (each of the N rows of `w.T` starts on a block)."""
    return len(shape) == 2 and shape[0] > 0 and shape[1] > 0 and shape[0] % block_size == 0


def matmul_skip_reason(weight: Node, block_size: int, ternary: bool) -> SkipReason | None:
    """Why the MatMul right operand `weight` cannot be stored for DequantMatMul in blocks of
    `block_size` (exactly ternary values only, with `ternary`); None when it can."""
    if not isinstance(weight.op, Constant):
        return SkipReason.NOT_CONSTANT
    if weight.tensor_shape.dtype is not DType.F32:
        return SkipReason.NOT_F32
    values = constant_payload(weight)  # a large one stays unread: checked in blocks
    if values is None:
        return SkipReason.STRIPPED
    if values.ndim != 2:
        return SkipReason.RANK
    if not fits_dequant_matmul(values.shape, block_size):
        return SkipReason.BLOCK
    if ternary:
        return None if all_rows(values, is_ternary) else SkipReason.NOT_TERNARY
    return None if all_rows(values, all_finite) else SkipReason.NOT_FINITE


def all_finite(values: np.ndarray) -> bool:
    return bool(np.isfinite(values).all())


# ops that carry a value on to their output as it is or elementwise (shape ops, activations,
# normalisations, reductions: a dynamic quantiser's scale is max - min of its input)
_CARRY = (Unary, Binary, Clamp, Cast, Identity, Where, Reduce, GlobalPool, Pool, Softmax,
          LayerNorm, BatchNormInference, InstanceNorm, PRelu, Reshape, Transpose, Concat,
          Expand, Flatten, Squeeze, Unsqueeze, Slice, DequantizeLinear)
_ROUNDING = (QuantizeLinear, DynamicQuantizeLinear, QLinearConv, QLinearMatMul)
"""The quantisers rlx keeps as ops (their scales stay as written); others are spelled out
with a Round."""


def reaching_a_rounding(graph: Graph) -> set[int]:
    """Nodes whose value reaches a rounding (a quantiser: `_ROUNDING`, or a Round, which the
    others spell out) through `_CARRY` ops only. A float constant there (a bias, a LayerNorm
    weight) is kept as it is: any rounding of it that moves a value across a step of the
    quantiser moves it by a whole step, and quantised graphs amplify each moved step
    (orientation-lcnet, dynamically quantised: its f16 biases flipped every class of three
    held-out feeds at cosine 0.99924, on a calibration feed that showed nothing)."""
    reached: set[int] = set()
    pending = [n.id for n in graph.nodes() if isinstance(n.op, _ROUNDING)
               or isinstance(n.op, Unary) and n.op.kind is Activation.ROUND]
    while pending:
        node = graph.node(pending.pop())
        # a convolution carries its bias (added to every output) but not its weights
        carried = node.inputs[2:3] if isinstance(node.op, (Conv, ConvTranspose)) \
            else node.inputs
        for i in carried:
            if i not in reached:
                reached.add(i)
                if isinstance(graph.node(i).op, (*_CARRY, Conv, ConvTranspose)):
                    pending.append(i)
    return reached


def weight_role(graph: Graph, weight: Node, shape: tuple[int, ...], readers: list[int]
                ) -> tuple[WeightRole, int, tuple[int, ...]]:
    """The role every reader agrees on, with the stored rows and perm; OTHER if they differ."""
    dims = tuple(int(d) for d in shape)
    numel = int(np.prod(dims))
    found = {role for r in readers for role in _reader_roles(graph, graph.node(r), weight.id,
                                                             len(dims))}
    if len(found) != 1:
        return WeightRole.OTHER, 1, ()
    role = found.pop()
    if role is WeightRole.CONV:
        return role, dims[0], ()
    if role is WeightRole.CONV_TRANSPOSE:
        return role, dims[1], (1, 0, *range(2, len(dims)))
    if role in (WeightRole.MATMUL, WeightRole.MATMUL_DECODED):
        perm = (*range(len(dims) - 2), len(dims) - 1, len(dims) - 2)
        return role, numel // dims[-2], perm
    if role is WeightRole.GATHER:
        return role, dims[0], ()
    if role in (WeightRole.MATMUL_LEFT, WeightRole.RECURRENT):
        return role, numel // dims[-1], ()
    return WeightRole.OTHER, 1, ()


def _reader_roles(graph: Graph, reader: Node, weight: int, rank: int) -> set[WeightRole]:
    """The roles `reader` gives `weight`; through control flow, those its subgraphs' readers
    of the captured value give it. Captured weights can only be decoded before the If/Loop
    (its subgraph readers stay as they are), so MATMUL reads as MATMUL_DECODED there."""
    offsets = capture_offsets(reader.op)
    if offsets is None:
        return {_reader_role(reader, weight, rank)}
    first, sub_first = offsets
    slots = [i for i, x in enumerate(reader.inputs) if x == weight]
    if any(s < first for s in slots):
        return {WeightRole.OTHER}  # read as a condition, a trip count or a carried value
    roles: set[WeightRole] = set()
    for sub in reader.op.subgraphs():
        inputs = sub.inputs()
        users = sub.users()
        for slot in slots:
            inner = inputs[slot - first + sub_first]
            found = {r for u in users[inner.id]
                     for r in _reader_roles(sub, sub.node(u), inner.id, rank)}
            roles |= found
    roles = {WeightRole.MATMUL_DECODED if r is WeightRole.MATMUL else
             WeightRole.OTHER if r is WeightRole.GATHER else r for r in roles}
    return roles or {WeightRole.OTHER}


def _reader_role(reader: Node, weight: int, rank: int) -> WeightRole:
    op, inputs = reader.op, reader.inputs
    slots = [i for i, x in enumerate(inputs) if x == weight]
    if len(slots) != 1:
        return WeightRole.OTHER
    slot = slots[0]
    if isinstance(op, MatMul) and rank >= 2:
        if slot == 1:
            return WeightRole.MATMUL if rank == 2 else WeightRole.MATMUL_DECODED
        return WeightRole.MATMUL_LEFT
    if isinstance(op, Conv) and slot == 1 and rank >= 3:
        return WeightRole.CONV
    if isinstance(op, ConvTranspose) and slot == 1 and rank >= 3:
        return WeightRole.CONV_TRANSPOSE
    if isinstance(op, Gather) and slot == 0 and rank == 2 and op.axis in (0, -2):
        return WeightRole.GATHER
    if isinstance(op, (LSTM, GRU, RNN)) and slot in (1, 2) and rank == 3:
        return WeightRole.RECURRENT
    return WeightRole.OTHER
