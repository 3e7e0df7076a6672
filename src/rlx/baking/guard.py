"""The accuracy guard of the lossy encodings: measured on calibration feeds, not guessed.

The bake hands over the graph as it is without lossy encodings (the exact graph) and the
encodings proposed for it. The guard runs the exact graph and encoded graphs with the numpy
runtime on every calibration feed and compares every output (cosine, and max abs error):

1. each proposed tensor alone (its measured contribution, reported for every tensor);
2. all of them together; while a target is missed, tensors step down their ladder (a
   lossy block encoding, 9- to 12-bit codes, f16 where f16 holds the weight, then full
   precision: `next_rung`), the rungs that buy the most accuracy per byte first, as many
   as the measured excess calls for (a tensor may step several rungs in one round), and
   all of them are measured again;
3. once the targets hold with room to spare, tensors step back up, the ones that save
   the most bytes per accuracy lost first, while the measurement allows (`_refund`).

Steps and refunds aim at `HELD_OUT_MARGIN` of the allowance; `met` is judged on all of it.

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
combined effect, so the result never relies on the additivity it assumes. Where the
excess is large the model's scale is inflated (errors compound), so a round covers the
excess only down to its square root and the next round re-scales: an anchor-free detector
missing by 38x, covered to 1 in one round, landed at 0.44 having spent bytes it did not
need (0.314x the exact file; damped, then refunded, 0.296-0.300x). The rungs between Q8_0
and f16 are what that detector's sensitive layers needed: 2-4 bits more, not f16's 7.5
(f16 alone left it at 0.337-0.361x). It costs one run per tensor plus one per round and
per refund.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from rlx.ir.graph import Graph
from rlx.passes.weight_encoding import WeightChoice, apply_weight_encodings, next_rung
from rlx.runtime.session import Session

__all__ = ["OutputAccuracy", "TensorAccuracy", "AccuracyReport", "guard_encodings",
           "compare_outputs", "DEFAULT_MIN_COSINE", "MIN_ARGMAX_AGREEMENT", "OutputRunner",
           "misses", "fewest_kept"]

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
    of one progress line (`planned` runs: the total, until the guard needs more). The
    weights' encoded streams of the last run are kept, by choice, for the runs after
    (`streams`)."""

    def __init__(self, graph: Graph, feeds: Sequence[Feeds],
                 refs: Sequence[Sequence[np.ndarray]] | None = None,
                 class_scores: Sequence[str] = (), planned: int = 0):
        self.graph, self.feeds, self.class_scores = graph, list(feeds), tuple(class_scores)
        self.planned = planned
        self.runs = 0
        self.streams: dict[WeightChoice, np.ndarray] = {}
        if refs is None:
            self._progress("the exact graph")
        compiled = Session().compile(graph)
        self.names = compiled.output_names
        self.refs = list(refs) if refs is not None else [compiled.run(f) for f in self.feeds]
        self.runs = 0 if refs is not None else 1

    def measure(self, choices: Sequence[WeightChoice], what: str) -> list[OutputAccuracy]:
        encoded, _ = apply_weight_encodings(self.graph, list(choices), quiet=True,
                                            streams=self.streams)
        # the streams of these choices only: about one file's worth held, not every rung's
        for stale in self.streams.keys() - set(choices):
            del self.streams[stale]
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
    down their ladder, aiming at `HELD_OUT_MARGIN` of the allowance), and the report."""
    target = DEFAULT_MIN_COSINE if min_cosine is None else float(min_cosine)
    report = AccuracyReport(True, len(feeds), target, max_abs_error)
    min_cos = 1 - (1 - target) * HELD_OUT_MARGIN  # what the steps and refunds aim at
    max_abs = None if max_abs_error is None else max_abs_error * HELD_OUT_MARGIN
    runner = OutputRunner(graph, feeds, planned=len(choices) + 2)
    rows = {c.node_id: TensorAccuracy.of(c) for c in choices}
    ladder = _Ladder(graph, choices)
    for c in choices:
        alone = runner.measure([c], f"{c.name} alone")
        row = rows[c.node_id]
        row.cosine = min(a.cosine for a in alone)
        row.max_abs = max(a.max_abs for a in alone)
        ladder.share[c.node_id] = misses(alone, min_cos, max_abs)
    acc = report.proposed = runner.measure(ladder.chosen(), "every weight encoded")
    while misses(acc, min_cos, max_abs) > 1 and ladder.can_step():
        worst = min(a.cosine for a in acc)
        stepped = ladder.step(misses(acc, min_cos, max_abs))
        for node_id in stepped:
            _note_step(rows[node_id], ladder.current[node_id], worst)
        acc = runner.measure(ladder.chosen(), f"{len(stepped)} weight(s) stepped down")
    acc = _refund(runner, ladder, rows, acc, min_cos, max_abs)
    report.final = acc
    report.met = misses(acc, target, max_abs_error) <= 1
    report.tensors = [rows[c.node_id] for c in choices]
    report.runs = runner.runs
    return ladder.chosen(), report


HELD_OUT_MARGIN = 0.8
"""The guard steps and refunds against this share of the allowed 1 - cosine (and max abs
error), and reports `met` against the whole allowance: where it stops, the calibration
feeds pass just, and other inputs may not. An SVTR-style recogniser calibrated on four
feeds at 0.9995, stepped until they passed (0.99955), measured 0.9989 on one of 12
held-out inputs; aiming at 0.8 of the allowance, 0.99939-0.99971."""

REFUND_BELOW = 0.9
"""A guard that met its targets with the worst output under this share of its allowance
(`misses`) steps weights back up (`_refund`): errors compound, so a round sized by the
first-order model overshoots where the excess was large (an anchor-free detector missing
by 38x landed at 0.44 after one round)."""

REFUND_AIM = 0.95
"""What a refund aims the first-order model at (a margin under 1, which it must measure)."""

REFUND_ROUNDS = 3
"""At most this many refunds are measured (each one run)."""


def _refund(runner: OutputRunner, ladder: _Ladder, rows: dict[int, TensorAccuracy],
            acc: list[OutputAccuracy], min_cos: float, max_abs: float | None
            ) -> list[OutputAccuracy]:
    """Step weights back up while the targets hold with room to spare (`REFUND_BELOW`),
    the ones that save the most bytes per accuracy lost first; a refund that misses when
    measured is undone. The outputs' accuracy at the rungs kept."""
    aim = REFUND_AIM
    for _ in range(REFUND_ROUNDS):
        missed = misses(acc, min_cos, max_abs)
        if missed > REFUND_BELOW:
            break
        before = ladder.snapshot()
        raised = ladder.raise_(missed, aim)
        if not raised:
            break
        trial = runner.measure(ladder.chosen(), f"{len(raised)} weight(s) stepped back up")
        if misses(trial, min_cos, max_abs) > 1:
            ladder.restore(before)
            aim = (missed + aim) / 2  # the model was optimistic: half as far next time
            continue
        worst = min(a.cosine for a in acc)
        for node_id in raised:
            _note_step(rows[node_id], ladder.current[node_id], worst)
        acc = trial
    return acc


class _Ladder:
    """Each tensor's current rung (a choice, or None at full precision) and its measured
    share of the outputs' error at its proposed encoding (module doc)."""

    def __init__(self, graph: Graph, choices: Sequence[WeightChoice]):
        self.graph, self.users = graph, graph.users()
        self.proposed = {c.node_id: c for c in choices}
        self.current: dict[int, WeightChoice | None] = dict(self.proposed)
        self.share: dict[int, float] = {}
        self._below: dict[tuple[int, str], WeightChoice | None] = {}  # rungs, once read
        self.above: dict[int, list[WeightChoice]] = {}  # the rungs each tensor stepped from
        self.step_scale = 0.0  # the shares' scale in the last step down

    def chosen(self) -> list[WeightChoice]:
        return [c for c in self.current.values() if c is not None]

    def can_step(self) -> bool:
        return any(c is not None for c in self.current.values())

    def step(self, missed: float) -> list[int]:
        """Step down the rungs that buy the most per byte until their gains cover the
        excess of `missed` (the measured `misses`) over 1, at least one; the ids of the
        tensors stepped (once each). The shares are first scaled to add up to `missed`: the
        first-order model's shares of the error measured now. A tensor stepped may step
        again in the same round when its next rung still buys more per byte than the
        others' (one rung each could cover less than the excess: Q8_0 -> q9_0 buys 3/4 of
        a share, and a detector missing by 38x needs its sensitive layers further down).
        Where `missed` is large, the round covers it down to its square root only (module
        doc)."""
        scale = self.step_scale = self._scale(missed)
        options = [self._option(node_id, now, scale)
                   for node_id, now in self.current.items() if now is not None]
        heapq.heapify(options)
        stepped: dict[int, None] = {}
        covered = 0.0
        goal = max(1.0, missed ** 0.5)
        while options and (not stepped or covered < missed - goal):
            _, node_id, below, gain = heapq.heappop(options)
            now = self.current[node_id]
            assert now is not None  # options are of tensors with a rung to leave
            self.above.setdefault(node_id, []).append(now)
            self.current[node_id] = below
            stepped[node_id] = None
            covered += gain
            if below is not None:
                heapq.heappush(options, self._option(node_id, below, scale))
        return list(stepped)

    def _scale(self, missed: float) -> float:
        """What the shares at the current rungs are multiplied by to add up to `missed`."""
        total = sum(self._share_at(c) for c in self.current.values() if c is not None)
        return missed / total if total > 0 else 1.0

    def raise_(self, missed: float, aim: float) -> list[int]:
        """Step tensors back up the rungs they stepped down, the ones that save the most
        bytes per share of error added first, while the first-order model (shares scaled
        to add up to the measured `missed`, or as in the last step down where that is
        larger: errors compound more where they are larger) stays at most `aim`; the ids
        raised."""
        scale = max(self._scale(missed), self.step_scale)
        options = [self._raise_option(node_id, scale) for node_id in self.above]
        heapq.heapify(options)
        raised: dict[int, None] = {}
        predicted = missed
        while options:
            _, node_id, loss = heapq.heappop(options)
            if predicted + loss > aim:
                continue  # a cheaper loss elsewhere may still fit
            predicted += loss
            self.current[node_id] = self.above[node_id].pop()
            raised[node_id] = None
            if self.above[node_id]:
                heapq.heappush(options, self._raise_option(node_id, scale))
            else:
                del self.above[node_id]
        return list(raised)

    def _raise_option(self, node_id: int, scale: float) -> tuple[float, int, float]:
        """Raising `node_id` one rung as a heap entry: (minus the bytes it saves per share
        of error it adds, the id, that share)."""
        now, above = self.current[node_id], self.above[node_id][-1]
        loss = scale * (self._share_at(above) - (self._share_at(now) if now else 0.0))
        saved = (now.packed_bytes if now else above.f32_bytes) - above.packed_bytes
        return -saved / max(loss, 1e-12), node_id, loss

    def snapshot(self) -> tuple[dict[int, WeightChoice | None], dict[int, list[WeightChoice]]]:
        return dict(self.current), {k: list(v) for k, v in self.above.items()}

    def restore(self, state: tuple[dict[int, WeightChoice | None],
                                   dict[int, list[WeightChoice]]]) -> None:
        self.current, self.above = dict(state[0]), {k: list(v) for k, v in state[1].items()}

    def _option(self, node_id: int, now: WeightChoice, scale: float
                ) -> tuple[float, int, WeightChoice | None, float]:
        """Stepping `node_id` down from `now` as a heap entry: (minus its gain per byte
        added, the id, the rung below, its gain)."""
        key = (node_id, now.label)
        if key not in self._below:
            self._below[key] = next_rung(self.graph, now, self.users)
        below = self._below[key]
        gain = scale * (self._share_at(now) - (self._share_at(below) if below else 0.0))
        cost = (below.packed_bytes if below else now.f32_bytes) - now.packed_bytes
        return -gain / max(cost, 1), node_id, below, gain

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
    if row.encoding == row.proposed and row.packed_bytes == row.proposed_bytes:
        row.reason = ""  # stepped back up to where it was proposed
        return
    row.reason = (f"stepped to {row.encoding} (alone: cosine {row.cosine:.6f}, max abs "
                  f"{row.max_abs:.3g}; {row.packed_bytes - row.proposed_bytes:+,} bytes); with "
                  f"it encoded as proposed the worst output cosine was {worst:.6f}")
    log.info("guard: %s %s", row.name, row.reason)


def fewest_kept(count: int, measure: Callable[[int], list[OutputAccuracy]], target: float
                ) -> tuple[int, list[OutputAccuracy]]:
    """The smallest k in 1..count for which `measure(k)` (the outputs with the first k of a
    ranking, most harmful first, kept f32) meets the targets, by bisection, and its
    accuracy, given that k = 0 misses them and k = count meets them (not measured again):
    the fast plan's int8 and bf16 parts."""
    low, high = 1, count
    best: list[OutputAccuracy] = []
    while low < high:
        mid = (low + high) // 2
        result = measure(mid)
        if misses(result, target) <= 1:
            high, best = mid, result
        else:
            low = mid + 1
    return high, best
