"""`bake` and `bake_bundle`: the reference's pipeline, in its order, without its bugs.

specialize -> [fold: resolve shapes -> fold constants -> fold BatchNorm -> DCE] -> skip-zero
-> ternary (TQ2_0) -> simplify -> DCE -> fold -> DCE -> hoist -> weight encodings (Q8_0,
f16, row-aligned TQ2_0; through the accuracy guard) -> dedupe -> weight table (unfold +
binding rows) -> memory layout. The encodings come last, on the finished graph, so the
guard compares exactly that graph with its encoded versions.

The bracketed early fold is ours: the reference folds only after packing, so a weight that
reaches its MatMul through weight-only math (`Transpose(W)` from a PyTorch Linear, a
BatchNorm to fold in) was never packed. Folding first hands the packers plain constants.

Node names and ids travel with the nodes through every pass, so the table links each row to
its Constant by id; nothing is renamed after the fact by matching payload bytes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from rlx import passes
from rlx.artifact.memory import MemoryStats
from rlx.artifact.model import RlxFile, RlxWeight
from rlx.baking.guard import AccuracyReport, TensorAccuracy, guard_encodings
from rlx.baking.options import BakeOptions
from rlx.ir.dtype import DType
from rlx.ir.graph import Graph, Node, unique_name
from rlx.ir.naming import op_type_counts
from rlx.ir.ops.linalg import QuantScheme
from rlx.ir.ops.sources import Constant
from rlx.ir.verify import verify
from rlx.weights.bundle import WeightBundle

log = logging.getLogger(__name__)
progress = logging.getLogger("rlx.progress")  # what a terminal shows while it runs (cli_ui)


@dataclass
class OptimizeStats:
    skipped_zero_matmuls: int = 0
    ternary_packed: int = 0
    quant_packed: int = 0
    weights_unfolded: int = 0  # table rows found by unfold (not the final table size)
    simplified: int = 0
    fused: int = 0  # op chains replaced by the one op they compute (HardSwish, GELU, bias)
    dead_removed: int = 0
    constants_folded: int = 0
    shapes_resolved: int = 0  # shape computations made constant, dynamic ops made static
    batchnorms_folded: int = 0
    captures_sunk: int = 0  # constants moved into the subgraphs that read them
    weights_hoisted: int = 0  # subgraph weights moved out to the top graph (the table)
    not_packed: dict[str, int] = field(default_factory=dict)  # reason -> weights left dense
    encoded: dict[str, int] = field(default_factory=dict)  # encoding -> weights stored so
    not_encoded: dict[str, int] = field(default_factory=dict)  # reason -> large f32 left


@dataclass
class BakeReport:
    nodes_before: int = 0  # every IR node of the top graph (inputs and constants too)
    nodes_after: int = 0
    # computing nodes (rlx.ir.naming.COMPUTING_NODES) by ONNX op type, before and after
    op_types_before: dict[str, int] = field(default_factory=dict)
    op_types_after: dict[str, int] = field(default_factory=dict)
    params_baked: int = 0  # params turned into constants (whether or not later folded)
    params_remaining: list[str] = field(default_factory=list)
    unused_bindings: list[str] = field(default_factory=list)  # bindings matching no param
    constant_bytes: int = 0  # Constant payload bytes left in the graph
    weight_count: int = 0
    weight_bytes: int = 0
    bytes_by_encoding: dict[str, int] = field(default_factory=dict)
    optimize: OptimizeStats = field(default_factory=OptimizeStats)
    memory: MemoryStats = field(default_factory=MemoryStats)
    # every weight the encoding stage stored encoded or kept, with its measured accuracy
    accuracy: AccuracyReport = field(default_factory=AccuracyReport)


def bake(graph: Graph, bindings: Mapping[str, np.ndarray],
         opts: BakeOptions | None = None) -> tuple[RlxFile, BakeReport]:
    """Bake `graph` with weights given as arrays by param name."""
    return bake_bundle(graph, WeightBundle(tensors=dict(bindings)), opts)


def bake_bundle(graph: Graph, bundle: WeightBundle,
                opts: BakeOptions | None = None) -> tuple[RlxFile, BakeReport]:
    """Bake `graph` with a loaded `WeightBundle` (dense tensors and packed rows)."""
    opts = opts or BakeOptions()
    verify(graph)
    report = BakeReport(nodes_before=len(graph), op_types_before=_op_types(graph))
    stats = report.optimize
    param_names = {n.op.name for n in graph.params()}
    report.unused_bindings = sorted(
        (set(bundle.tensors) | {w.name for w in bundle.packed}) - param_names
        - passes.mlx_companions(bundle.packed))
    if report.unused_bindings:
        log.warning("bindings matching no param: %s", ", ".join(report.unused_bindings))

    progress.debug("pass 1: binding weights")
    tensors = passes.orient_bt_tensors(graph, bundle.tensors, bundle.bt)
    g, report.params_baked = passes.specialize(graph, tensors)
    g, packed_bound = passes.bind_packed(g, bundle.packed)
    report.params_baked += packed_bound
    if opts.constant_folding:
        progress.debug("pass 2: resolving shapes, folding constants and BatchNorms")
        g, stats.captures_sunk = passes.sink_constant_captures(g)
        g = _fold_weight_math(g, stats, opts.dce)
    if opts.skip_zero:
        progress.debug("pass 3: skipping all-zero matmuls")
        g, stats.skipped_zero_matmuls = passes.skip_zero_matmul(g)
    if opts.ternary:
        scheme = QuantScheme.GGUF_TQ2_0
        for _, reason in passes.packing_candidates(g, scheme.block_size, True):
            if reason is not None:
                key = f"{scheme.label}: {reason.value}"
                stats.not_packed[key] = stats.not_packed.get(key, 0) + 1
        progress.debug(f"pass 4: packing ternary matmul weights as {scheme.label}")
        g, stats.ternary_packed = passes.pack_ternary(g)
    if opts.algebraic_simplify:
        progress.debug("pass 5: simplifying and fusing op chains")
        g, stats.simplified = _simplify(g)
        g, stats.fused = _fuse(g)
    progress.debug("pass 6: removing dead nodes, folding, deduplicating constants")
    if opts.dce:
        g, removed = _dce(g)
        stats.dead_removed += removed
    if opts.constant_folding:
        g, folded = _fold(g)
        stats.constants_folded += folded
        if opts.dce and folded:
            g, removed = _dce(g)
            stats.dead_removed += removed
    if opts.unfold:
        g, stats.weights_hoisted = passes.hoist_subgraph_weights(g)
    if opts.ternary or opts.quant:
        g = _encode_weights(g, opts, stats, report)
    deduped = 0
    if opts.dedupe_constants:
        g, deduped = _dedupe(g)
    verify(g)

    progress.debug("pass 7: building the weight table and the memory layout")
    rows = _weight_table(g, bundle, opts, stats, report)
    file = RlxFile.from_baked(
        g, rows, params_baked=report.params_baked,
        skipped_zero_matmuls=stats.skipped_zero_matmuls,
        ternary_packed=stats.ternary_packed, quant_packed=stats.quant_packed,
        profile=opts.profile.value,
    )
    dropped = report.memory.folded_bindings_dropped
    report.memory = file.apply_memory_mode(opts.memory)
    report.memory.constants_deduped = deduped
    report.memory.folded_bindings_dropped = dropped
    report.nodes_after = file.meta.nodes
    report.op_types_after = _op_types(file.graph)
    report.params_remaining = file.meta.params_remaining
    report.constant_bytes = file.meta.constant_bytes
    report.weight_count = file.meta.weight_count
    report.weight_bytes = file.meta.weight_bytes
    for w in file.weights:
        report.bytes_by_encoding[w.encoding] = report.bytes_by_encoding.get(w.encoding, 0) \
            + w.nbytes
    log.info("baked %r: %d -> %d nodes, %d weights, %d bytes", graph.name,
             report.nodes_before, report.nodes_after, report.weight_count, report.weight_bytes)
    return file, report


UNCHECKED = ("size profile: accuracy unchecked (no calibration data); measure it with "
             "--calibrate FEEDS.npz [--min-cosine 0.9995] (BakeOptions(calibration=[feeds])), "
             "or check the baked file with rlx-bake verify --min-cosine 0.999")


def _encode_weights(g: Graph, opts: BakeOptions, stats: OptimizeStats,
                    report: BakeReport) -> Graph:
    """Store the large float weights encoded (lossless TQ2_0 only, unless `opts.quant`),
    through the accuracy guard when there is calibration data."""
    choices, skipped = passes.plan_weight_encodings(g, lossless=not opts.quant,
                                                    ternary=opts.ternary)
    stats.not_encoded = dict(skipped)
    lossy = [c for c in choices if c.encoding != passes.TQ2_0]
    if lossy and opts.calibration:
        kept, report.accuracy = guard_encodings(g, choices, opts.calibration,
                                                opts.min_cosine, opts.max_abs_error)
        if not report.accuracy.met:
            log.warning("accuracy guard: targets missed even with every weight at full "
                        "precision")
        choices = kept
    else:
        if lossy:
            log.warning(UNCHECKED)
        report.accuracy.tensors = [
            TensorAccuracy(c.name, str(c.role), c.encoding, c.f32_bytes, c.packed_bytes,
                           c.rel_error) for c in choices]
    g, _ = passes.apply_weight_encodings(g, choices)
    for c in choices:
        stats.encoded[c.encoding] = stats.encoded.get(c.encoding, 0) + 1
        if c.role in (passes.WeightRole.MATMUL, passes.WeightRole.MATMUL_DECODED):
            if c.encoding == passes.Q8_0:
                stats.quant_packed += 1
            elif c.encoding == passes.TQ2_0:
                stats.ternary_packed += 1
    return g


def _op_types(graph: Graph) -> dict[str, int]:
    return dict(sorted(op_type_counts(graph).items()))


def _fold_weight_math(g: Graph, stats: OptimizeStats, dce: bool) -> Graph:
    """Resolve shape arithmetic, fold weight-only math and BatchNorms, before packing."""
    g, stats.shapes_resolved = passes.resolve_shapes(g)  # recurses into subgraphs itself
    g, stats.constants_folded = _fold(g)
    g, stats.batchnorms_folded = _fold_batchnorm(g)
    if dce:
        g, stats.dead_removed = _dce(g)
    return g


# the weight-independent clean-ups run inside subgraphs too (packing stays top-level)
_fold = passes.in_subgraphs(passes.fold_constants)
_fold_batchnorm = passes.in_subgraphs(passes.fold_batchnorm)
_simplify = passes.in_subgraphs(passes.algebraic_simplify)
_fuse = passes.in_subgraphs(passes.fuse_patterns)
_dce = passes.in_subgraphs(passes.eliminate_dead_code)
_dedupe = passes.in_subgraphs(passes.dedupe_identical_constants)


def _weight_table(g: Graph, bundle: WeightBundle, opts: BakeOptions, stats: OptimizeStats,
                  report: BakeReport) -> list[RlxWeight]:
    """Rows for matmul/conv weights (unfold) then for every other binding (binding rows)."""
    rows: dict[str, RlxWeight] = {}
    used_names = {n.name for n in g.nodes() if n.name}
    if opts.unfold:
        unfolded = passes.unfold_weights(g)
        stats.weights_unfolded = len(unfolded)
        for row in unfolded:
            node = g.node(row.node_id)
            name = node.name or unique_name(f"w{node.id}", used_names)
            rows[name] = RlxWeight(
                name, tuple(row.shape), row.dtype.value, row.encoding, node.op.data,
                note=row.note, layout=row.layout, node_id=node.id, row_aligned=row.row_aligned,
            )
    linked = {r.node_id for r in rows.values()}
    for name in sorted(bundle.tensors):
        if name in rows or name in report.unused_bindings:
            continue
        node = g.find(name)
        if node is not None and isinstance(node.op, Constant) and node.id not in linked:
            rows[name] = _dense_row(name, node, "baked from live constant")
        elif node is None and opts.keep_folded_bindings:
            value = np.ascontiguousarray(bundle.tensors[name])
            rows[name] = RlxWeight(name, value.shape, _dtype_name(value), _dtype_name(value),
                                   value, note="source binding (folded away in the graph)")
        elif node is None:
            report.memory.folded_bindings_dropped += 1
    return [rows[k] for k in sorted(rows)]


def _dense_row(name: str, node: Node, note: str) -> RlxWeight:
    return RlxWeight(name, tuple(node.shape.dims), node.shape.dtype.value,
                     node.shape.dtype.value, node.op.data, note=note, node_id=node.id)


def _dtype_name(value: np.ndarray) -> str:
    return DType.from_numpy(value.dtype).value
