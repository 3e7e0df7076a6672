"""Timing engine candidates against each other in one process while the machine's load
changes under them (`engine="auto"`).

Candidates take turns: a turn opens, when the previous turn was another candidate's, with a
wait until the process's other threads are parked (`settle`, `rlx.engines.cores.settle`:
numpy's BLAS workers spin for about 0.1 s after its calls, and OpenVINO timed beside them
ran up to 2.6x slower than in a process of its own), then `LEAD_IN` untimed calls (worker
threads wake), then timed calls for `TURN_S` (at least `MIN_CALLS` when they fit in it:
`fewest_calls`); the turn's time is the median of its calls.
Threads still running when a wait runs out (0.25 s: threads of the caller's own, or
OpenVINO's workers on a machine loaded far past its cores) are not waited for again. A
round is one turn of each candidate; the order is reversed every other round, so rounds
come in pairs (A, B then B, A). What is compared is never a candidate's own times, which
follow the load, but its per-round ratio to the reference (the fastest of the first
pair): a burst that slows both turns of a round cancels in their ratio, one that slows a
single turn makes one outlying ratio, which the median leaves out, and a load rising or
falling during the timing puts the candidate after the reference in half of the rounds
and before it in the other half, so the median of the ratios, taken over whole pairs,
sits between the two biases. A candidate's estimate is its median ratio times the
reference's median turn.

Rounds go on, a pair at a time, until the pick (`pick`: the lowest estimate, a tie within
`TIE` won by the earliest of `preference`) is the same on the first and the second half
of the pairs, at least `MIN_PAIRS` of them: the load changing during the timing shows as
halves that disagree, and then the timing goes on until `budget` seconds. In the first
pair of rounds a candidate whose lead-in call takes over twice the fastest turn so far plus
the longest wait seen added to a call, and over `TURN_S` (a single call is no measure
beside other work: `lead_in_limit`), stands on that call, and one over twice the fastest
in both rounds of the pair is not timed further (the numpy reference on a large model
would spend seconds); the reference is the fastest over that pair.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rlx.engines import cores

__all__ = ["measure", "pick", "lead_in_limit", "fewest_calls", "TURN_S", "LEAD_IN", "RUNS",
           "MIN_CALLS", "MIN_PAIRS", "TIE"]

TURN_S = 0.03  # seconds of timed calls in each candidate's turn
LEAD_IN = 1  # untimed calls opening each turn
RUNS = 30  # timed calls in one turn, at most
MIN_CALLS = 3  # timed calls in a fast candidate's turn, at least (`fewest_calls`)
MIN_PAIRS = 3  # pairs of rounds before the halves can agree
TIE = 1.05  # estimates within 5% of the lowest are a tie, settled by preference

Round = dict[str, float]


def measure(runners: Mapping[str, Any], feeds: Mapping[str, np.ndarray], outputs: list[str],
            clock: Callable[[], float], budget: float, preference: Sequence[str] = (),
            settle: Callable[[frozenset[str]], set[str]] = cores.settle) -> dict[str, float]:
    """Seconds per run of each (warmed-up) runner, in the order given (the first is timed
    first), from paired rounds of turns (module doc)."""
    rounds: list[Round] = []
    active = list(runners)
    start = clock()
    settler, waits = _Settler(settle), [0.0]
    while True:
        order = active if len(rounds) % 2 == 0 else active[::-1]
        floor = min(rounds[0].values()) if len(rounds) == 1 else math.inf
        rounds.append(_round(runners, order, feeds, outputs, clock, settler, waits,
                             floor=floor if len(rounds) < 2 else None))
        if len(rounds) == 2:
            ref = min(active, key=lambda n: rounds[0][n] * rounds[1][n])
            active = [n for n in active if n == ref or _within_twice(rounds[:2], n)]
        if len(rounds) % 2 == 0 and (len(active) < 2 or clock() - start > budget
                                     or _settled(rounds, active, ref, preference)):
            return {**_first_pair(rounds), **_estimates(rounds, active, ref)}


class _Settler:
    """`settle` before a turn whose candidate differs from the last one timed (a candidate
    is not disturbed by its own threads), leaving out the threads a wait ran out on."""

    def __init__(self, settle: Callable[[frozenset[str]], set[str]]):
        self.settle, self.last, self.ignore = settle, "", frozenset[str]()

    def before(self, name: str) -> None:
        if name != self.last:
            self.ignore |= self.settle(self.ignore)
        self.last = name


def _round(runners: Mapping[str, Any], order: list[str], feeds: Mapping[str, np.ndarray],
           outputs: list[str], clock: Callable[[], float], settler: _Settler,
           waits: list[float], floor: float | None) -> Round:
    """One turn of each in `order`; in the first pair (`floor`: the fastest turn before
    this round), a lead-in call over `lead_in_limit` stands as the turn. `waits` gathers
    each turn's longest call less its median: what the scheduler was seen to add."""
    times: Round = {}
    for name in order:
        settler.before(name)
        limit = lead_in_limit(min([floor, *times.values()]), max(waits)) \
            if floor is not None else math.inf
        calls = _turn(runners[name], feeds, outputs, clock, limit)
        times[name] = statistics.median(calls)
        waits.append(max(calls) - times[name])
    return times


def lead_in_limit(fastest: float, wait: float = 0.0) -> float:
    """The lead-in call over which, in the first pair, a candidate is not timed further:
    twice the `fastest` turn so far plus the longest `wait` the scheduler was seen to add
    to a call, and at least `TURN_S`. A single call is no measure on a busy machine:
    beside two CPU-bound processes one call in a few dozen waited a scheduler slice (4-52
    ms at load 7), often the first after another candidate's turn, and a 0.1 ms
    onnxruntime that stood on such a call (4.3-36 ms) lost to numpy (0.17 ms). Below
    `TURN_S` the timed calls it would spare cost at most `TURN_S`."""
    return max(2 * fastest + wait, TURN_S)


def _within_twice(pair: list[Round], name: str) -> bool:
    """Whether `name` was within twice the fastest turn of either round of the first pair
    (a burst during one turn does not drop a candidate)."""
    return any(r[name] <= 2 * min(r.values()) for r in pair)


def _first_pair(rounds: list[Round]) -> dict[str, float]:
    """The geometric mean of each candidate's two first turns (all a dropped one has)."""
    return {n: math.sqrt(rounds[0][n] * rounds[1][n]) for n in rounds[0]}


def _turn(runner: Any, feeds: Mapping[str, np.ndarray], outputs: list[str],
          clock: Callable[[], float], limit: float) -> list[float]:
    """One candidate's turn: `LEAD_IN` untimed calls, then timed calls for `TURN_S` (at
    least `fewest_calls`, at most `RUNS`). A lead-in call over `limit` stands as the
    turn's one time."""
    lead = 0.0
    for _ in range(LEAD_IN):
        t = clock()
        runner.run(dict(feeds), outputs)
        lead = clock() - t
        if lead > limit:
            return [lead]
    times: list[float] = []
    fewest = fewest_calls(lead)
    while len(times) < fewest or (sum(times) < TURN_S and len(times) < RUNS):
        t = clock()
        runner.run(dict(feeds), outputs)
        times.append(clock() - t)
    return times


def fewest_calls(lead: float) -> int:
    """The timed calls a turn takes at least after a lead-in call of `lead` seconds:
    `MIN_CALLS` when that many such calls fit in `TURN_S`, else one (a slow candidate
    costs no more than before). A turn of a fast candidate whose first timed call waited
    a scheduler slice over `TURN_S` (beside two CPU-bound processes, slices of 10-42 ms
    hit one call in a few dozen) would otherwise end on that call; its median leaves it
    out."""
    return MIN_CALLS if lead * MIN_CALLS < TURN_S else 1


def _estimates(rounds: list[Round], active: list[str], ref: str) -> dict[str, float]:
    """The reference's median turn times each candidate's median ratio to it."""
    scale = statistics.median(r[ref] for r in rounds)
    return {name: scale * _ratio(rounds, name, ref) for name in active}


def _ratio(rounds: list[Round], name: str, ref: str) -> float:
    """Median over the rounds of `name`'s time over `ref`'s (an even count, half of them
    in each order)."""
    return statistics.median(r[name] / r[ref] for r in rounds)


def _settled(rounds: list[Round], active: list[str], ref: str,
             preference: Sequence[str]) -> bool:
    """At least `MIN_PAIRS` pairs, and the first and the second half of them pick alike."""
    pairs = len(rounds) // 2
    if pairs < MIN_PAIRS:
        return False
    half = 2 * (pairs // 2)
    picks = {pick(_estimates(part, active, ref), preference)
             for part in (rounds, rounds[:half], rounds[half:])}
    return len(picks) == 1


def pick(measured: Mapping[str, float], preference: Sequence[str] = ()) -> str:
    """The lowest, unless one earlier in `preference` is within `TIE` of it."""
    best = min(measured, key=measured.__getitem__)
    close = [n for n in preference if n in measured and measured[n] <= TIE * measured[best]]
    return close[0] if close else best
