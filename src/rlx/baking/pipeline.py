"""`bake` and `bake_bundle`: the reference's pipeline, in its order, without its bugs.

specialize -> bind packed -> [fold: sink captures -> resolve shapes -> fold constants -> fold
BatchNorm -> DCE] -> skip-zero -> ternary MatMuls (TQ2_0) -> simplify -> fuse -> DCE -> fold
-> DCE -> hoist subgraph weights -> weight encodings (Q8_0, f16, q8_f32, row-aligned TQ2_0;
through the accuracy guard) -> dedupe -> weight table (unfold + binding rows) -> memory
layout. Both encoding steps are the one weight-encoding stage (`rlx.passes.weight_encoding`,
plan then apply): the early one takes exactly ternary MatMul weights before simplification
sees their MatMuls; the late one every large weight, on the finished graph, so the guard
compares exactly that graph with its encoded versions.

The passes are one list of named steps (`bake_steps`), run by `rlx.passes.run_pipeline`:
the stats are its counts by step name and the outcomes the encoding steps return (their
choices), and a failing pass is named in the error. No step keeps state between calls.

The bracketed early fold is ours: the reference folds only after packing, so a weight that
reaches its MatMul through weight-only math (`Transpose(W)` from a PyTorch Linear, a
BatchNorm to fold in) was never packed. Folding first hands the packers plain constants.

Node names and ids travel with the nodes through every pass, so the table links each row to
its Constant by id; nothing is renamed after the fact by matching payload bytes.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from rlx import passes
from rlx.artifact.memory import MemoryStats
from rlx.artifact.model import RlxFile, RlxWeight
from rlx.artifact.precision import PrecisionPlan
from rlx.baking.encoding import EncodedWeights, encode_weights
from rlx.baking.fast import FastPlan, plan_precision
from rlx.baking.guard import AccuracyReport
from rlx.baking.options import BakeOptions
from rlx.baking.self_test import build_self_test
from rlx.codecs import Encoding
from rlx.deferred import Deferred, Payload, defer
from rlx.ir.dtype import DType
from rlx.ir.graph import Graph, Node, unique_name
from rlx.ir.naming import op_type_counts
from rlx.ir.ops.sources import Constant
from rlx.ir.verification import verify
from rlx.passes.pipeline import Outcome, Step
from rlx.passes.weight_encoding import EncodingPlan
from rlx.passes.weight_roles import WeightRole
from rlx.weights.bundle import WeightBundle
from rlx.weights.matching import likely_params

__all__ = ["BakeReport", "OptimizeStats", "bake", "bake_bundle", "bake_steps"]

log = logging.getLogger(__name__)


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

    @classmethod
    def from_run(cls, counts: Mapping[str, int],
                 outcomes: Mapping[str, list[Outcome]]) -> OptimizeStats:
        """The stats of a bake from its pipeline's counts per step name (each count field
        reports one step's counts, summed over its runs) and its encoding steps' outcomes."""
        def count(step: str) -> int:
            return counts.get(step, 0)

        not_packed: dict[str, int] = {}
        for plan in outcomes.get("pack_ternary", []):
            assert isinstance(plan, EncodingPlan)  # what encode_ternary_matmuls returns
            for reason, n in plan.skipped.items():
                not_packed[reason] = not_packed.get(reason, 0) + n
        stats = cls(skipped_zero_matmuls=count("skip_zero_matmul"),
                    ternary_packed=count("pack_ternary"),
                    simplified=count("algebraic_simplify"),
                    fused=count("fuse_patterns"),
                    dead_removed=count("eliminate_dead_code"),
                    constants_folded=count("fold_constants"),
                    shapes_resolved=count("resolve_shapes"),
                    batchnorms_folded=count("fold_batchnorm"),
                    captures_sunk=count("sink_constant_captures"),
                    weights_hoisted=count("hoist_subgraph_weights"),
                    not_packed=not_packed)
        for encoded in outcomes.get("encode_weights", []):
            assert isinstance(encoded, EncodedWeights)  # what encode_weights returns
            stats.add_encoded(encoded)
        return stats

    def add_encoded(self, encoded: EncodedWeights) -> None:
        """Count the weights the late encoding step stored encoded, and why it left some."""
        self.not_encoded = dict(encoded.skipped)
        for c in encoded.choices:
            self.encoded[c.encoding.label] = self.encoded.get(c.encoding.label, 0) + 1
            if c.role in (WeightRole.MATMUL, WeightRole.MATMUL_DECODED):
                if c.encoding is Encoding.GGUF_Q8_0:
                    self.quant_packed += 1
                elif c.encoding is Encoding.GGUF_TQ2_0:
                    self.ternary_packed += 1


@dataclass
class BakeReport:
    # computing nodes (rlx.ir.naming.COMPUTING_NODES) by ONNX op type, before and after:
    # the one node count of every report (nodes_before / nodes_after are their totals)
    op_types_before: dict[str, int] = field(default_factory=dict)
    op_types_after: dict[str, int] = field(default_factory=dict)
    params_baked: int = 0  # params turned into constants (whether or not later folded)
    params_remaining: list[str] = field(default_factory=list)
    unused_bindings: list[str] = field(default_factory=list)  # bindings matching no param
    # the param an unused binding is likely a baked form of ("param 'fc.w' transposed")
    unused_bindings_likely: dict[str, str] = field(default_factory=dict)
    constant_bytes: int = 0  # Constant payload bytes left in the graph
    weight_count: int = 0
    weight_bytes: int = 0
    bytes_by_encoding: dict[str, int] = field(default_factory=dict)
    optimize: OptimizeStats = field(default_factory=OptimizeStats)
    memory: MemoryStats = field(default_factory=MemoryStats)
    # every weight the encoding stage stored encoded or kept, with its measured accuracy
    accuracy: AccuracyReport = field(default_factory=AccuracyReport)
    precision: PrecisionPlan | None = None  # the fast profile's plan, as stored in the file

    @property
    def nodes_before(self) -> int:
        return sum(self.op_types_before.values())

    @property
    def nodes_after(self) -> int:
        return sum(self.op_types_after.values())


def bake(graph: Graph, bindings: Mapping[str, np.ndarray],
         opts: BakeOptions | None = None) -> tuple[RlxFile, BakeReport]:
    """Bake `graph` with weights given as arrays by param name."""
    return bake_bundle(graph, WeightBundle(tensors=dict(bindings)), opts)


def bake_bundle(graph: Graph, bundle: WeightBundle,
                opts: BakeOptions | None = None) -> tuple[RlxFile, BakeReport]:
    """Bake `graph` with a loaded `WeightBundle` (dense tensors and packed rows)."""
    opts = opts or BakeOptions()
    verify(graph)
    report = BakeReport(op_types_before=_op_types(graph))
    _check_bindings(graph, bundle, report)

    g, counts, outcomes = passes.run_pipeline(bake_steps(opts, bundle), graph)
    verify(g)
    report.params_baked = counts["specialize"] + counts["bind_packed"]
    report.optimize = stats = OptimizeStats.from_run(counts, outcomes)
    for encoded in outcomes.get("encode_weights", []):
        assert isinstance(encoded, EncodedWeights)  # what encode_weights returns
        report.accuracy = encoded.accuracy
    for planned in outcomes.get("plan_precision", []):
        assert isinstance(planned, FastPlan)  # what plan_precision returns
        report.precision = planned.plan

    if opts.self_test is not False:
        exact = outcomes["keep_exact_graph"][0]
        assert isinstance(exact, ExactGraph)  # what the step returns
        int8_plan = report.precision is not None and bool(report.precision.counts.get("int8"))
        test = build_self_test(exact.graph, g, _self_test_feeds(opts),
                               _bound_bytes(g), report.accuracy, int8_plan)
    rows = _weight_table(g, bundle, opts, stats, report)
    file = RlxFile.from_baked(
        g, rows, params_baked=report.params_baked,
        skipped_zero_matmuls=stats.skipped_zero_matmuls,
        ternary_packed=stats.ternary_packed, quant_packed=stats.quant_packed,
        profile=opts.profile.value,
        precision_plan=report.precision.to_json() if report.precision is not None else {},
    )
    if opts.self_test is not False:
        file.self_test = test
    dropped = report.memory.folded_bindings_dropped
    report.memory = file.apply_memory_mode(opts.memory)
    report.memory.constants_deduped = counts["dedupe_identical_constants"]
    report.memory.folded_bindings_dropped = dropped
    report.op_types_after = _op_types(file.graph)
    report.params_remaining = file.meta.params_remaining
    report.constant_bytes = file.meta.constant_bytes
    report.weight_count = file.meta.weight_count
    report.weight_bytes = file.meta.weight_bytes
    for w in file.weights:
        report.bytes_by_encoding[w.encoding] = report.bytes_by_encoding.get(w.encoding, 0) \
            + w.nbytes
    log.info("baked %r: %d -> %d computing nodes, %d weights, %d bytes", graph.name,
             report.nodes_before, report.nodes_after, report.weight_count, report.weight_bytes)
    return file, report


def _check_bindings(graph: Graph, bundle: WeightBundle, report: BakeReport) -> None:
    """Note (and warn of) the bindings no param is named by, with the param each is likely
    a baked form of (weights written by `rlx-bake tensors` under a baked graph's names)."""
    params = {n.source_name: tuple(int(d) for d in n.tensor_shape.dims)
              for n in graph.params()}
    report.unused_bindings = sorted(
        (set(bundle.tensors) | {w.name for w in bundle.packed}) - set(params)
        - passes.mlx_companions(bundle.packed))
    report.unused_bindings_likely = likely_params(report.unused_bindings, bundle.tensors,
                                                  params)
    likely = report.unused_bindings_likely
    if report.unused_bindings:
        log.warning("bindings matching no param (left out of the bake): %s%s", ", ".join(
            name + (f" (likely {likely[name]})" if name in likely else "")
            for name in report.unused_bindings),
            "; to bind one, name it after its param, in the param's layout" if likely else "")


def bake_steps(opts: BakeOptions, bundle: WeightBundle) -> list[Step]:
    """The bake as a list of named passes, those `opts` turns off left out (module doc).
    The encoding steps return their plans as outcomes (`OptimizeStats.from_run` reads them).
    """
    fold, dce = opts.constant_folding, opts.dce

    def specialize(g: Graph) -> tuple[Graph, int]:
        # GGUF matrices decoded to f32 are [N, K]: bound transposed, as the packed path does
        return passes.specialize(g, passes.orient_bt_tensors(g, bundle.tensors, bundle.bt))

    table: list[tuple[bool, Step]] = [
        (True, Step("specialize", specialize)),
        (True, Step("bind_packed", functools.partial(passes.bind_packed, rows=bundle.packed))),
        # the early fold: weight-only math and BatchNorms, before packing
        (fold, Step("sink_constant_captures", passes.sink_constant_captures)),
        (fold, Step("resolve_shapes", passes.resolve_shapes)),  # recurses into subgraphs
        (fold, Step("fold_constants", _fold)),
        (fold, Step("fold_batchnorm", _fold_batchnorm)),
        (fold and dce, Step("eliminate_dead_code", _dce)),
        (opts.skip_zero, Step("skip_zero_matmul", passes.skip_zero_matmul)),
        # exactly ternary MatMul weights, losslessly, before simplification sees the MatMuls
        (opts.ternary, Step("pack_ternary", passes.encode_ternary_matmuls)),
        (opts.algebraic_simplify, Step("algebraic_simplify", _simplify)),
        (opts.algebraic_simplify, Step("fuse_patterns", _fuse)),
        # per-step products of an unrolled recurrent export -> one product over all steps
        (opts.algebraic_simplify, Step("batch_step_products", passes.batch_step_products)),
        (dce, Step("eliminate_dead_code", _dce)),
        # the late fold: what packing and simplification exposed (DCE after it is a no-op
        # when it folded nothing: the graph is the same object)
        (fold, Step("fold_constants", _fold)),
        (fold and dce, Step("eliminate_dead_code", _dce)),
        (opts.unfold, Step("hoist_subgraph_weights", passes.hoist_subgraph_weights)),
        # the graph the guard calls exact: the self-test's reference
        (opts.self_test is not False, Step("keep_exact_graph", _keep_exact)),
        (opts.ternary or opts.quant, Step("encode_weights", functools.partial(
            encode_weights, opts=opts))),
        (opts.dedupe_constants, Step("dedupe_identical_constants", _dedupe)),
        # the fast profile's int8 plan, measured on the finished graph (rlx.baking.fast);
        # after the dedupe, so a weight read by many nodes is one constant, quantised once
        (opts.precision_plan, Step("plan_precision", functools.partial(
            _plan_precision, opts=opts))),
        (opts.precision_plan and opts.dedupe_constants,
         Step("dedupe_identical_constants", _dedupe)),
    ]
    return [step for enabled, step in table if enabled]


@dataclass(frozen=True)
class ExactGraph:
    """The graph before the weight encodings (an `Outcome` of no rewrites)."""

    graph: Graph
    count: int = 0


def _keep_exact(g: Graph) -> tuple[Graph, ExactGraph]:
    return g, ExactGraph(g)


def _self_test_feeds(opts: BakeOptions) -> list[Mapping[str, np.ndarray]] | None:
    """The feeds the self-test stores: those given, else the calibration feeds, else None
    (one seeded sample)."""
    if opts.self_test is True:
        return list(opts.calibration) if opts.calibration else None
    return list(opts.self_test) if opts.self_test else None


def _bound_bytes(g: Graph) -> int:
    return sum(n.op.nbytes for n in g.nodes() if isinstance(n.op, Constant))


def _plan_precision(graph: Graph, opts: BakeOptions) -> tuple[Graph, FastPlan]:
    return plan_precision(graph, opts.calibration, opts.min_cosine)


def _op_types(graph: Graph) -> dict[str, int]:
    return dict(sorted(op_type_counts(graph).items()))


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
            assert isinstance(node.op, Constant)  # unfold_weights lists constants
            name = node.name or unique_name(f"w{node.id}", used_names)
            rows[name] = RlxWeight(
                name, tuple(row.shape), row.dtype.value, row.encoding, node.op.data,
                note=row.note, layout=row.layout, node_id=node.id, row_aligned=row.row_aligned,
            )
    linked = {r.node_id for r in rows.values()}
    for name in sorted(bundle.tensors):
        if name in rows or name in report.unused_bindings:
            continue
        found = g.find(name)
        if found is not None and isinstance(found.op, Constant) and found.id not in linked:
            rows[name] = _dense_row(name, found, "baked from live constant")
        elif found is None and opts.keep_folded_bindings:
            value = bundle.tensors[name]
            value = defer(value if isinstance(value, Deferred) else np.ascontiguousarray(value))
            rows[name] = RlxWeight(name, value.shape, _dtype_name(value), _dtype_name(value),
                                   value, note="source binding (folded away in the graph)")
        elif found is None:
            report.memory.folded_bindings_dropped += 1
    return [rows[k] for k in sorted(rows)]


def _dense_row(name: str, node: Node, note: str) -> RlxWeight:
    assert isinstance(node.op, Constant)
    shape = node.tensor_shape  # a constant's: static
    return RlxWeight(name, tuple(int(d) for d in shape.dims), shape.dtype.value,
                     shape.dtype.value, node.op.data, note=note, node_id=node.id)


def _dtype_name(value: Payload) -> str:
    return DType.from_numpy(value.dtype).value
