"""auto's timing in paired rounds of turns, on a fake clock whose load changes under it:
turns alternate in reversed order, a burst or a drift of the load cancels in the paired
ratios, and the timing stops once its halves agree (or at the budget)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rlx.engines import turns

PREFERENCE = ("onnxruntime", "openvino", "numpy")


class _Machine:
    """A fake clock; a call of a runner advances it by the runner's cost at the current
    load (`cost(load)`), and a `spinner` leaves `spin` seconds charged to the next call
    of another runner (its workers still spinning when the other's turn starts). A runner
    that `lingers` keeps threads running that long after each call (numpy's BLAS
    workers), and another's call meanwhile costs `beside` times as much; `settle` waits
    them out, or, with `parks` False, runs out on a thread "7" that never parks. Beside
    CPU-bound processes, a runner's first call after another's waits `slice` seconds
    more (the scheduler gives the core to a neighbour), and the calls in `hits` (runner,
    its n-th call from 0) wait as many seconds more."""

    def __init__(self, load: Callable[[float], float], parks: bool = True):
        self.now, self.load, self.turns, self.parks = 0.0, load, [], parks
        self.settles: list[frozenset[str]] = []  # what each wait was told to leave out
        self.owed: tuple[str, float] = ("", 0.0)
        self.busy: tuple[str, float] = ("", 0.0)  # whose threads run, until when
        self.slice = 0.0
        self.hits: dict[tuple[str, int], float] = {}

    def runner(self, name: str, cost: Callable[[float], float], spin: float = 0.0,
               linger: float = 0.0, beside: float = 1.0):
        machine = self

        class Runner:
            def run(self, feeds, outputs):
                if machine.turns and machine.turns[-1] != name:
                    machine.now += machine.slice
                machine.now += machine.hits.get((name, machine.turns.count(name)), 0.0)
                machine.turns.append(name)
                by, owed = machine.owed
                if by != name:  # another's spinning is paid by this call
                    machine.now, machine.owed = machine.now + owed, ("", 0.0)
                who, until = machine.busy
                shared = beside if who not in ("", name) and machine.now < until else 1.0
                machine.now += shared * cost(machine.load(machine.now))
                if spin:
                    machine.owed = (name, spin)
                if linger:
                    machine.busy = (name, machine.now + linger)

        return Runner()

    def settle(self, ignore: frozenset[str]) -> set[str]:
        self.settles.append(ignore)
        if self.parks or "7" in ignore:
            self.now = max(self.now, self.busy[1])
            return set()
        self.now += 0.25
        return {"7"}

    def measure(self, runners: dict, budget: float = 1.0,
                settle: Callable[[frozenset[str]], set[str]] | None = None) -> dict[str, float]:
        return turns.measure(runners, {}, [], lambda: self.now, budget, PREFERENCE,
                             settle=settle or self.settle)


def _scaled(seconds: float) -> Callable[[float], float]:
    return lambda load: seconds * load


def _blocks(names: list[str]) -> list[tuple[str, int]]:
    """Consecutive calls of one runner as (name, calls)."""
    out: list[tuple[str, int]] = []
    for name in names:
        if out and out[-1][0] == name:
            out[-1] = (name, out[-1][1] + 1)
        else:
            out.append((name, 1))
    return out


def _rounds(names: list[str]) -> int:
    """Rounds of two candidates in reversed order every other round: A B | B A | A B ...,
    a block of one candidate's calls per round, and one more."""
    return len(_blocks(names)) - 1


def test_rounds_alternate_their_order_and_a_slow_candidate_drops_out():
    m = _Machine(lambda t: 1.0)
    costs = {"onnxruntime": 0.004, "openvino": 0.006, "numpy": 0.060}
    measured = m.measure({n: m.runner(n, _scaled(c)) for n, c in costs.items()})
    blocks = _blocks(m.turns)
    # rounds meet in one block of two turns of one candidate: ... ort | ort, ov ...
    assert [name for name, _ in blocks[:6]] == ["onnxruntime", "openvino", "numpy", "openvino",
                                                "onnxruntime", "openvino"]
    assert m.turns.count("numpy") == 2  # its lead-ins, over twice the fastest and TURN_S,
    # are its times
    for name, calls in [blocks[0], blocks[1], blocks[3]]:  # single turns
        timed = calls - turns.LEAD_IN
        assert timed >= 1 and (timed - 1) * costs[name] < turns.TURN_S
    assert measured == pytest.approx(costs)


def test_a_clear_steady_result_stops_after_the_minimum_pairs():
    m = _Machine(lambda t: 1.0)
    m.measure({"onnxruntime": m.runner("onnxruntime", _scaled(0.002)),
               "openvino": m.runner("openvino", _scaled(0.003))})
    assert _rounds(m.turns) == 2 * turns.MIN_PAIRS
    assert m.now < 0.5


def test_a_rising_load_does_not_favour_the_candidate_timed_first():
    """The load doubles every half second: timed after onnxruntime in every round,
    OpenVINO (10% cheaper) would look as dear; in pairs of rounds it is timed first half
    of the time, and its ratio comes out at the true 0.9."""
    m = _Machine(lambda t: 1.0 + 2.0 * t)
    measured = m.measure({"onnxruntime": m.runner("onnxruntime", _scaled(0.010)),
                          "openvino": m.runner("openvino", _scaled(0.009))})
    assert measured["openvino"] / measured["onnxruntime"] == pytest.approx(0.9, rel=0.02)
    assert turns.pick(measured, PREFERENCE) == "openvino"


def test_bursts_that_hit_single_turns_cancel_in_the_median_of_pairs():
    """A 5x burst of 80 ms every 400 ms slows some turns and not their partners."""
    m = _Machine(lambda t: 5.0 if t % 0.4 < 0.08 else 1.0)
    measured = m.measure({"onnxruntime": m.runner("onnxruntime", _scaled(0.010)),
                          "openvino": m.runner("openvino", _scaled(0.008))})
    assert measured["openvino"] / measured["onnxruntime"] == pytest.approx(0.8, rel=0.05)
    assert turns.pick(measured, PREFERENCE) == "openvino"


def test_a_load_that_changes_the_winner_keeps_the_timing_going():
    """onnxruntime is faster quiet and slower loaded (its cost grows with the square of the
    load); the load doubles a fifth of the way through the budget: the halves disagree,
    so the timing goes on past the minimum, and no further than one pair of rounds past
    the budget, and the pick is the winner under the load that lasts."""
    m = _Machine(lambda t: 2.0 if t > 0.2 else 1.0)
    measured = m.measure({"onnxruntime": m.runner("onnxruntime", lambda x: 0.008 * x * x),
                          "openvino": m.runner("openvino", _scaled(0.010))}, budget=1.0)
    assert _rounds(m.turns) > 2 * turns.MIN_PAIRS
    assert m.now <= 1.0 + 2 * 2 * (turns.TURN_S + 2 * 0.032)
    assert turns.pick(measured, PREFERENCE) == "openvino"


def test_one_call_over_the_budget_still_times_one_pair():
    m = _Machine(lambda t: 1.0)
    m.measure({"onnxruntime": m.runner("onnxruntime", _scaled(1.0)),
               "openvino": m.runner("openvino", _scaled(1.0))}, budget=1.0)
    assert m.turns.count("onnxruntime") == m.turns.count("openvino") == 2 * (turns.LEAD_IN + 1)


def test_the_lead_in_keeps_a_spinning_neighbour_out_of_the_timings():
    """A candidate whose workers keep spinning after its calls slows the next call of
    another one: timed call by call that made the cheaper candidate look dearer; the
    turn's untimed lead-in absorbs it, so the choice follows the real costs."""
    m = _Machine(lambda t: 1.0)
    costs = {"onnxruntime": 0.003, "openvino": 0.002}
    measured = m.measure({"onnxruntime": m.runner("onnxruntime", _scaled(0.003), spin=0.004),
                          "openvino": m.runner("openvino", _scaled(0.002))})
    assert measured == pytest.approx(costs)
    assert turns.pick(measured, PREFERENCE) == "openvino"


def _tiny_beside_burners(m: _Machine) -> dict:
    """A small LSTM (silero-vad, 2 threads) beside two CPU-bound processes: onnxruntime
    0.10 ms a call, numpy 0.16, OpenVINO 0.27, and the first call after another
    candidate's turn waits a 4 ms scheduler slice."""
    m.slice = 0.004
    return {"numpy": m.runner("numpy", _scaled(0.00016)),
            "openvino": m.runner("openvino", _scaled(0.00027)),
            "onnxruntime": m.runner("onnxruntime", _scaled(0.00010))}


def test_a_lead_in_that_waited_a_scheduler_slice_is_not_a_turns_time(monkeypatch):
    """Standing on its lead-in whenever that call took over twice the fastest turn,
    onnxruntime, timed after another candidate, read 4 ms (and lost to numpy on the
    machine) when the builds and waits of a busy machine had spent the budget (one pair
    of rounds); under `TURN_S` a lead-in only opens the turn, and the estimates are each
    engine's cost."""
    m = _Machine(lambda t: 1.0)
    monkeypatch.setattr(turns, "lead_in_limit", lambda fastest, wait: 2 * fastest)
    assert m.measure(_tiny_beside_burners(m), budget=0.0)["onnxruntime"] > 10 * 0.00010
    monkeypatch.undo()
    m = _Machine(lambda t: 1.0)
    measured = m.measure(_tiny_beside_burners(m), budget=0.0)
    assert measured == pytest.approx({"numpy": 0.00016, "openvino": 0.00027,
                                      "onnxruntime": 0.00010})
    assert turns.pick(measured, PREFERENCE) == "onnxruntime"


def test_a_fast_candidates_turn_outlasts_one_call_that_waited_over_a_turn(monkeypatch):
    """onnxruntime's first timed call after its lead-in waits a 35 ms slice: a turn that
    ended at `TURN_S` stood on that call (onnxruntime at 16 ms for its 0.1 in one pair of
    rounds on the machine); with `MIN_CALLS` the turn's median leaves it out."""
    def timed(min_calls: int) -> dict[str, float]:
        monkeypatch.setattr(turns, "MIN_CALLS", min_calls)
        m = _Machine(lambda t: 1.0)
        runners = _tiny_beside_burners(m)
        m.slice, m.hits = 0.0, {("onnxruntime", turns.LEAD_IN): 0.035}
        return m.measure(runners, budget=0.0)

    assert timed(1)["onnxruntime"] > 10 * 0.00010
    measured = timed(3)
    assert measured == pytest.approx({"numpy": 0.00016, "openvino": 0.00027,
                                      "onnxruntime": 0.00010})
    assert turns.pick(measured, PREFERENCE) == "onnxruntime"


@pytest.mark.parametrize(("lead", "calls"), [
    (0.0001, turns.MIN_CALLS), (0.0099, turns.MIN_CALLS), (0.0101, 1), (0.5, 1)])
def test_only_a_fast_candidate_takes_several_timed_calls_a_turn(lead, calls):
    assert turns.fewest_calls(lead) == calls


def test_a_lead_in_that_waited_longer_than_a_turn_is_not_a_turns_time(monkeypatch):
    """At load 7 beside two CPU-bound processes slices reached 35-52 ms, over `TURN_S`:
    numpy's turn shows one, and onnxruntime's lead-in, which waits 35 ms, is not taken
    for its cost (over `TURN_S` alone it stood: 35.8 ms for a 0.1 ms onnxruntime)."""
    def timed(limit) -> dict[str, float]:
        monkeypatch.setattr(turns, "lead_in_limit", limit)
        m = _Machine(lambda t: 1.0)
        runners = _tiny_beside_burners(m)
        m.slice, m.hits = 0.0, {("numpy", 5): 0.037, ("onnxruntime", 0): 0.035}
        return m.measure(runners, budget=0.0)

    rule = turns.lead_in_limit
    assert timed(lambda fastest, wait: max(2 * fastest, turns.TURN_S))["onnxruntime"] > 0.001
    assert timed(rule) == pytest.approx({"numpy": 0.00016, "openvino": 0.00027,
                                         "onnxruntime": 0.00010})


@pytest.mark.parametrize(("fastest", "wait", "limit"), [
    (0.0001, 0.0, turns.TURN_S), (turns.TURN_S / 2, 0.0, turns.TURN_S), (0.05, 0.0, 0.1),
    (0.0001, 0.05, 0.0502), (0.05, 0.05, 0.15)])
def test_a_lead_in_stands_only_over_twice_the_fastest_a_wait_and_a_turn(fastest, wait, limit):
    assert turns.lead_in_limit(fastest, wait) == pytest.approx(limit)


def _beside_blas(m: _Machine) -> dict:
    """OpenVINO 25% faster than onnxruntime alone; numpy's workers run 0.1 s after each of
    its calls, and beside them OpenVINO is 2.6x as slow, onnxruntime 1.2x (measured on a
    BERT encoder, 2 threads on 2 cores)."""
    return {"onnxruntime": m.runner("onnxruntime", _scaled(0.004), beside=1.2),
            "openvino": m.runner("openvino", _scaled(0.003), beside=2.6),
            "numpy": m.runner("numpy", _scaled(0.006), linger=0.1)}


def test_turns_wait_until_another_candidates_threads_are_parked():
    """Timed beside numpy's lingering workers OpenVINO looked dearer than onnxruntime; with
    a wait before each turn of a candidate other than the last one timed, the estimates
    are each engine's own cost."""
    unsettled = _Machine(lambda t: 1.0)
    measured = unsettled.measure(_beside_blas(unsettled), settle=lambda ignore: set())
    assert turns.pick(measured, PREFERENCE) == "onnxruntime"
    m = _Machine(lambda t: 1.0)
    measured = m.measure(_beside_blas(m))
    assert measured == pytest.approx({"onnxruntime": 0.004, "openvino": 0.003, "numpy": 0.006})
    assert turns.pick(measured, PREFERENCE) == "openvino"
    assert len(m.settles) == len(_blocks(m.turns))  # one wait per turn: a turn is one block


def test_a_thread_that_never_parks_is_not_waited_for_again():
    """A thread of the caller's own that keeps running makes the first wait run out; later
    waits leave it out, and still wait for numpy's workers."""
    m = _Machine(lambda t: 1.0, parks=False)
    measured = m.measure(_beside_blas(m))
    assert m.settles[0] == frozenset() and all(s == {"7"} for s in m.settles[1:])
    assert turns.pick(measured, PREFERENCE) == "openvino"


@pytest.mark.parametrize(("measured", "chosen"), [
    ({"openvino": 17.52, "onnxruntime": 17.90, "numpy": 44.8}, "onnxruntime"),  # a tie
    ({"openvino": 46.1, "onnxruntime": 83.1, "numpy": 531.9}, "openvino"),
    ({"numpy": 0.010, "onnxruntime": 0.0104}, "onnxruntime"),
    ({"numpy": 0.010, "onnxruntime": 0.0200}, "numpy"),
])
def test_the_lowest_wins_and_a_tie_goes_to_the_preferred_engine(measured, chosen):
    assert turns.pick(measured, PREFERENCE) == chosen
