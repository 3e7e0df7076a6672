"""The accuracy guard of the lossy encodings: measured on calibration feeds, not guessed.

The bake hands over the graph as it is without lossy encodings (the exact graph) and the
encodings proposed for it. The guard runs the exact graph and encoded graphs with the numpy
runtime on every calibration feed and compares every output (cosine, and max abs error):

1. each proposed tensor alone (its measured contribution, reported for every tensor);
2. all of them together; while a target is missed, the tensor with the largest measured
   contribution (relative to the targets) is kept at full precision and the rest measured
   again.

Why greedy by single contributions: the errors are small perturbations, so to first order
their effects on the outputs add up; dropping the largest contributor is the steepest step
toward the target, and re-measuring after every step checks the real combined effect, so
the result never relies on the additivity it assumes. It costs one run per tensor plus one
per tensor kept (an exhaustive search is exponential).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from rlx.ir.graph import Graph
from rlx.passes.weight_encoding import WeightChoice, apply_weight_encodings
from rlx.runtime.session import Session

__all__ = ["OutputAccuracy", "TensorAccuracy", "AccuracyReport", "guard_encodings",
           "compare_outputs", "DEFAULT_MIN_COSINE", "MIN_ARGMAX_AGREEMENT", "OutputRunner",
           "misses"]

log = logging.getLogger(__name__)
progress = logging.getLogger("rlx.progress")  # what a terminal shows while it runs

DEFAULT_MIN_COSINE = 0.9995
MIN_ARGMAX_AGREEMENT = 0.99
"""The share of positions whose argmax must agree on a class-score output."""
Feeds = Mapping[str, np.ndarray]


@dataclass
class OutputAccuracy:
    """One output: worst cosine and largest abs error over the calibration feeds, and on a
    class-score output the share of positions whose argmax (last axis) agrees."""

    name: str
    cosine: float
    max_abs: float
    argmax: float | None = None


@dataclass
class TensorAccuracy:
    name: str
    role: str
    encoding: str
    f32_bytes: int
    packed_bytes: int
    rel_error: float  # the tensor's own ||w - decoded|| / ||w||
    cosine: float | None = None  # worst output cosine with only this tensor encoded
    max_abs: float | None = None  # largest output abs error with only this tensor encoded
    kept: bool = False  # kept at full precision by the guard
    reason: str = ""

    @classmethod
    def of(cls, choice: WeightChoice) -> TensorAccuracy:
        """The row of a proposed choice, before any measurement."""
        return cls(choice.name, str(choice.role), choice.encoding.label, choice.f32_bytes,
                   choice.packed_bytes, choice.rel_error)


@dataclass
class AccuracyReport:
    """What the guard measured; `checked` is False when there was no calibration data."""

    checked: bool = False
    samples: int = 0
    min_cosine: float | None = None
    max_abs_error: float | None = None
    met: bool | None = None
    proposed: list[OutputAccuracy] = field(default_factory=list)  # everything encoded
    final: list[OutputAccuracy] = field(default_factory=list)  # after the guard
    tensors: list[TensorAccuracy] = field(default_factory=list)
    runs: int = 0


def compare_outputs(names: Sequence[str], refs: Sequence[Sequence[np.ndarray]],
                    outs: Sequence[Sequence[np.ndarray]],
                    class_scores: Sequence[str] = ()) -> list[OutputAccuracy]:
    """Per output: min cosine and max abs error over the feeds (refs[i][j]: feed i, out j),
    and argmax agreement over every position of the outputs named in `class_scores`."""
    result = []
    for j, name in enumerate(names):
        cosines, errors, same, positions = [], [], 0, 0
        for ref, out in zip(refs, outs, strict=True):
            a = np.asarray(ref[j], np.float64)
            b = np.asarray(out[j], np.float64)
            cosines.append(cosine(a.ravel(), b.ravel()))
            errors.append(float(np.max(np.abs(a - b))) if a.size else 0.0)
            if name in class_scores and a.ndim and a.size:
                agree = np.argmax(a, axis=-1) == np.argmax(b, axis=-1)
                same, positions = same + int(agree.sum()), positions + agree.size
        argmax = same / positions if positions else None
        result.append(OutputAccuracy(name, min(cosines), max(errors), argmax))
    return result


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity; 1 for two all-zero vectors (identical), 0 when one is zero, NaN
    results (NaN outputs) count as 0."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    value = float(a @ b / (na * nb))
    return value if np.isfinite(value) else 0.0


class OutputRunner:
    """Runs variants of one graph on the feeds with the numpy runtime and compares their
    outputs with the graph's own (`refs`, computed once unless given); each run is one step
    of one progress line (`planned` runs: the total, until the guard needs more)."""

    def __init__(self, graph: Graph, feeds: Sequence[Feeds],
                 refs: Sequence[Sequence[np.ndarray]] | None = None,
                 class_scores: Sequence[str] = (), planned: int = 0):
        self.graph, self.feeds, self.class_scores = graph, list(feeds), tuple(class_scores)
        self.planned = planned
        self.runs = 0
        if refs is None:
            self._progress("the exact graph")
        compiled = Session().compile(graph)
        self.names = compiled.output_names
        self.refs = list(refs) if refs is not None else [compiled.run(f) for f in self.feeds]
        self.runs = 0 if refs is not None else 1

    def measure(self, choices: Sequence[WeightChoice], what: str) -> list[OutputAccuracy]:
        encoded, _ = apply_weight_encodings(self.graph, list(choices), quiet=True)
        return self.measure_graph(encoded, what)

    def measure_graph(self, graph: Graph, what: str) -> list[OutputAccuracy]:
        self._progress(what)
        compiled = Session().compile(graph)
        self.runs += 1
        return compare_outputs(self.names, self.refs, [compiled.run(f) for f in self.feeds],
                               self.class_scores)

    def _progress(self, what: str) -> None:
        total = max(self.planned, self.runs + 1)
        progress.debug("measuring accuracy on the calibration inputs: %s", what,
                       extra={"progress": (self.runs, total)})


def misses(acc: list[OutputAccuracy], min_cosine: float, max_abs: float | None = None
           ) -> float:
    """How far past the targets the worst output is (<= 1 when every target holds); an
    argmax agreement under `MIN_ARGMAX_AGREEMENT` counts as missing by 2."""
    worst = max((1 - a.cosine) / max(1 - min_cosine, 1e-12) for a in acc)
    if max_abs is not None:
        worst = max(worst, max(a.max_abs / max(max_abs, 1e-30) for a in acc))
    if any(a.argmax is not None and a.argmax < MIN_ARGMAX_AGREEMENT for a in acc):
        worst = max(worst, 2.0)
    return worst


def guard_encodings(graph: Graph, choices: Sequence[WeightChoice], feeds: Sequence[Feeds],
                    min_cosine: float | None = None, max_abs_error: float | None = None
                    ) -> tuple[list[WeightChoice], AccuracyReport]:
    """The choices that keep every output within the targets on `feeds`, and the report."""
    min_cos = DEFAULT_MIN_COSINE if min_cosine is None else float(min_cosine)
    report = AccuracyReport(True, len(feeds), min_cos, max_abs_error)
    runner = OutputRunner(graph, feeds, planned=len(choices) + 2)
    rows = {c.node_id: TensorAccuracy.of(c) for c in choices}
    score: dict[int, float] = {}
    for c in choices:
        alone = runner.measure([c], f"{c.name} alone")
        row = rows[c.node_id]
        row.cosine = min(a.cosine for a in alone)
        row.max_abs = max(a.max_abs for a in alone)
        score[c.node_id] = misses(alone, min_cos, max_abs_error)
    kept = list(choices)
    acc = runner.measure(kept, "every weight encoded")
    report.proposed = acc
    while kept and misses(acc, min_cos, max_abs_error) > 1:
        worst = max(kept, key=lambda c: (score[c.node_id], c.node_id))
        kept.remove(worst)
        row = rows[worst.node_id]
        row.kept = True
        row.reason = (f"most sensitive left (alone: cosine {row.cosine:.6f}, max abs "
                      f"{row.max_abs:.3g}); with it encoded the worst output cosine was "
                      f"{min(a.cosine for a in acc):.6f}")
        log.info("guard: %s kept at f32: %s", worst.name, row.reason)
        acc = runner.measure(kept, f"{worst.name} kept at f32") if kept else [
            type(a)(a.name, 1.0, 0.0) for a in acc]
    report.final = acc
    report.met = misses(acc, min_cos, max_abs_error) <= 1
    report.tensors = [rows[c.node_id] for c in choices]
    report.runs = runner.runs
    return kept, report
