"""Where a run's time goes: per op type and per node, subgraphs included.

`profile_ops(compiled, feeds, repeat)` runs the graph `repeat` times with a clock around
every step of every graph that runs (an If branch, a Loop body at each iteration) and
keeps, per node, the median over the runs of its time in that run. Times are *exclusive*:
a control-flow node's time is its own overhead, its subgraph's nodes are listed apart, so
the per-type table adds up to the whole run. The median keeps one slow run (a page fault,
another process) from deciding the ranking.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rlx.ir.naming import node_title, op_type
from rlx.runtime.session import STEP_TIMER, CompiledGraph

__all__ = ["NodeTime", "OpProfile", "OpTypeTime", "profile_ops"]


@dataclass(frozen=True)
class NodeTime:
    label: str  # the node's ONNX name (else its own, else %id), after its subgraph's name
    op: str  # the ONNX op type it computes (`Add`, `Relu`, `MatMul (Q8_0)`)
    seconds: float  # exclusive time, median over the runs
    ir_label: str = ""  # the IR node as errors print it (`%3 (Binary)`)


@dataclass(frozen=True)
class OpTypeTime:
    op_type: str
    count: int  # nodes of this type
    seconds: float  # sum of their medians

    def share(self, total: float) -> float:
        return self.seconds / total if total else 0.0


@dataclass(frozen=True)
class OpProfile:
    runs: int
    nodes: tuple[NodeTime, ...]  # in the order they first ran

    @property
    def total_seconds(self) -> float:
        return sum(n.seconds for n in self.nodes)

    def by_op_type(self) -> list[OpTypeTime]:
        """ONNX op types (`Add`, `Relu`), slowest first."""
        seconds: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        for n in self.nodes:
            seconds[n.op] += n.seconds
            counts[n.op] += 1
        rows = [OpTypeTime(t, counts[t], s) for t, s in seconds.items()]
        return sorted(rows, key=lambda r: -r.seconds)

    def slowest(self, k: int = 10) -> list[NodeTime]:
        return sorted(self.nodes, key=lambda n: -n.seconds)[:k]


class _StepTimer:
    """Installed in `STEP_TIMER` while a run is profiled: sums each step's exclusive
    seconds, keyed by (compiled graph, step index). Timed loops are built once per graph
    and kept across runs, so building them is not timed as the enclosing step's work."""

    def __init__(self) -> None:
        self.seconds: dict[tuple[CompiledGraph, int], float] = defaultdict(float)
        self._nested = [0.0]  # per open step: time spent in the steps it ran
        self._loops: dict[int, list[tuple]] = {}

    def loop(self, compiled: CompiledGraph) -> list[tuple]:
        loop = self._loops.get(id(compiled))
        if loop is None:
            loop = self._loops[id(compiled)] = [
                (functools.partial(self._timed, (compiled, i), run), *rest)
                for i, (run, *rest) in enumerate(compiled.loop)]
        return loop

    def _timed(self, key: tuple[CompiledGraph, int], run: Callable, *args: Any) -> Any:
        self._nested.append(0.0)
        start = time.perf_counter()
        try:
            return run(*args)
        finally:
            spent = time.perf_counter() - start
            self.seconds[key] += spent - self._nested.pop()
            self._nested[-1] += spent


def profile_ops(compiled: CompiledGraph, feeds: Mapping[str, Any], repeat: int = 10) -> OpProfile:
    """Run `repeat` times (after a warm-up run) and return each node's median time."""
    timer = _StepTimer()
    runs = []
    for i in range(repeat + 1):  # the first run warms up caches, the timer's included
        timer.seconds = defaultdict(float)
        token = STEP_TIMER.set(timer)
        try:
            compiled.run(feeds)
        finally:
            STEP_TIMER.reset(token)
        if i:
            runs.append(timer.seconds)
    order = list(dict.fromkeys(key for run in runs for key in run))  # first-run order
    nodes = tuple(
        NodeTime(_label(compiled, *key), op_type(key[0].steps[key[1]].op),
                 statistics.median(run.get(key, 0.0) for run in runs),
                 key[0].steps[key[1]].label)
        for key in order)
    return OpProfile(repeat, nodes)


def _label(top: CompiledGraph, graph: CompiledGraph, index: int) -> str:
    label = node_title(graph.steps[index])
    return label if graph is top else f"{graph.graph.name} / {label}"
