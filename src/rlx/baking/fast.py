"""The fast profile's bake step: a precision plan checked on calibration feeds.

A per-channel scale and shift after a Conv (a BatchNorm as exporters often write it) is
folded into it first (`rlx.passes.channel_scale_folding`), so an int8 Conv's output is
quantised after its Relu; an int8 MatMul's activation with outlier channels is smoothed
after calibration (`rlx.baking.smoothing`). Every int8 candidate (`rlx.baking.int8`) is
ranked twice by its own measured error (`rlx.baking.sensitivity.local_errors`): by the
error alone, and by squared error (errors add as squares) per multiply-add int8 saves on it
(`rlx.baking.int8.work`). For each ranking the plan keeps the first k candidates f32 and
runs the rest int8, with the smallest k whose graph, run by the numpy runtime on every
calibration feed, keeps every output within the targets against the exact graph: cosine >=
`min_cosine` and, on class-score outputs, the argmax at >= 99% of positions
(`rlx.baking.guard`); of the two, the plan leaving the fewest multiply-adds f32 wins. By
error alone, an unrolled CRNN kept 51 of 105 nodes f32 (its Convs, the bulk of its time,
among them) where most of its error came from 40 cheap recurrent matrix-vector products;
per multiply-add, a BERT encoder kept 15 of 18 f32 instead of 5 (its errors did not add as
their local sizes said).

The ops between int8 nodes that onnxruntime runs on u8 (`rlx.baking.int8_chain`: SiLU,
Add, Concat, MaxPool, ...) and the narrow Convs between them follow from the int8 nodes a
trial picks (`rlx.baking.int8.plan_int8`), so every measurement below covers them; the
plan counts the chain's nodes as "int8 chain".

k is found by bisection over the ranking: each step is a real
measurement of the combined plan (errors of many small perturbations add up to first order,
so fewer int8 nodes means a smaller error, which bisection relies on; the final plan is the
one measured, so the result never rests on that assumption). That costs about log2(n) runs
per ranking where greedy one-by-one fallback costs up to n. The int8 part aims at
`HELD_OUT_MARGIN` of the allowed 1 - cosine, as the size profile's guard does: a plan that
passes the calibration feeds just missed on held-out ones (a small CNN at 0.99905 on
calibration, 0.99883 held out).

Trying each node bisection kept f32 int8 again, one run each, was measured and left out:
on an unrolled CRNN it made 41 more of 105 nodes int8 for 4% less CPU time, and its
held-out argmax agreement fell from 1.0 to 0.9875 on onnxruntime and OpenVINO.

OpenVINO runs int8 products without the chains (its low-precision transformations ran
those slowly and off: `rlx.engines.openvino_int8`), bf16 or f32 elsewhere, which errs less
than onnxruntime's form of the same set: so it gets a set of its own, planned last, in the
form it runs (`rlx.baking.openvino_set`, `calibration["openvino"]`). Files baked before
that hold `calibration["int8_products"]` instead, whether onnxruntime's set passed there.

The plan's bf16 part (`rlx.baking.bf16`, what OpenVINO runs on a CPU with bf16) is planned
after it, on the graph such an engine runs (the file's exact graph: int8 weights as stored),
against the same exact outputs and targets.

Each node is planned alone: a weight read by several nodes (one constant: the plan runs
after the bake's dedupe) is quantised once, and where the guard keeps some of its readers
f32 the file holds it both ways. Planning such readers as one group kept the file smaller
but, measured on an unrolled CRNN (20 steps per LSTM weight), left 6 of 105 nodes int8
instead of 54, and the run 2.4x slower than f32 instead of 0.4-0.6x. Ranked per
multiply-add, the readers of a large weight rank alike (one weight, one work), so they
mostly land on one side.

Without calibration feeds the plan is checked on seeded inputs of the declared shapes
(`rlx.runtime.feeds.seeded_feeds`: floats standard normal, the rest zero) with a warning, and
the plan says so (`calibration["seeded"]`): a bake that walks every profile still works,
but only feeds from the model's real input distribution make its ranges and its guard mean
anything, so the report, inspect and verify show the plan as unchecked.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from rlx import passes
from rlx.artifact.openvino_form import OPENVINO
from rlx.artifact.planned import exact_graph
from rlx.artifact.precision import PrecisionPlan
from rlx.baking.bf16 import plan_bf16
from rlx.baking.guard import HELD_OUT_MARGIN, OutputAccuracy, OutputRunner, fewest_kept, misses
from rlx.baking.int8 import ActivationRange, Candidate, apply_int8, candidates, plan_int8, work
from rlx.baking.openvino_set import input_convs, plan_openvino, ranked_products
from rlx.baking.sensitivity import calibrate, local_errors
from rlx.baking.smoothing import smooth_ranges
from rlx.errors import RlxError
from rlx.ir.graph import Graph
from rlx.ir.ops.elementwise import Binary, BinaryOp
from rlx.ir.ops.linalg import MatMul
from rlx.ir.ops.nn import LogSoftmax, Softmax
from rlx.passes.channel_scale_folding import fold_channel_scales
from rlx.runtime.feeds import seeded_feeds

__all__ = ["FastPlan", "plan_precision", "class_score_outputs", "DEFAULT_FAST_MIN_COSINE",
           "SEEDED"]

log = logging.getLogger(__name__)

DEFAULT_FAST_MIN_COSINE = 0.999
SEEDED = ("fast profile: no calibration feeds; the precision plan is checked on seeded "
          "inputs, not on your data: give --calibrate FEEDS.npz (BakeOptions(calibration="
          "[feeds])), or check the baked file with rlx-bake verify")
SEEDED_FEEDS = 2

Feeds = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class FastPlan:
    """The step's outcome: `count` nodes made int8, and the plan stored in the artifact."""

    count: int = 0
    plan: PrecisionPlan = field(default_factory=PrecisionPlan)


def class_score_outputs(graph: Graph) -> list[str]:
    """Outputs that are class scores, by the op that makes them: a Softmax / LogSoftmax over
    the last axis, or a MatMul (with its bias Add) whose last axis has >= 2 entries."""
    found = []
    for o in graph.outputs:
        node = graph.node(o)
        if isinstance(node.op, Binary) and node.op.op is BinaryOp.ADD:
            producers = [graph.node(i) for i in node.inputs]
            node = next((p for p in producers if isinstance(p.op, MatMul)), node)
        shape = graph.node(o).tensor_shape
        last = shape.dims[-1] if shape.rank else 1
        if isinstance(node.op, (Softmax, LogSoftmax)) and node.op.axis in (-1, shape.rank - 1) \
                or isinstance(node.op, MatMul) and isinstance(last, int) and last >= 2:
            found.append(graph.node(o).name or f"out{o}")
    return found


def plan_precision(graph: Graph, feeds: Sequence[Feeds] | None,
                   min_cosine: float | None = None) -> tuple[Graph, FastPlan]:
    """`graph` with the int8 nodes of its checked plan in QDQ form, and the plan."""
    target = DEFAULT_FAST_MIN_COSINE if min_cosine is None else float(min_cosine)
    aim = 1 - (1 - target) * HELD_OUT_MARGIN  # what the int8 part keeps on calibration
    seeded = not feeds
    if seeded:
        log.warning(SEEDED)
        rng = np.random.default_rng(0)
        feeds = [seeded_feeds(graph.inputs(), rng)[0] for _ in range(SEEDED_FEEDS)]
    assert feeds is not None
    graph, _ = fold_channel_scales(graph)  # an int8 Conv's output then follows its Relu
    every = candidates(graph)
    found = plan_int8(graph, every)[0]  # narrow ones never int8 left out
    entries = input_convs(graph, every, found)  # OpenVINO's set may run these int8
    try:
        refs, ranges = calibrate(graph, [*found, *entries], feeds)
    except RlxError as err:
        if not seeded:
            raise
        log.warning("fast profile: the seeded inputs do not run this model (%s); no "
                    "precision plan", err)
        return graph, FastPlan(0, PrecisionPlan(
            {"f32": len(found)}, calibration={"samples": 0, "seeded": True}))
    ranges = smooth_ranges(graph, found, ranges)
    runner = OutputRunner(graph, feeds, refs, class_score_outputs(graph))
    errors = local_errors(graph, found, ranges, feeds) if found else {}
    best = None
    orders = _orders(graph, found, errors)
    for how, ranked in orders:
        kept, trial = _fewest_kept(graph, ranked, ranges, runner, aim)
        left = sum(work(graph, c) for c in ranked[:kept])  # f32 multiply-adds left
        if best is None or left < best[0]:
            best = left, how, ranked, kept, trial
        if not kept:
            break
    assert best is not None
    _, how, ranked, kept, (g, quantizers, accuracy) = best
    g, _ = passes.eliminate_dead_code(g)
    plan = _plan(graph, ranked, errors, kept, quantizers, how)
    running, links = plan_int8(graph, ranked[kept:])  # narrow ones only inside a chain
    plan.counts.update({"int8": len(running), "f32": len(ranked) - len(running),
                        "int8 chain": len(links.nodes)})
    # on the graph bf16 engines run: the exact graph of the file, its int8 weights as stored
    bf16 = plan_bf16(exact_graph(g, plan), runner, aim)  # held-out margin, as int8
    plan.bf16, plan.counts["bf16"] = bf16.names, bf16.count
    per_work = dict(orders)[" per multiply-add"]
    own = plan_openvino(g, plan, ranked_products(graph, [*entries, *per_work], ranges,
                                                   running), runner, aim)
    plan.calibration = {"samples": len(feeds), "seeded": seeded, "min_cosine": target,
                        "runs": runner.runs, "outputs": [vars(a) for a in accuracy],
                        "bf16": {"candidates": bf16.candidates, "kept": bf16.kept,
                                 "outputs": [vars(a) for a in bf16.accuracy]}}
    if own.int8:
        plan.calibration[OPENVINO] = own.to_json()
    log.info("fast plan: %s (%d numpy runs on %d calibration feed(s))", plan.summary,
             runner.runs, len(feeds))
    return g, FastPlan(len(running), plan)


Trial = tuple[Graph, list[str], list[OutputAccuracy]]


def _orders(graph: Graph, found: list[Candidate], errors: dict[int, float]
            ) -> list[tuple[str, list[Candidate]]]:
    """The two rankings the guard bisects, most sensitive first (module doc)."""
    alone = sorted(found, key=lambda c: (-errors[c.node], c.node))
    per_work = sorted(found, key=lambda c: (-errors[c.node] ** 2 / work(graph, c), c.node))
    return [("", alone), (" per multiply-add", per_work)]


def _fewest_kept(graph: Graph, ranked: list[Candidate], ranges: dict[int, ActivationRange],
                 runner: OutputRunner, target: float) -> tuple[int, Trial]:
    """The smallest k such that keeping `ranked[:k]` f32 meets the targets, and that
    trial (its graph, quantisers and measured accuracy), by bisection (module doc)."""
    def trial(kept: int) -> Trial:
        g, quantizers = apply_int8(graph, ranked[kept:], ranges)
        if kept == len(ranked):
            return g, quantizers, [OutputAccuracy(n, 1.0, 0.0, 1.0) for n in runner.names]
        return g, quantizers, runner.measure_graph(g, f"{len(ranked) - kept} node(s) int8")

    best = trial(0)  # everything int8: one run when that meets the targets
    if misses(best[2], target) <= 1:
        return 0, best
    passed: dict[int, Trial] = {}  # the passing trial of the k bisection settles on

    def measure(kept: int) -> list[OutputAccuracy]:
        result = trial(kept)
        if misses(result[2], target) <= 1:
            passed.clear()
            passed[kept] = result
        return result[2]

    kept, _ = fewest_kept(len(ranked), measure, target)
    return kept, passed.get(kept) or trial(kept)


def _plan(graph: Graph, ranked: list[Candidate], errors: dict[int, float], kept: int,
          quantizers: list[str], how: str) -> PrecisionPlan:
    rows = []
    for rank, c in enumerate(ranked[:kept]):
        rows.append({"node": c.label(graph), "op": type(graph.node(c.node).op).__name__,
                     "reason": f"relative error {errors[c.node]:.3g} alone for "
                               f"{work(graph, c):.3g} multiply-adds, the "
                               f"{_ordinal(rank + 1)} most sensitive{how} of {len(ranked)}; "
                               "with it int8 the calibration outputs missed the targets"})
    counts = {"int8": len(ranked) - kept, "f32": kept}
    return PrecisionPlan(counts, quantizers, [], rows)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
