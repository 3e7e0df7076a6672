"""The bake's weight-encoding step: plan (`rlx.passes.weight_encoding`), guard, apply.

A pure step: `encode_weights(graph, opts)` returns the encoded graph and an `EncodedWeights`
holding every choice it made and why it left the rest, which `run_pipeline` keeps as the
step's outcome and the bake turns into its report. Lossless choices (exactly ternary TQ2_0,
int8 grids as q8_f32) always stay; the lossy ones (`opts.quant`: Q8_0, f16) go through the
accuracy guard when there is calibration data.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from rlx import passes
from rlx.baking.guard import AccuracyReport, TensorAccuracy, guard_encodings
from rlx.baking.importance import input_importance
from rlx.baking.options import BakeOptions
from rlx.ir.graph import Graph
from rlx.passes.weight_encoding import WeightChoice

__all__ = ["EncodedWeights", "UNCHECKED", "encode_weights"]

log = logging.getLogger(__name__)

UNCHECKED = ("size profile: accuracy unchecked (no calibration data); measure it with "
             "--calibrate FEEDS.npz [--min-cosine 0.9995] (BakeOptions(calibration=[feeds])), "
             "or check the baked file with rlx-bake verify --min-cosine 0.999")


@dataclass(frozen=True)
class EncodedWeights:
    """What the step did: `count` constants encoded, the `choices` applied, the large f32
    constants left as they are by reason (`skipped`), and every proposed weight's accuracy
    (an `rlx.passes.pipeline.Outcome`)."""

    count: int = 0
    choices: tuple[WeightChoice, ...] = ()
    skipped: dict[str, int] = field(default_factory=dict)
    accuracy: AccuracyReport = field(default_factory=AccuracyReport)


def encode_weights(graph: Graph, opts: BakeOptions) -> tuple[Graph, EncodedWeights]:
    """`graph` with its large float weights stored encoded (lossless TQ2_0 only, unless
    `opts.quant`), and what was chosen and measured."""
    # calibrated: the guard measures the searched scales, so the plan may use them, their
    # error weighted by what the calibration feeds multiply each value by
    searched = bool(opts.calibration)
    importance = input_importance(graph, opts.calibration) \
        if opts.calibration and opts.quant else {}
    plan = passes.plan_weight_encodings(graph, lossless=not opts.quant, ternary=opts.ternary,
                                        searched=searched, importance=importance)
    # the guard weighs only what can move an output: lossless choices always stay
    lossless = [c for c in plan.choices if c.lossless]
    lossy = [c for c in plan.choices if not c.lossless]
    exact_rows = [TensorAccuracy.of(c) for c in lossless]
    if lossy and opts.calibration:
        kept, accuracy = guard_encodings(graph, lossy, opts.calibration, opts.min_cosine,
                                         opts.max_abs_error)
        if not accuracy.met:
            log.warning("accuracy guard: targets missed even with every weight at full "
                        "precision")
        accuracy.tensors = exact_rows + accuracy.tensors
        choices = lossless + kept
    else:
        if lossy:
            log.warning(UNCHECKED)
        accuracy = AccuracyReport(tensors=exact_rows + [TensorAccuracy.of(c) for c in lossy])
        choices = list(plan.choices)
    encoded, count = passes.apply_weight_encodings(graph, choices)
    return encoded, EncodedWeights(count, tuple(choices), plan.skipped, accuracy)
