"""Encode weights for size: every large float32 constant, by the role its readers give it.

`plan_weight_encodings` proposes one `WeightChoice` per weight constant; the bake (and its
accuracy guard, which drops the choices that cost too much accuracy) passes the ones it
keeps to `apply_weight_encodings`. The roles, by what reads the constant:

- MatMul right operand `[K, N]` with K a whole number of blocks: `DequantMatMul` over the
  GGUF stream of W^T (the "BT [N, K]" layout, blocks along K);
- Gather (axis 0) of a `[V, D]` table: `DequantGather` over V padded rows (embeddings);
- Conv `[Co, Ci/g, kH, kW]`: Co rows of Ci/g x kH x kW (the reduction axis);
- ConvTranspose `[Ci, Co/g, kH, kW]`: stored transposed `[Co/g, Ci, kH, kW]`, rows along
  its reduction axis;
- MatMul right operand that DequantMatMul cannot take (K not whole blocks, batched):
  stored transposed, rows along K; left operand `[.., M, K]`: rows along K;
- LSTM / GRU / RNN W and R `[dirs, gates x H, I]`: rows along I;
- anything else: f16 only (blocks along no meaningful axis would be arbitrary).

All but the first two become `DecodeWeight` over the packed constant (decoded once at run
time, consumers unchanged). Rows that DequantMatMul and DequantGather read are padded to
whole blocks, never straddled. A tensor decoded whole whose rows are not whole blocks is
stored as one row instead, padded once at its end: its blocks still run along the
reduction axis but may span two rows (a 3x3 depthwise conv's rows of 9 values, padded to
32 each, took more bytes than f16; as one row they take 0.53 of f16, for a relative error
measured 1.0-1.9x that of padded rows on PP-OCR's convs). Q8_0 is proposed only when it is
smaller than f16; f16 only when it holds the values (no overflow, relative error <=
`F16_MAX_REL_ERROR`). Exactly ternary weights (-1/0/+1) are
proposed as TQ2_0, which is lossless; `lossless=True` proposes only those.

The int8 codes a DequantizeLinear reads stay as they are (it is not folded where that
would widen them). Float weights already on an int8 grid are stored exactly, as `q8_f32`
rows: their codes with the grid's float32 step as block scales (`int8_grid`), 1.125
bytes a value. Q8_0 would move them: its max / 127 per block rounds them onto another grid
(measured 6e-3 relative error on captcha-crnn's QDQ LSTM weights), and even with the step
as its scale, the scale's f16 is off by up to 2^-11, which the quantisers after the weight
turn into whole steps (PP-OCR's classifier, statically quantised: cosine 0.99898 against
its exact bake, where `q8_f32` gives it back bit for bit). They are never stored f16
(not exact either); where q8_f32's padded rows are no smaller than f32, they stay f32.

The plan reads one weight at a time and keeps only its decision; a large encoded stream
is not computed here but deferred (`rlx.deferred`): it is encoded when it is read (by the
writer, which streams it to the file), so a bake never holds every encoded weight.
"""

from __future__ import annotations

import enum
import logging
from collections import Counter
from dataclasses import dataclass

import numpy as np

from rlx.codecs import (
    Encoding,
    decode_rows,
    encode_rows,
    int8_grid,
    is_ternary,
    padded_length,
    quantize_q8_0,
    quantize_q8_f32_on_grid,
    quantize_tq2_0,
    roundtrip_q8_0_columns,
    transposed,
)
from rlx.deferred import byte_view, compute
from rlx.ir.dtype import DType
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.control import GRU, LSTM, RNN
from rlx.ir.ops.elementwise import Activation, Binary, Cast, Clamp, Identity, Unary, Where
from rlx.ir.ops.linalg import DequantMatMul, MatMul, QuantScheme
from rlx.ir.ops.nn import (
    BatchNormInference,
    Conv,
    ConvTranspose,
    GlobalPool,
    InstanceNorm,
    LayerNorm,
    Pool,
    PRelu,
    Softmax,
)
from rlx.ir.ops.packed import DecodeWeight, DequantGather, padded_row_bytes
from rlx.ir.ops.quant import DequantizeLinear, DynamicQuantizeLinear, QuantizeLinear
from rlx.ir.ops.reduce import Reduce
from rlx.ir.ops.shaping import (
    Concat,
    Expand,
    Flatten,
    Gather,
    Reshape,
    Slice,
    Squeeze,
    Transpose,
    Unsqueeze,
)
from rlx.ir.ops.sources import Constant
from rlx.ir.rewrite import Rewriter, constant_value
from rlx.ir.shape import Shape
from rlx.passes.packing import fits_dequant_matmul
from rlx.passes.subgraphs import capture_offsets

__all__ = ["WeightRole", "WeightChoice", "plan_weight_encodings", "apply_weight_encodings",
           "MIN_ELEMENTS", "MIN_BLOCK_ELEMENTS", "F16_MAX_REL_ERROR", "Q8_0", "TQ2_0", "Q8_F32",
           "F16"]

log = logging.getLogger(__name__)
progress = logging.getLogger("rlx.progress")  # what a terminal shows while it runs

Q8_0, TQ2_0, F16 = QuantScheme.GGUF_Q8_0.label, QuantScheme.GGUF_TQ2_0.label, "f16"
Q8_F32 = Encoding.Q8_F32.label  # exact, for weights on an int8 grid

MIN_ELEMENTS = 64
"""Constants smaller than this stay as they are: f16 saves them at most 128 bytes (nothing
below 32 values, blobs being 64-byte aligned), no more than their DecodeWeight node and
guard run cost. 64 rather than 256 made PP-OCR's classifier's size-profile file 4% smaller
(its biases go f16)."""

MIN_BLOCK_ELEMENTS = 256
"""Weights smaller than this are not block-encoded (f16 at most): they are the narrowest
and first layers, where an error weighs most, for a few bytes. PP-OCR's classifier's
[8, 8, 1, 1] conv as Q8_0 alone took its output's cosine to 0.9973, saving 188 bytes."""

F16_MAX_REL_ERROR = 1e-3
"""f16 is proposed when ||w - f16(w)|| / ||w|| is at most this (f16 keeps ~4.9e-4)."""


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


_LINEAR = {WeightRole.MATMUL, WeightRole.GATHER, WeightRole.CONV, WeightRole.CONV_TRANSPOSE,
           WeightRole.MATMUL_DECODED, WeightRole.MATMUL_LEFT, WeightRole.RECURRENT}
_DECODED_WHOLE = _LINEAR - {WeightRole.MATMUL, WeightRole.GATHER}
"""Roles `DecodeWeight` decodes as a whole (DequantMatMul and DequantGather read rows)."""


@dataclass(frozen=True)
class WeightChoice:
    """How one weight constant (`node_id` in the planned graph) is to be stored.

    `rows` x `row_length` is the stored matrix (after `perm`); `packed_bytes` its encoded
    size; `rel_error` the tensor's own ||w - decoded|| / ||w||.
    """

    node_id: int
    name: str
    role: WeightRole
    encoding: str
    shape: tuple[int, ...]
    rows: int
    perm: tuple[int, ...]
    f32_bytes: int
    packed_bytes: int
    rel_error: float

    @property
    def lossless(self) -> bool:
        """Decodes to the very values: exactly ternary weights, and int8 grids."""
        return self.encoding in (TQ2_0, Q8_F32)

    @property
    def row_length(self) -> int:
        return int(np.prod(self.shape)) // self.rows

    @property
    def saved_bytes(self) -> int:
        return self.f32_bytes - self.packed_bytes


def plan_weight_encodings(graph: Graph, lossless: bool = False, ternary: bool = True,
                          min_elements: int = MIN_ELEMENTS
                          ) -> tuple[list[WeightChoice], Counter]:
    """(choices, reasons -> count of large f32 constants left as they are). `ternary=False`
    never proposes TQ2_0 (ternary weights are then treated like any other)."""
    users = graph.users()
    quantised = _reaching_a_rounding(graph)
    choices: list[WeightChoice] = []
    skipped: Counter = Counter()
    for node in graph.nodes():
        if not isinstance(node.op, Constant) or node.tensor_shape.dtype is not DType.F32:
            continue
        values = constant_value(node)
        if values is None or values.size < min_elements or not users[node.id]:
            continue
        if node.id in graph.outputs:
            skipped["a graph output"] += 1
            continue
        if not np.isfinite(values).all():
            skipped["holds inf or NaN"] += 1
            continue
        role, rows, perm = _role(graph, node, values.shape, users[node.id])
        if node.id in quantised and role is WeightRole.OTHER:
            skipped["reaches a rounding (a quantiser) through elementwise ops"] += 1
            continue
        choice, reason = _choose(node, values, role, rows, perm, lossless, ternary)
        if choice is None:
            if reason:
                skipped[reason] += 1
            continue
        choices.append(choice)
        log.debug("weight encoding: %s (%s) -> %s, %d -> %d bytes, rel err %.2g", node.label,
                  role, choice.encoding, choice.f32_bytes, choice.packed_bytes, choice.rel_error)
    return choices, skipped


# ops that carry a value on to their output as it is or elementwise (shape ops, activations,
# normalisations, reductions: a dynamic quantiser's scale is max - min of its input)
_CARRY = (Unary, Binary, Clamp, Cast, Identity, Where, Reduce, GlobalPool, Pool, Softmax,
          LayerNorm, BatchNormInference, InstanceNorm, PRelu, Reshape, Transpose, Concat,
          Expand, Flatten, Squeeze, Unsqueeze, Slice, DequantizeLinear)
_ROUNDING = (QuantizeLinear, DynamicQuantizeLinear)
"""The quantisers rlx keeps as ops; others are spelled out with a Round."""


def _reaching_a_rounding(graph: Graph) -> set[int]:
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


def _role(graph: Graph, weight: Node, shape: tuple[int, ...], readers: list[int]
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


def _choose(node: Node, values: np.ndarray, role: WeightRole, rows: int,
            perm: tuple[int, ...], lossless: bool,
            ternary: bool) -> tuple[WeightChoice | None, str | None]:
    shape = tuple(int(d) for d in values.shape)
    length = values.size // rows
    if role is WeightRole.MATMUL and not fits_dequant_matmul(
            shape, QuantScheme.GGUF_Q8_0.block_size):
        role = WeightRole.MATMUL_DECODED  # K rows not whole blocks: padded rows instead
    candidates = []
    linear = values.size >= MIN_BLOCK_ELEMENTS and role in _LINEAR
    if ternary and linear and is_ternary(values):
        candidates.append(TQ2_0)
    elif not lossless:
        # exact whatever the size (MIN_BLOCK_ELEMENTS guards against error, and there is none)
        if int8_grid(_stored(values, rows, perm, copy=False)) is not None:
            return _grid_choice(node, values, role, rows, perm)
        if linear:
            candidates.append(Q8_0)
        candidates.append(F16)
    if not candidates:
        return None, None
    f16_bytes = values.size * 2
    for encoding in candidates:
        if role is WeightRole.MATMUL and encoding == TQ2_0 and \
                shape[0] % QuantScheme.GGUF_TQ2_0.block_size:
            role = WeightRole.MATMUL_DECODED
        if encoding != F16 and role in _DECODED_WHOLE and rows > 1 and \
                rows * padded_row_bytes(encoding, length) > padded_row_bytes(encoding, values.size):
            # decoded whole, once: one row of the whole tensor saves the per-row padding.
            # Q8_0 blocks then run on along the reduction axis into the next row (a block
            # spans at most ceil(32 / L) + 1 rows); ternary blocks are exact whatever the
            # blocking, so TQ2_0 also drops the transpose
            rows, length = 1, values.size
            perm = () if encoding == TQ2_0 else perm
        nbytes = rows * padded_row_bytes(encoding, length)
        if encoding != F16 and nbytes >= f16_bytes and not (encoding == TQ2_0 and lossless):
            continue  # padding made it no smaller than f16
        if encoding == F16 and np.abs(values).max() > float(np.finfo(np.float16).max):
            return None, "f16 would overflow"
        error = _rel_error(values, encoding, rows, perm)
        if encoding == F16 and error > F16_MAX_REL_ERROR:
            return None, f"f16 relative error above {F16_MAX_REL_ERROR:g}"
        if encoding == F16 and role not in (WeightRole.OTHER, WeightRole.GATHER):
            role, rows, perm = WeightRole.OTHER, 1, ()  # plain floats: no rows to keep
        return WeightChoice(node.id, node.name or node.label, role, encoding, shape, rows, perm,
                            values.nbytes, nbytes, error), None
    return None, None


def _grid_choice(node: Node, values: np.ndarray, role: WeightRole, rows: int,
                 perm: tuple[int, ...]) -> tuple[WeightChoice | None, str | None]:
    """q8_f32 rows of a weight on an int8 grid (a step per row, so rows stay rows), decoded
    whole: DequantMatMul reads GGUF streams only."""
    nbytes = rows * padded_row_bytes(Q8_F32, values.size // rows)
    if nbytes >= values.nbytes:
        return None, "on an int8 grid, and q8_f32 rows would be no smaller"
    if role is WeightRole.MATMUL:
        role = WeightRole.MATMUL_DECODED
    return WeightChoice(node.id, node.name or node.label, role, Q8_F32,
                        tuple(int(d) for d in values.shape), rows, perm, values.nbytes, nbytes,
                        0.0), None


def _stored(values: np.ndarray, rows: int, perm: tuple[int, ...], copy: bool = True
            ) -> np.ndarray:
    """The weight as the `[rows, L]` matrix it is stored as (a view where numpy can make
    one, unless `copy`: a MatMul weight's W^T, for reading only)."""
    stored = values.transpose(perm) if perm else values
    if copy:
        stored = np.ascontiguousarray(stored, np.float32)
    return stored.reshape(rows, -1)


def _rel_error(values: np.ndarray, encoding: str, rows: int, perm: tuple[int, ...]) -> float:
    """||w - decoded|| / ||w|| of the weight stored as `rows` encoded rows in `perm` order,
    without a transposed copy where it can: f16 is value by value (any order will do), and
    a `[K, N]` MatMul weight's Q8_0 stream of W^T is measured down its columns."""
    length = values.size // rows
    if encoding == Q8_0 and perm == (1, 0) and \
            padded_length(encoding, length) == length and rows == values.shape[1]:
        decoded = roundtrip_q8_0_columns(values)
    else:
        if encoding == F16:
            rows, perm = 1, ()
        values = _stored(values, rows, perm)
        decoded = decode_rows(encoding, encode_rows(encoding, values), rows, values.shape[1])
    norm = float(np.linalg.norm(values))
    return float(np.linalg.norm(decoded - values)) / norm if norm else 0.0


def apply_weight_encodings(graph: Graph, choices: list[WeightChoice]) -> tuple[Graph, int]:
    """The graph with each chosen constant stored encoded; (graph, constants encoded)."""
    by_id = {c.node_id: c for c in choices}
    if not by_id:
        return graph, 0
    rw = Rewriter(graph)
    packed: dict[int, int] = {}  # weight id -> new id of its packed constant
    for node in graph.nodes():
        choice = by_id.get(node.id)
        if choice is not None:
            progress.debug("encoding %s as %s (%d of %d tensors)", choice.name,
                           choice.encoding, len(packed) + 1, len(by_id))
            packed[node.id] = _emit(rw, node, choice)
            continue
        readers = [i for i in node.inputs if i in packed and
                   by_id[i].role in (WeightRole.MATMUL, WeightRole.GATHER)]
        if not readers:
            rw.copy(node)
            continue
        weight = readers[0]
        choice = by_id[weight]
        if choice.role is WeightRole.MATMUL:
            scheme = QuantScheme.parse(choice.encoding)
            rw.substitute(node, DequantMatMul(scheme, choice.shape[1]),
                          (rw.id(node.inputs[0]), packed[weight]), node.shape)
        else:
            rw.substitute(node, DequantGather(choice.encoding, *choice.shape),
                          (packed[weight], rw.id(node.inputs[1])), node.shape)
    log.info("weight encoding %r: %d constant(s) encoded", graph.name, len(packed))
    return rw.finish(), len(packed)


def _emit(rw: Rewriter, node: Node, choice: WeightChoice) -> int:
    assert isinstance(node.op, Constant)  # choices are of constants
    matmul = choice.role is WeightRole.MATMUL
    stream = compute(_encoded, (node.op.data,),
                     (choice.encoding, matmul, choice.shape, choice.rows, choice.perm),
                     (choice.packed_bytes,), np.uint8)  # deferred when large: rlx.deferred
    packed = rw.emit_constant(stream, node.name)
    if choice.role in (WeightRole.MATMUL, WeightRole.GATHER):
        rw.drop(node.id)
        return packed
    op = DecodeWeight(choice.encoding, choice.shape, choice.rows, choice.perm)
    decoded = rw.emit(op, (packed,), Shape(choice.shape, DType.F32))
    rw.replace(node.id, decoded)
    return packed


def _encoded(encoding: str, matmul: bool, shape: tuple[int, ...], rows: int,
             perm: tuple[int, ...], data: np.ndarray) -> np.ndarray:
    """The stored stream of an f32 weight's bytes: the GGUF stream of W^T for a MatMul
    weight (K whole blocks), else `rows` encoded rows of the weight in `perm` order."""
    values = byte_view(data).view(np.float32).reshape(shape)
    if matmul:
        return (quantize_q8_0 if encoding == Q8_0 else quantize_tq2_0)(transposed(values))
    stored = _stored(values, rows, perm)
    if encoding == Q8_F32:
        return _grid_rows(stored)
    return encode_rows(encoding, stored)


def _grid_rows(matrix: np.ndarray) -> np.ndarray:
    """q8_f32 rows (padded to whole blocks) of a matrix on an int8 grid, its steps as scales."""
    length = padded_length(Q8_F32, matrix.shape[1])
    steps = int8_grid(matrix)
    assert steps is not None  # planned as on a grid
    padded = np.pad(matrix, ((0, 0), (0, length - matrix.shape[1])))
    return quantize_q8_f32_on_grid(padded, np.repeat(steps, length // Encoding.Q8_F32.block_size))
