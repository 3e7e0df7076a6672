"""Where a run's time goes: per op type and per node, measured over repeated runs.

`profile_ops(compiled, feeds, repeat)` runs the graph `repeat` times with a clock around
each step and keeps each step's median, so one slow run (a page fault, another process)
does not decide the ranking.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Mapping

from rlx.ir.graph import Node
from rlx.runtime.session import CompiledGraph

__all__ = ["NodeTime", "OpProfile", "OpTypeTime", "profile_ops"]


@dataclass(frozen=True)
class NodeTime:
    label: str  # the node's name and op, as errors print it
    op: str  # the op type, with its kind where it has one (`Unary(relu)`)
    seconds: float  # median over the runs


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
    nodes: tuple[NodeTime, ...]  # in run order

    @property
    def total_seconds(self) -> float:
        return sum(n.seconds for n in self.nodes)

    def by_op_type(self) -> list[OpTypeTime]:
        """Op types (with their kind: `Binary(add)`, `Unary(relu)`), slowest first."""
        seconds: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        for n in self.nodes:
            seconds[n.op] += n.seconds
            counts[n.op] += 1
        rows = [OpTypeTime(t, counts[t], s) for t, s in seconds.items()]
        return sorted(rows, key=lambda r: -r.seconds)

    def slowest(self, k: int = 10) -> list[NodeTime]:
        return sorted(self.nodes, key=lambda n: -n.seconds)[:k]


def profile_ops(compiled: CompiledGraph, feeds: Mapping[str, Any], repeat: int = 10) -> OpProfile:
    """Run `repeat` times (after one warm-up run) and return each step's median time."""
    compiled.run(feeds)
    per_step: list[list[float]] = [[] for _ in compiled.steps]
    for _ in range(repeat):
        _, seconds = compiled.run_timed(feeds)
        for times, s in zip(per_step, seconds):
            times.append(s)
    nodes = tuple(NodeTime(node.label, _describe(node), statistics.median(times))
                  for node, times in zip(compiled.steps, per_step))
    return OpProfile(repeat, nodes)


def _describe(node: Node) -> str:
    """The op type, with its kind where the type alone says little (`Unary(relu)`)."""
    op = node.op
    kind = getattr(op, "kind", None) or getattr(op, "op", None)
    name = type(op).__name__
    return f"{name}({getattr(kind, 'value', kind)})" if kind is not None else name
