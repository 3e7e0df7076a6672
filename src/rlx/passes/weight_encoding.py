"""The weight-encoding stage: plan how each weight constant is stored, by role, then apply.

`plan_weight_encodings` proposes one `WeightChoice` per weight constant (pure: it reads the
graph and returns its choices); the bake (and its accuracy guard, which drops the choices
that cost too much accuracy) passes the ones it keeps to `apply_weight_encodings`.
`encode_ternary_matmuls` is the same plan and rewrite for the bake's early lossless step:
exactly ternary MatMul weights as TQ2_0, before simplification sees their MatMuls. Roles
(`rlx.passes.weight_roles`) decide the layout: MatMul weights `[K, N]` with K whole blocks
become `DequantMatMul` over the GGUF stream of W^T, `[V, D]` Gather tables `DequantGather`
over V padded rows, and every other encoded weight a `DecodeWeight` over its packed
constant (decoded once at run time, consumers unchanged). Encodings are `rlx.codecs`
`Encoding` members end to end, encoded and decoded through its codec table.

Rows that DequantMatMul and DequantGather read are padded to whole blocks, never straddled.
A tensor decoded whole whose rows are not whole blocks is stored as one row instead, padded
once at its end: its blocks still run along the reduction axis but may span two rows (a 3x3
depthwise conv's rows of 9 values, padded to 32 each, took more bytes than f16; as one row
they take 0.53 of f16, for a relative error measured 1.0-1.9x that of padded rows on
PP-OCR's convs). Where channels' ranges differ, such a block rounds the small channels' values
to zero, so a whole-decoded Q8_0 tensor also gets row exponents (one byte a channel, see
`DecodeWeight`) when they cut its worst channel's error (`weight_errors`) by
`ROW_SCALE_GAIN`. Q8_0 is proposed only when it is smaller than f16; f16 only when it holds
the values (no overflow, relative error <= `F16_MAX_REL_ERROR`), and for roles without rows
f16 only. Exactly ternary weights (-1/0/+1) are proposed as TQ2_0, which is lossless;
`lossless=True` proposes only those. The accuracy guard steps a lossy weight down
`next_rung`s: 9- to 12-bit codes (`FINER_BLOCK_ENCODINGS`, decoded whole, with row
exponents where they pay as for Q8_0), then f16, then full precision. `searched=True` (a
calibrated bake: the guard measures what it gives) quantises the block encodings with
error-minimising scales (`rlx.codecs.scale_search`): the same blocks, 0.87-0.91x the error
for the same bytes; without it Q8_0 streams are the `gguf` package's bytes.

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
writer, which streams it to the file), so a bake never holds every encoded weight. A
MatMul weight is read a slab of whole blocks at a time, by the plan and by its stream's
encoding alike, and so is a weight stored as its own rows, one a channel (a Gather table,
a conv's output channels; any weight as f16), a block of rows at a time, its stream
written a block of rows at a time too: a bake holds no whole weight of those layouts.
An untransposed q8_f32 grid is found in two passes over its rows, then written a block of
rows at a time. The writer still reads whole the transposed layouts decoded whole (a
MatMul weight whose K is not whole blocks, a ConvTranspose's) and tensors run together into
one row with a block encoding (convs, a few MiB at most in the models measured).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from rlx.codecs import (
    Encoding,
    encode,
    encode_rows,
    encoded_nbytes,
    int8_grid,
    int8_grid_of_pieces,
    int8_grid_of_row_pieces,
    is_ternary,
    padded_length,
    quantize_q8_f32_on_grid,
    row_exponents,
    transposed,
)
from rlx.deferred import Deferred, Payload, all_rows, byte_view, compute, materialize, row_blocks
from rlx.errors import BakeError
from rlx.ir.dtype import DType
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.dequant import DequantMatMul
from rlx.ir.ops.linalg import MatMul
from rlx.ir.ops.packed import DecodeWeight, DequantGather, padded_row_bytes
from rlx.ir.ops.shaping import Gather
from rlx.ir.ops.sources import Constant
from rlx.ir.rewrite import Rewriter, constant_payload
from rlx.ir.shape import Shape
from rlx.passes.weight_errors import (
    SLAB_BYTES,
    WeightError,
    normalised_rows,
    stored_matrix,
    stored_rows,
    weight_error,
)
from rlx.passes.weight_roles import (
    DECODED_WHOLE,
    LINEAR,
    WeightRole,
    all_finite,
    fits_dequant_matmul,
    matmul_skip_reason,
    reaching_a_rounding,
    weight_role,
)

__all__ = ["WeightChoice", "EncodingPlan", "plan_weight_encodings", "plan_ternary_matmuls",
           "apply_weight_encodings", "encode_ternary_matmuls", "matmul_choice", "next_rung",
           "MIN_ELEMENTS", "MIN_BLOCK_ELEMENTS", "F16_MAX_REL_ERROR", "ROW_SCALE_GAIN",
           "LOSSY_BLOCK_ENCODINGS", "FINER_BLOCK_ENCODINGS"]

log = logging.getLogger(__name__)
progress = logging.getLogger("rlx.progress")  # what a terminal shows while it runs

MIN_ELEMENTS = 64
"""Constants smaller than this stay as they are: f16 saves them at most 128 bytes (nothing
below 32 values, blobs being 64-byte aligned), no more than their DecodeWeight node and
guard run cost. 64 rather than 256 made PP-OCR's classifier's size-profile file 4% smaller
(its biases go f16)."""

MIN_BLOCK_ELEMENTS = 256
"""Weights smaller than this are not block-encoded (f16 at most): they are the narrowest
and first layers, where an error weighs most, for a few bytes. PP-OCR's classifier's
[8, 8, 1, 1] conv as Q8_0 alone took its output's cosine to 0.9973, saving 188 bytes."""

ROW_SCALE_GAIN = 1.5
"""Row exponents are added where the worst row's error without them is more than this times
the error with them (`_error_and_scales`). Measured ratios: 1.00 where blocks do not span
rows, 0.6-2.2 where they span rows of like ranges, 2.6-8 on PP-OCR's depthwise convs, over
100 where channel ranges lie 10^3 apart (the small channels' codes round to zero)."""

F16_MAX_REL_ERROR = 1e-3
"""f16 is proposed when ||w - f16(w)|| / ||w|| is at most this (f16 keeps ~4.9e-4)."""

LOSSY_BLOCK_ENCODINGS: tuple[Encoding, ...] = (Encoding.GGUF_Q8_0,)
"""The lossy block encodings the plan proposes for weights with rows (a reduction axis),
in order of preference: the first one smaller than f16 is taken (then f16, then nothing).
A new block codec is proposed by adding it here."""

FINER_BLOCK_ENCODINGS: tuple[Encoding, ...] = (Encoding.Q9_0, Encoding.Q10_0, Encoding.Q11_0,
                                                Encoding.Q12_0)
"""The accuracy guard's rungs between a lossy block encoding and f16 (`next_rung`), never
proposed first: 2 and 4 bits more than Q8_0 (4x and 16x less error) for 0.25 and 0.5
more bytes a value, where f16 buys 27x for 0.94. Decoded whole (`DecodeWeight`): a MatMul
weight stepped to one leaves DequantMatMul, whose exports take GGUF streams."""

_ROW_SCALED = (*LOSSY_BLOCK_ENCODINGS, *FINER_BLOCK_ENCODINGS)
"""Block encodings whose blocks may span channels, and so take row exponents."""

_LOSSLESS = frozenset({Encoding.GGUF_TQ2_0, Encoding.Q8_F32})
"""Encodings the plan proposes only where they decode to the very values (exactly ternary
weights, int8 grids)."""


@dataclass(frozen=True)
class WeightChoice:
    """How one weight constant (`node_id` in the planned graph) is to be stored.

    `rows` x `row_length` is the stored matrix (after `perm`); `packed_bytes` what it
    stores (its encoded stream, and its row exponents); `rel_error` the tensor's own
    ||w - decoded|| / ||w||, `row_error` its worst output channel's (`weight_errors`).
    `scale_rows` > 0: the stored tensor's rows (as that many rows) were normalised by
    powers of two, whose exponents an int8 constant beside the stream holds
    (`DecodeWeight`). `searched`: its block scales are error-minimising (`rlx.codecs.encode`),
    the error weighted by `importance` (broadcastable to `shape`) if given; a weight's
    importance is its own, so it takes no part in comparing choices.
    """

    node_id: int
    name: str
    role: WeightRole
    encoding: Encoding
    shape: tuple[int, ...]
    rows: int
    perm: tuple[int, ...]
    f32_bytes: int
    packed_bytes: int
    rel_error: float
    row_error: float = 0.0
    scale_rows: int = 0
    searched: bool = False
    importance: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def lossless(self) -> bool:
        """Decodes to the very values: exactly ternary weights, and int8 grids."""
        return self.encoding in _LOSSLESS

    @property
    def row_length(self) -> int:
        return int(np.prod(self.shape)) // self.rows

    @property
    def saved_bytes(self) -> int:
        return self.f32_bytes - self.packed_bytes

    @property
    def stream_bytes(self) -> int:
        """The encoded stream's bytes (without the row exponents)."""
        return self.packed_bytes - self.scale_rows

    @property
    def label(self) -> str:
        """How reports name the storage: the encoding, with its row exponents."""
        return self.encoding.label + (" + row exponents" if self.scale_rows else "")


@dataclass(frozen=True)
class EncodingPlan:
    """A plan's choices, and why the candidates it left out stay as they are (reason ->
    count); `readers` counts the nodes its choices turn into DequantMatMul / DequantGather.
    As a pass's result it is an `rlx.passes.pipeline.Outcome` that counts those readers."""

    choices: tuple[WeightChoice, ...] = ()
    skipped: dict[str, int] = field(default_factory=dict)
    readers: int = 0

    @property
    def count(self) -> int:
        return self.readers


def plan_weight_encodings(graph: Graph, lossless: bool = False, ternary: bool = True,
                          min_elements: int = MIN_ELEMENTS, searched: bool = False,
                          importance: Mapping[int, np.ndarray] | None = None
                          ) -> EncodingPlan:
    """A choice per large float32 weight constant, and why the others stay (module doc).
    `ternary=False` never proposes TQ2_0 (ternary weights are then treated like any other);
    `searched`: block encodings with error-minimising scales, weighted by a weight's
    `importance` (by node id: `rlx.baking.importance`) where given."""
    importance = importance or {}
    users = graph.users()
    quantised = reaching_a_rounding(graph)
    choices: list[WeightChoice] = []
    skipped: Counter = Counter()
    for node in graph.nodes():
        if not isinstance(node.op, Constant) or node.tensor_shape.dtype is not DType.F32:
            continue
        payload = constant_payload(node)  # a large weight stays unread until it must be
        if payload is None or payload.size < min_elements or not users[node.id]:
            continue
        if node.id in graph.outputs:
            skipped["a graph output"] += 1
            continue
        if not all_rows(payload, all_finite):
            skipped["holds inf or NaN"] += 1
            continue
        role, rows, perm = weight_role(graph, node, payload.shape, users[node.id])
        if node.id in quantised and role is WeightRole.OTHER:
            skipped["reaches a rounding (a quantiser) through elementwise ops"] += 1
            continue
        if lossless and not _may_be_ternary(payload, role, ternary):
            continue  # nothing lossless to propose (what `_choose` finds, without reading all)
        choice, reason = _choose(node, payload, role, rows, perm, lossless, ternary,
                                 searched=searched, importance=importance.get(node.id))
        if choice is None:
            if reason:
                skipped[reason] += 1
            continue
        choices.append(choice)
        log.debug("weight encoding: %s (%s) -> %s, %d -> %d bytes, rel err %.2g", node.label,
                  role, choice.encoding, choice.f32_bytes, choice.packed_bytes, choice.rel_error)
    return EncodingPlan(tuple(choices), dict(skipped), _count_readers(graph, choices))


def plan_ternary_matmuls(graph: Graph) -> EncodingPlan:
    """TQ2_0 for every MatMul right operand that is an exactly ternary f32 `[K, N]` constant
    with K whole blocks, whatever else reads it (it then stays beside its packed copy);
    `skipped` counts, per top-level MatMul, why its weight stays dense (keyed
    `<encoding>: <reason>`)."""
    encoding = Encoding.GGUF_TQ2_0
    verdicts: dict[int, str | None] = {}  # per weight id: shared weights checked once
    skipped: Counter = Counter()
    for node in graph.nodes():
        if not isinstance(node.op, MatMul):
            continue
        weight = graph.node(node.inputs[1])
        if weight.id not in verdicts:
            reason = matmul_skip_reason(weight, encoding.block_size, ternary=True)
            verdicts[weight.id] = None if reason is None else f"{encoding}: {reason}"
        verdict = verdicts[weight.id]
        if verdict is not None:
            skipped[verdict] += 1
            log.debug("%s stays dense: %s (%s)", node.label, verdict, weight.label)
    choices = [matmul_choice(graph.node(w), encoding)
               for w, verdict in sorted(verdicts.items()) if verdict is None]
    return EncodingPlan(tuple(choices), dict(skipped), _count_readers(graph, choices))


def matmul_choice(weight: Node, encoding: Encoding) -> WeightChoice:
    """`weight`, the f32 `[K, N]` right operand of MatMuls, as the `encoding` stream of W^T
    that DequantMatMul reads (K whole blocks: `matmul_skip_reason` lets it through); its
    error is not measured (0: the early step proposes lossless TQ2_0 only)."""
    k, n = (int(d) for d in weight.tensor_shape.dims)
    return WeightChoice(weight.id, weight.name or weight.label, WeightRole.MATMUL, encoding,
                        (k, n), n, (1, 0), k * n * 4, n * padded_row_bytes(encoding, k), 0.0)


def _count_readers(graph: Graph, choices: list[WeightChoice]) -> int:
    by_id = {c.node_id: c for c in choices}
    return sum(_rewritten_weight(n, by_id) is not None for n in graph.nodes()) if by_id else 0


def encode_ternary_matmuls(graph: Graph) -> tuple[Graph, EncodingPlan]:
    """The bake's early lossless pass: `plan_ternary_matmuls`, applied. Its plan is its
    result (an `rlx.passes.pipeline.Outcome` counting the MatMuls rewritten)."""
    plan = plan_ternary_matmuls(graph)
    encoded, _ = apply_weight_encodings(graph, plan.choices)
    log.info("pack_ternary %r: %d matmul(s) packed as %s", graph.name, plan.readers,
             Encoding.GGUF_TQ2_0)
    return encoded, plan


def _may_be_ternary(values: Payload, role: WeightRole, ternary: bool) -> bool:
    """Whether TQ2_0 may be proposed (checked in blocks of rows): a lossless plan proposes
    nothing else."""
    return ternary and values.size >= MIN_BLOCK_ELEMENTS and role in LINEAR \
        and all_rows(values, is_ternary)


def next_rung(graph: Graph, choice: WeightChoice, users: list[list[int]]
              ) -> WeightChoice | None:
    """The accuracy guard's next step down from `choice` towards full precision: the first
    of the `FINER_BLOCK_ENCODINGS` after its encoding that is smaller than f16, else f16
    where f16 holds the weight (no overflow, relative error at most `F16_MAX_REL_ERROR`;
    20x less error than Q8_0 measured on conv weights, half the bytes of f32), else None.
    `users` is `graph.users()`."""
    if choice.encoding is Encoding.F16 or choice.lossless:
        return None
    ladder = FINER_BLOCK_ENCODINGS
    finer = ladder[ladder.index(choice.encoding) + 1:] if choice.encoding in ladder else ladder
    node = graph.node(choice.node_id)
    payload = constant_payload(node)
    assert payload is not None  # the plan chose it: a constant with its bytes
    role, rows, perm = weight_role(graph, node, payload.shape, users[node.id])
    found, _ = _choose(node, payload, role, rows, perm, lossless=False, ternary=False,
                       blocks=finer, searched=choice.searched, importance=choice.importance)
    return found


def _choose(node: Node, values: Payload, role: WeightRole, rows: int,
            perm: tuple[int, ...], lossless: bool, ternary: bool,
            blocks: tuple[Encoding, ...] = LOSSY_BLOCK_ENCODINGS, searched: bool = False,
            importance: np.ndarray | None = None) -> tuple[WeightChoice | None, str | None]:
    """The choice for one weight (module doc): the first of the block encodings `blocks`
    that is smaller than f16 (its scales searched when `searched`, weighted by
    `importance` if given), else f16. A deferred
    MatMul weight is read a slab at a time: its stream of W^T is checked and measured down
    its columns."""
    shape = tuple(int(d) for d in values.shape)
    channels, length = rows, values.size // rows
    gguf = all(e in LOSSY_BLOCK_ENCODINGS for e in blocks)  # what DequantMatMul exports
    if role is WeightRole.MATMUL and not (
            gguf and fits_dequant_matmul(shape, Encoding.GGUF_Q8_0.block_size)):
        role = WeightRole.MATMUL_DECODED  # padded rows: K not whole blocks, or not GGUF
    candidates: list[Encoding] = []
    linear = values.size >= MIN_BLOCK_ELEMENTS and role in LINEAR
    if ternary and linear and all_rows(values, is_ternary):
        candidates.append(Encoding.GGUF_TQ2_0)
    elif not lossless:
        if _on_int8_grid(values, rows, perm):  # exact: no MIN_BLOCK_ELEMENTS to guard error
            return _grid_choice(node, values, role, rows, perm)
        if linear:
            candidates.extend(blocks)
        candidates.append(Encoding.F16)
    if not candidates:
        return None, None
    f16_bytes = values.size * 2
    for encoding in candidates:
        f16, tq2 = encoding is Encoding.F16, encoding is Encoding.GGUF_TQ2_0
        search = searched and encoding in _ROW_SCALED
        if role is WeightRole.MATMUL and tq2 and shape[0] % encoding.block_size:
            role = WeightRole.MATMUL_DECODED
        if not f16 and role in DECODED_WHOLE and rows > 1 and \
                rows * padded_row_bytes(encoding, length) > padded_row_bytes(encoding, values.size):
            # decoded whole, once: one row of the whole tensor saves the per-row padding.
            # Q8_0 blocks then run on along the reduction axis into the next row (a block
            # spans at most ceil(32 / L) + 1 rows; row exponents keep their channels apart);
            # ternary blocks are exact whatever the blocking, so TQ2_0 also drops the transpose
            rows, length = 1, values.size
            perm = () if tq2 else perm
        nbytes = rows * padded_row_bytes(encoding, length)
        if not f16 and nbytes >= f16_bytes and not (tq2 and lossless):
            continue  # padding made it no smaller than f16
        if f16 and not all_rows(values, _fits_f16):
            return None, "f16 would overflow"
        try:
            error, scale_rows = (WeightError(0.0, 0.0), 0) if tq2 else \
                _error_and_scales(values, encoding, role, rows, perm, channels, search,
                                  importance if search else None)
        except BakeError as err:  # the codec refuses these values (a Q8_0 scale past f16)
            log.debug("%s: not %s: %s", node.label, encoding, err)
            continue
        nbytes += scale_rows
        if not f16 and nbytes >= f16_bytes:
            continue  # its row exponents made it no smaller than f16
        if f16 and error.whole > F16_MAX_REL_ERROR:
            return None, f"f16 relative error above {F16_MAX_REL_ERROR:g}"
        if f16 and role not in (WeightRole.OTHER, WeightRole.GATHER):
            role, rows, perm = WeightRole.OTHER, 1, ()  # plain floats: no rows to keep
        return WeightChoice(node.id, node.name or node.label, role, encoding, shape, rows, perm,
                            values.nbytes, nbytes, error.whole, error.worst_row,
                            scale_rows, search, importance if search else None), None
    return None, None


def _fits_f16(values: np.ndarray) -> bool:
    return bool(np.abs(values).max(initial=0) <= float(np.finfo(np.float16).max))


def _error_and_scales(values: Payload, encoding: Encoding, role: WeightRole, rows: int,
                      perm: tuple[int, ...], channels: int, searched: bool,
                      importance: np.ndarray | None) -> tuple[WeightError, int]:
    """The error of `values` in `encoding` (scales searched when `searched`, weighted by
    `importance` if given), and the rows
    it takes row exponents for (0: none). A lossy block encoding decoded whole takes them
    where its worst row loses more than `ROW_SCALE_GAIN` times what it loses with them: a
    byte a channel."""
    plain = weight_error(values, encoding, rows, perm, channels, searched=searched,
                         importance=importance)
    if encoding not in _ROW_SCALED or role not in DECODED_WHOLE:
        return plain, 0
    scaled = weight_error(values, encoding, rows, perm, channels, scaled=True,
                          searched=searched, importance=importance)
    if plain.worst_row > ROW_SCALE_GAIN * scaled.worst_row:
        return scaled, channels
    return plain, 0


def _grid_choice(node: Node, values: Payload, role: WeightRole, rows: int,
                 perm: tuple[int, ...]) -> tuple[WeightChoice | None, str | None]:
    """q8_f32 rows of a weight on an int8 grid (a step per row, so rows stay rows), decoded
    whole: DequantMatMul reads GGUF streams only."""
    nbytes = rows * padded_row_bytes(Encoding.Q8_F32, values.size // rows)
    if nbytes >= values.nbytes:
        return None, "on an int8 grid, and q8_f32 rows would be no smaller"
    if role is WeightRole.MATMUL:
        role = WeightRole.MATMUL_DECODED
    return WeightChoice(node.id, node.name or node.label, role, Encoding.Q8_F32,
                        tuple(int(d) for d in values.shape), rows, perm, values.nbytes, nbytes,
                        0.0), None


def _on_int8_grid(values: Payload, rows: int, perm: tuple[int, ...]) -> bool:
    """Whether the weight stored as `rows` rows in `perm` order lies on an int8 grid
    (`int8_grid`); W^T of a `[K, N]` weight is checked a slab of its columns at a time, an
    untransposed weight a block of its rows (or, as one row, of its leading axis) at a time."""
    if perm == (1, 0) and values.ndim == 2 and rows == values.shape[1]:
        def pieces() -> Iterator[np.ndarray]:
            for block in row_blocks(values, max_bytes=SLAB_BYTES):
                yield transposed(np.asarray(block, np.float32))
    elif not perm and rows == 1 and values.ndim:
        def pieces() -> Iterator[np.ndarray]:
            for block in row_blocks(values, max_bytes=SLAB_BYTES):
                yield np.asarray(block, np.float32).reshape(1, -1)
    elif not perm:
        def row_pieces() -> Iterator[np.ndarray]:
            for block in row_blocks(stored_rows(values, rows), max_bytes=SLAB_BYTES):
                yield np.asarray(block, np.float32)
        return int8_grid_of_row_pieces(row_pieces) is not None
    else:
        stored = np.asarray(stored_matrix(materialize(values), rows, perm, copy=False),
                            np.float32)

        def pieces() -> Iterator[np.ndarray]:
            yield stored
    return int8_grid_of_pieces(pieces) is not None


def apply_weight_encodings(graph: Graph, choices: tuple[WeightChoice, ...] | list[WeightChoice],
                           *, quiet: bool = False, streams: dict[WeightChoice, np.ndarray] | None
                           = None) -> tuple[Graph, int]:
    """The graph with each chosen constant stored encoded; (graph, constants encoded).
    `quiet`: no progress records (the accuracy guard encodes a weight at a time, often).
    `streams`: encoded streams by choice, read from and added to (the guard encodes the
    same choices in every run, and searched scales cost 15x a plain Q8_0 encoding)."""
    by_id = {c.node_id: c for c in choices}
    if not by_id:
        return graph, 0
    kept = _still_read(graph, by_id)
    rw = Rewriter(graph)
    packed: dict[int, int] = {}  # weight id -> new id of its packed constant
    for node in graph.nodes():
        choice = by_id.get(node.id)
        if choice is not None:
            if not quiet:
                progress.debug("encoding %s as %s", choice.name, choice.encoding,
                               extra={"progress": (len(packed), len(by_id))})
            packed[node.id] = _emit(rw, node, choice, node.id in kept, streams)
            continue
        weight = _rewritten_weight(node, by_id)
        if weight is None:
            rw.copy(node)
            continue
        choice = by_id[weight]
        if choice.role is WeightRole.MATMUL:
            rw.substitute(node, DequantMatMul(choice.encoding, choice.shape[1]),
                          (rw.id(node.inputs[0]), packed[weight]), node.shape)
        else:
            rw.substitute(node, DequantGather(choice.encoding, *choice.shape),
                          (packed[weight], rw.id(node.inputs[1])), node.shape)
    log.info("weight encoding %r: %d constant(s) encoded", graph.name, len(packed))
    return rw.finish(), len(packed)


def _rewritten_weight(node: Node, by_id: dict[int, WeightChoice]) -> int | None:
    """The chosen weight `node` reads as its row reader (a MatMul's right operand for
    DequantMatMul, a Gather's table for DequantGather), or None."""
    if isinstance(node.op, MatMul):
        weight, role = node.inputs[1], WeightRole.MATMUL
    elif isinstance(node.op, Gather):
        weight, role = node.inputs[0], WeightRole.GATHER
    else:
        return None
    choice = by_id.get(weight)
    return weight if choice is not None and choice.role is role else None


def _still_read(graph: Graph, by_id: dict[int, WeightChoice]) -> set[int]:
    """Chosen weights whose row readers are not all that reads them (another reader, a graph
    output): their float32 constant stays beside the packed one."""
    reads: Counter = Counter(o for o in graph.outputs if o in by_id)
    for node in graph.nodes():
        reads.update(i for i in node.inputs if i in by_id)
        weight = _rewritten_weight(node, by_id)
        if weight is not None:
            reads[weight] -= 1
    return {w for w, c in by_id.items() if c.role.reads_rows and reads[w] > 0}


def _emit(rw: Rewriter, node: Node, choice: WeightChoice, keep: bool,
          streams: dict[WeightChoice, np.ndarray] | None) -> int:
    """The packed constant of `node` (and, for whole-decoded roles, its DecodeWeight in
    `node`'s place); with `keep`, `node` stays too and the packed constant is named
    `<name>.<encoding>`. Its stream is taken from `streams` (encoded and added there when
    missing) when given."""
    assert isinstance(node.op, Constant)  # choices are of constants
    if streams is None:
        stream: Payload = _stream(node.op.data, choice)
    else:
        if choice not in streams:
            streams[choice] = materialize(_stream(node.op.data, choice))
        stream = streams[choice]
    if choice.role.reads_rows:
        if keep:
            rw.copy(node)
            name = rw.fresh_name(f"{node.name}.{choice.encoding}") if node.name else None
        else:
            rw.drop(node.id)
            name = node.name
        return rw.emit_constant(stream, name)
    packed = rw.emit_constant(stream, node.name)
    inputs = [packed]
    if choice.scale_rows:
        exponents = compute(_row_exponents, (node.op.data,), (choice.shape, choice.perm,
                                                              choice.scale_rows),
                            (choice.scale_rows,), np.int8)
        name = rw.fresh_name(f"{node.name}.row_exponents") if node.name else None
        inputs.append(rw.emit_constant(exponents, name))
    op = DecodeWeight(choice.encoding, choice.shape, choice.rows, choice.perm)
    decoded = rw.emit(op, tuple(inputs), Shape(choice.shape, DType.F32))
    rw.replace(node.id, decoded)
    return packed


def _stream(data: Payload, choice: WeightChoice) -> Payload:
    """The stored stream of a chosen weight's payload `data`, deferred when large. One
    stored as its own rows (a Gather table, a conv's output channels, any f16) is encoded a
    block of rows at a time when read, into a flat stream (`rlx.deferred.Computed`'s
    `rowwise`): the bytes of the whole weight encoded at once, since rows are padded to
    whole blocks and row exponents are a row's own."""
    rows = _stream_rows(choice)
    weights = () if choice.importance is None else (choice.importance,)
    if rows:
        stored = stored_rows(_float32(data, choice.shape), rows)
        by_rows = compute(_encoded_rows,
                          (stored, *(_importance_rows(w, choice.shape, rows) for w in weights)),
                          (choice.encoding, bool(choice.scale_rows), choice.searched),
                          (rows, choice.stream_bytes // rows), np.uint8, rowwise=True)
        return by_rows.reshape((choice.stream_bytes,))
    matmul = choice.role is WeightRole.MATMUL
    return compute(_encoded, (data, *weights),
                   (choice.encoding, matmul, choice.shape, choice.rows, choice.perm,
                    choice.scale_rows, choice.searched),
                   (choice.stream_bytes,), np.uint8, streamed=True)


def _importance_rows(importance: np.ndarray, shape: tuple[int, ...], rows: int
                     ) -> np.ndarray:
    """A weight's importance (broadcastable to `shape`) as its `rows` untransposed stored
    rows: a view repeating one row where every row weighs alike (a conv of one group), so
    a deferred stream holds no weight-sized copy."""
    if importance.shape[0] == 1 and rows == shape[0]:
        row = np.broadcast_to(importance, (1, *shape[1:])).reshape(1, -1)
        return np.broadcast_to(row, (rows, row.shape[1]))
    return np.broadcast_to(importance, shape).reshape(rows, -1)


def _stream_rows(choice: WeightChoice) -> int:
    """The rows a choice's stream is encoded in, each on its own (0: not row by row): f16's
    values are encoded one by one, so any rows; a block encoding's stored rows where they
    are untransposed and each its own channel. q8_f32's steps come from its whole grid
    (`_grid_stream` finds them first)."""
    if choice.encoding is Encoding.F16:
        return choice.shape[0] if choice.shape else 0
    if choice.perm or choice.encoding is Encoding.Q8_F32 \
            or choice.scale_rows not in (0, choice.rows):
        return 0
    return choice.rows


def _encoded_rows(encoding: Encoding, scaled: bool, searched: bool, stored: np.ndarray,
                  importance: np.ndarray | None = None) -> np.ndarray:
    """Rows of a weight stored untransposed, encoded (normalised by their row exponents
    first when `scaled`; scales searched when `searched`, weighted by `importance`, the
    same rows, if given)."""
    stored = np.asarray(stored, np.float32)
    return encode_rows(encoding, normalised_rows(stored, len(stored)) if scaled else stored,
                       searched, importance)


def _encoded(encoding: Encoding, matmul: bool, shape: tuple[int, ...], rows: int,
             perm: tuple[int, ...], scale_rows: int, searched: bool, data: Payload,
             importance: np.ndarray | None = None) -> np.ndarray:
    """The stored stream of an f32 weight's bytes: the GGUF stream of W^T for a MatMul
    weight (K whole blocks), else `rows` encoded rows of the weight in `perm` order (its
    `scale_rows` rows normalised by their row exponents first, when > 0; scales searched
    when `searched`, weighted by `importance`, broadcastable to `shape`, if given). Given `data`
    unread (`rlx.deferred.Computed`'s `streamed`), it reads what it needs."""
    if importance is not None:
        importance = np.broadcast_to(importance, shape)
    if matmul:
        return _column_stream(encoding, _float32(data, shape), searched, importance)
    if encoding is Encoding.Q8_F32 and not perm:
        return _grid_stream(stored_rows(_float32(data, shape), rows))
    values = np.asarray(_float32(data, shape))
    stored = stored_matrix(values, rows, perm)
    if encoding is Encoding.Q8_F32:
        steps = int8_grid(stored)
        assert steps is not None  # planned as on a grid
        return _grid_rows(stored, steps)
    if scale_rows:
        stored = normalised_rows(stored, scale_rows)
    weights = None if importance is None else stored_matrix(importance, rows, perm)
    return encode_rows(encoding, stored, searched, weights)


def _float32(data: Payload, shape: tuple[int, ...]) -> Payload:
    """An f32 weight's payload as float32 of `shape`, a deferred one unread (a constant's
    array may hold the weight's bytes under another dtype or shape)."""
    if isinstance(data, Deferred) and data.dtype == np.float32:
        return data if data.shape == shape else data.reshape(shape)
    return byte_view(materialize(data)).view(np.float32).reshape(shape)


def _column_stream(encoding: Encoding, values: Payload, searched: bool,
                   importance: np.ndarray | None = None) -> np.ndarray:
    """The `encoding` stream of W^T for a float32 `[K, N]` weight (K whole blocks), encoded a
    slab of whole blocks of K at a time into its place in the stream: blocks are encoded
    each on its own, so the bytes are those of the whole transpose's, without holding the
    weight and its transpose."""
    k, n = values.shape
    block, block_bytes = encoding.block_size, encoded_nbytes(encoding, encoding.block_size)
    stream = np.empty((n, k // block, block_bytes), np.uint8)
    done = 0
    for slab in row_blocks(values, block, SLAB_BYTES):
        count = len(slab) // block
        weights = None if importance is None else transposed(
            np.asarray(importance[done * block:done * block + len(slab)], np.float32))
        encoded = encode(encoding, transposed(np.asarray(slab, np.float32)), searched, weights)
        stream[:, done:done + count] = encoded.reshape(n, count, block_bytes)
        done += count
    return stream.reshape(-1)


def _row_exponents(shape: tuple[int, ...], perm: tuple[int, ...], scale_rows: int,
                   data: np.ndarray) -> np.ndarray:
    """The row exponents of an f32 weight's bytes, its `scale_rows` rows in `perm` order."""
    values = byte_view(data).view(np.float32).reshape(shape)
    return row_exponents(stored_matrix(values, scale_rows, perm, copy=False))


def _grid_stream(matrix: Payload) -> np.ndarray:
    """q8_f32 rows of an untransposed `[rows, L]` weight on an int8 grid: its steps found
    (`int8_grid_of_row_pieces`), then its rows encoded, a block of rows at a time each."""
    def pieces() -> Iterator[np.ndarray]:
        for block in row_blocks(matrix, max_bytes=SLAB_BYTES):
            yield np.asarray(block, np.float32)

    steps = int8_grid_of_row_pieces(pieces)
    assert steps is not None  # planned as on a grid
    row_bytes = padded_row_bytes(Encoding.Q8_F32, matrix.shape[1])
    stream = np.empty((matrix.shape[0], row_bytes), np.uint8)
    done = 0
    for piece in pieces():
        stream[done:done + len(piece)] = _grid_rows(piece, steps[done:done + len(piece)]
                                                    ).reshape(len(piece), row_bytes)
        done += len(piece)
    return stream.reshape(-1)


def _grid_rows(matrix: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """q8_f32 rows (padded to whole blocks) of a matrix on an int8 grid, its rows' `steps`
    as scales."""
    length = padded_length(Encoding.Q8_F32, matrix.shape[1])
    padded = np.pad(matrix, ((0, 0), (0, length - matrix.shape[1])))
    return quantize_q8_f32_on_grid(padded, np.repeat(steps, length // Encoding.Q8_F32.block_size))
