"""The accuracy guard of the lossy encodings: measured on calibration feeds, not guessed.

The bake hands over the graph as it is without lossy encodings (the exact graph) and the
encodings proposed for it. The guard runs the exact graph and encoded graphs with the numpy
runtime on every calibration feed and compares every output (cosine, and max abs error):

1. each proposed tensor alone (its measured contribution, reported for every tensor);
2. all of them together; while a target is missed, tensors step down their ladder (a
   lossy block encoding, then f16 where f16 holds the weight, then full precision), the
   ones that buy the most accuracy per byte first, as many as the measured excess calls
   for, and all of them are measured again.

Why by accuracy per byte: the errors are small perturbations, so to first order their
effects on the outputs add up, and a tensor's share is its contribution alone; what a step
buys is that share times 1 - (e' / e)^2 (an output's 1 - cosine grows with the square of
the weight's error e, e' the error a rung down), what it costs is the bytes it adds.
Taking the best ratios until their shares (scaled to add up to the error measured now)
cover the excess is the greedy answer to that knapsack: a model's first conv and its
depthwise layers, few bytes and sensitive, step before a large, tolerant layer does, where
steepest-first by contribution kept whichever was largest, whatever it cost. The scaling
matters where shares do not add up (an output of four probabilities, errors that compound):
unscaled, orientation-lcnet's shares summed to a third of its measured error and one round
stepped every weight (0.27x -> 0.50x). Re-measuring after every round checks the real
combined effect, so the result never relies on the additivity it assumes. It costs one run
per tensor plus one per round.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from rlx.ir.graph import Graph
from rlx.passes.weight_encoding import WeightChoice, apply_weight_encodings, f16_fallback
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
    row_error: float  # the same, of its worst row (output channel)
    cosine: float | None = None  # worst output cosine with only this tensor encoded
    max_abs: float | None = None  # largest output abs error with only this tensor encoded
    kept: bool = False  # kept at full precision by the guard
    reason: str = ""
    proposed: str = ""  # the encoding the plan proposed (`encoding`: what it is stored as)
    proposed_bytes: int = 0

    @classmethod
    def of(cls, choice: WeightChoice) -> TensorAccuracy:
        """The row of a proposed choice, before any measurement."""
        return cls(choice.name, str(choice.role), choice.label, choice.f32_bytes,
                   choice.packed_bytes, choice.rel_error, choice.row_error,
                   proposed=choice.label, proposed_bytes=choice.packed_bytes)


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
    """The choices that keep every output within the targets on `feeds` (some stepped
    down to f16), and the report."""
    min_cos = DEFAULT_MIN_COSINE if min_cosine is None else float(min_cosine)
    report = AccuracyReport(True, len(feeds), min_cos, max_abs_error)
    runner = OutputRunner(graph, feeds, planned=len(choices) + 2)
    rows = {c.node_id: TensorAccuracy.of(c) for c in choices}
    ladder = _Ladder(graph, choices)
    for c in choices:
        alone = runner.measure([c], f"{c.name} alone")
        row = rows[c.node_id]
        row.cosine = min(a.cosine for a in alone)
        row.max_abs = max(a.max_abs for a in alone)
        ladder.share[c.node_id] = misses(alone, min_cos, max_abs_error)
    acc = report.proposed = runner.measure(ladder.chosen(), "every weight encoded")
    while misses(acc, min_cos, max_abs_error) > 1 and ladder.can_step():
        worst = min(a.cosine for a in acc)
        stepped = ladder.step(misses(acc, min_cos, max_abs_error))
        for node_id in stepped:
            _note_step(rows[node_id], ladder.current[node_id], worst)
        acc = runner.measure(ladder.chosen(), f"{len(stepped)} weight(s) stepped down")
    report.final = acc
    report.met = misses(acc, min_cos, max_abs_error) <= 1
    report.tensors = [rows[c.node_id] for c in choices]
    report.runs = runner.runs
    return ladder.chosen(), report


class _Ladder:
    """Each tensor's current rung (a choice, or None at full precision) and its measured
    share of the outputs' error at its proposed encoding (module doc)."""

    def __init__(self, graph: Graph, choices: Sequence[WeightChoice]):
        self.graph, self.users = graph, graph.users()
        self.proposed = {c.node_id: c for c in choices}
        self.current: dict[int, WeightChoice | None] = dict(self.proposed)
        self.share: dict[int, float] = {}
        self._below: dict[int, WeightChoice | None] = {}  # the rung below current, once read

    def chosen(self) -> list[WeightChoice]:
        return [c for c in self.current.values() if c is not None]

    def can_step(self) -> bool:
        return any(c is not None for c in self.current.values())

    def step(self, missed: float) -> list[int]:
        """Step down the tensors that buy the most per byte until their gains cover the
        excess of `missed` (the measured `misses`) over 1, at least one; their ids. The
        shares are first scaled to add up to `missed`: the first-order model's shares of
        the error measured now."""
        total = sum(self._share_at(c) for c in self.current.values() if c is not None)
        scale = missed / total if total > 0 else 1.0
        options = []
        for node_id, now in self.current.items():
            if now is None:
                continue
            if node_id not in self._below:
                self._below[node_id] = f16_fallback(self.graph, now, self.users)
            below = self._below[node_id]
            gain = scale * (self._share_at(now) - (self._share_at(below) if below else 0.0))
            cost = (below.packed_bytes if below else now.f32_bytes) - now.packed_bytes
            options.append((gain / max(cost, 1), node_id, below, gain))
        options.sort(key=lambda o: (-o[0], o[1]))
        stepped, covered = [], 0.0
        for _, node_id, below, gain in options:
            self.current[node_id] = below
            del self._below[node_id]
            stepped.append(node_id)
            covered += gain
            if covered >= missed - 1:
                break
        return stepped

    def _share_at(self, choice: WeightChoice) -> float:
        """The tensor's share at `choice`, from its share at its proposed encoding scaled
        by the square of the error ratio (the first-order model of the module doc)."""
        proposed = self.proposed[choice.node_id]
        ratio = choice.rel_error / proposed.rel_error if proposed.rel_error else 0.0
        return self.share[choice.node_id] * ratio * ratio


def _note_step(row: TensorAccuracy, now: WeightChoice | None, worst: float) -> None:
    """Record on `row` where its tensor stepped to, and why."""
    row.kept = now is None
    row.encoding = "f32" if now is None else now.label
    row.packed_bytes = row.f32_bytes if now is None else now.packed_bytes
    row.reason = (f"stepped to {row.encoding} (alone: cosine {row.cosine:.6f}, max abs "
                  f"{row.max_abs:.3g}; {row.packed_bytes - row.proposed_bytes:+,} bytes); with "
                  f"it encoded as proposed the worst output cosine was {worst:.6f}")
    log.info("guard: %s %s", row.name, row.reason)
