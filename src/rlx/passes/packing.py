"""What the two packing passes share: which MatMul weights qualify, and the rewrite itself.

A MatMul `[x, w]` qualifies when `w` is a float32 Constant with bytes, of rank 2 `[K, N]`,
whose rows of K values are whole blocks, so no block straddles two rows (and, for the
ternary scheme, are all -1/0/+1; for others, all finite). It becomes
`DequantMatMul(scheme, n=N)` over a U8 Constant holding
the GGUF block stream of `w.T` (the "BT" `[N, K]` layout); the MatMul's name moves to the
DequantMatMul. Rank-1 and batched (rank > 2) weights are never packed: the seed packed
batched weights untransposed, an inconsistent layout (inventory 9.6).

Names stay unique: when the f32 weight has no other reader it is replaced in place by the
packed constant, which takes its name; when something else still reads it, it keeps its
name and the packed constant is named `<weight>.<scheme label>`.
"""

from __future__ import annotations

import enum
import functools
import logging
from collections import Counter
from collections.abc import Callable

import numpy as np

from rlx.codecs import encode, is_ternary, transposed
from rlx.deferred import Payload, byte_view, compute
from rlx.errors import BakeError
from rlx.ir.dtype import DType
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.linalg import DequantMatMul, MatMul, QuantScheme
from rlx.ir.ops.sources import Constant
from rlx.ir.rewrite import Rewriter, constant_value

__all__ = ["SkipReason", "fits_dequant_matmul", "packing_candidates", "pack_matmuls"]

log = logging.getLogger(__name__)
progress = logging.getLogger("rlx.progress")  # shown on a terminal (cli_ui)

Quantizer = Callable[[np.ndarray], np.ndarray]


class SkipReason(str, enum.Enum):
    """Why a MatMul's weight stays dense (values are what logs and reports print)."""

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


def packing_candidates(graph: Graph, block_size: int,
                       require_ternary: bool) -> list[tuple[int, SkipReason | None]]:
    """For every MatMul, in graph order: (its id, why its weight stays dense or None)."""
    verdicts: dict[int, SkipReason | None] = {}  # per weight id: shared weights checked once
    out = []
    for node in graph.nodes():
        if isinstance(node.op, MatMul):
            w = node.inputs[1]
            if w not in verdicts:
                verdicts[w] = _skip_reason(graph.node(w), block_size, require_ternary)
            out.append((node.id, verdicts[w]))
    return out


def _skip_reason(weight: Node, block_size: int, require_ternary: bool) -> SkipReason | None:
    if not isinstance(weight.op, Constant):
        return SkipReason.NOT_CONSTANT
    if weight.tensor_shape.dtype is not DType.F32:
        return SkipReason.NOT_F32
    values = constant_value(weight)
    if values is None:
        return SkipReason.STRIPPED
    if values.ndim != 2:
        return SkipReason.RANK
    if not fits_dequant_matmul(values.shape, block_size):
        return SkipReason.BLOCK
    if require_ternary:
        return None if is_ternary(values) else SkipReason.NOT_TERNARY
    return None if np.isfinite(values).all() else SkipReason.NOT_FINITE


def pack_matmuls(graph: Graph, scheme: QuantScheme, quantize: Quantizer | None = None,
                 require_ternary: bool = False, pass_name: str = "",
                 not_packed: Counter | None = None) -> tuple[Graph, int]:
    """Rewrite every qualifying MatMul to a DequantMatMul; returns (graph, matmuls packed).

    `quantize` defaults to the scheme's codec (`rlx.codecs.encode`), so a new block
    encoding packs without a pass of its own. `not_packed`, when given, counts the MatMuls
    left dense by reason (what `packing_candidates` says, without reading every weight a
    second time).
    """
    quantize = quantize or functools.partial(encode, scheme)
    pass_name = pass_name or f"pack {scheme}"
    chosen: dict[int, int] = {}  # matmul id -> weight id
    for mm, reason in packing_candidates(graph, scheme.block_size, require_ternary):
        node = graph.node(mm)
        if reason is None:
            chosen[mm] = node.inputs[1]
        else:
            if not_packed is not None:
                not_packed[reason] += 1
            log.debug("%s: %s stays dense: %s (%s)", pass_name, node.label, reason,
                      graph.node(node.inputs[1]).label)
    streams = _encode(graph, set(chosen.values()), scheme, quantize, pass_name)
    chosen = {mm: w for mm, w in chosen.items() if w in streams}
    if not chosen:
        log.info("%s %r: no matmul packed", pass_name, graph.name)
        return graph, 0
    packed_reads = Counter(chosen.values())
    reads = _read_counts(graph, packed_reads)
    rw = Rewriter(graph)
    packed: dict[int, int] = {}  # weight id -> new id of its packed constant
    for node in graph.nodes():
        if node.id in streams:
            shared = reads[node.id] > packed_reads[node.id]
            packed[node.id] = _emit_packed(rw, node, streams[node.id], scheme, shared)
        elif node.id in chosen:
            n = int(graph.node(chosen[node.id]).tensor_shape.dims[1])  # a constant's: static
            weight = packed[chosen[node.id]]
            rw.substitute(node, DequantMatMul(scheme, n), (rw.id(node.inputs[0]), weight),
                          node.shape)
            log.debug("%s: %s now DequantMatMul(%s) over %s", pass_name, node.label, scheme,
                      rw.target.node(weight).label)
        else:
            rw.copy(node)
    log.info("%s %r: %d matmul(s) packed as %s (%d weight(s))", pass_name, graph.name,
             len(chosen), scheme, len(packed))
    return rw.finish(), len(chosen)


def _encode(graph: Graph, weights: set[int], scheme: QuantScheme, quantize: Quantizer,
            pass_name: str) -> dict[int, Payload]:
    """The block stream of each weight's transpose (deferred when large: `rlx.deferred`);
    weights the codec refuses are left out."""
    streams = {}
    for i, w in enumerate(sorted(weights)):
        node = graph.node(w)
        assert isinstance(node.op, Constant)  # a candidate weight has bytes (_skip_reason)
        progress.debug("%s: packing %s (%d of %d tensors)", pass_name,
                       node.name or f"%{node.id}", i + 1, len(weights))
        k, n = (int(d) for d in node.tensor_shape.dims)
        nbytes = k * n // scheme.block_size * scheme.block_bytes
        try:
            streams[w] = compute(_bt_stream, (node.op.data,), (quantize, (k, n)), (nbytes,),
                                 np.uint8)
        except BakeError as err:
            log.warning("%s: weight %s stays dense: %s", pass_name, node.label, err)
    return streams


def _bt_stream(quantize: Quantizer, shape: tuple[int, int], data: np.ndarray) -> np.ndarray:
    """The block stream of W^T for the f32 `[K, N]` weight whose bytes are `data`."""
    return quantize(transposed(byte_view(data).view(np.float32).reshape(shape)))


def _read_counts(graph: Graph, weights: Counter) -> Counter:
    """How many times each weight is read by any node or listed as a graph output."""
    reads: Counter = Counter(o for o in graph.outputs if o in weights)
    for node in graph.nodes():
        reads.update(i for i in node.inputs if i in weights)
    return reads


def _emit_packed(rw: Rewriter, weight: Node, stream: Payload, scheme: QuantScheme,
                 shared: bool) -> int:
    """The packed constant, in place of the f32 weight unless something else still reads it."""
    if shared:
        rw.copy(weight)
        name = rw.fresh_name(f"{weight.name}.{scheme}") if weight.name else None
    else:
        rw.drop(weight.id)
        name = weight.name
    packed = rw.emit_constant(stream, name)
    k, n = weight.tensor_shape.dims
    log.debug("packed %s [%d, %d] f32 -> %d bytes %s (BT [N, K] for DequantMatMul)%s",
              weight.label, k, n, stream.size, scheme, " (f32 kept: still read)" if shared else "")
    return packed
