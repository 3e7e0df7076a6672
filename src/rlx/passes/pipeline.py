"""The pass contract, and the runner that sequences passes by name.

A pass is `Graph -> (Graph, rewrites)`: it builds a new graph and never mutates its input,
gives back the very same graph object when it changed nothing, and counts what it did
(nodes folded, matmuls packed, ...). A pass that needs more than the graph (weights, an
encoding) is bound to it first (`functools.partial`, a closure) and is then a `Pass`. A
pass with more to report than a count (the weight-encoding stage's choices) returns an
`Outcome` in its place: the runner keeps it, so the pass holds no state between calls.

`run_pipeline` runs a list of named `Step`s in order and sums each step's count under its
name, so a pass that runs twice (DCE after each clean-up) reports one total. When a step
raises, the error keeps its type (callers and exit codes still see a `BindingError` as a
`BindingError`) and its message says which pass failed and after which one. With `verify`
every step's output is checked with `rlx.ir.verify`, so a pass that builds a malformed graph
is named at once instead of surfacing passes later. It costs a walk of the graph per step,
so it is off unless asked for: per call, or for every pipeline run inside
`with verifying_passes():` (the test suite's autouse fixture, tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from rlx.errors import GraphError
from rlx.ir.graph import Graph
from rlx.ir.verification import verify as verify_graph

__all__ = ["Outcome", "Pass", "PipelineRun", "ReportingPass", "Step", "run_pipeline",
           "verifying_passes"]

log = logging.getLogger(__name__)
progress = logging.getLogger("rlx.progress")  # what a terminal shows while it runs

class Outcome(Protocol):
    """What a pass reports beyond its graph: `count` rewrites, and whatever else it carries."""

    @property
    def count(self) -> int: ...


Pass = Callable[[Graph], tuple[Graph, int]]
"""A graph pass: the new graph (the same object when unchanged) and how much it rewrote."""

ReportingPass = Callable[[Graph], tuple[Graph, Outcome]]
"""A pass that returns what it did as an `Outcome` (its count and more)."""


class PipelineRun(NamedTuple):
    """The last graph, the count per step name, and the `Outcome`s steps returned (by step
    name, in run order)."""

    graph: Graph
    counts: Counter[str]
    outcomes: dict[str, list[Outcome]]

_VERIFY: ContextVar[bool] = ContextVar("rlx_verify_passes", default=False)


@contextlib.contextmanager
def verifying_passes(on: bool = True) -> Iterator[None]:
    """Within the block (in this thread or task), every `run_pipeline` that is not told
    otherwise verifies the graph after each step: for test suites and debugging a pass."""
    token = _VERIFY.set(on)
    try:
        yield
    finally:
        _VERIFY.reset(token)


@dataclass(frozen=True)
class Step:
    """One named pass of a pipeline; `name` keys its count and names it in errors."""

    name: str
    run: Pass | ReportingPass


def run_pipeline(steps: Iterable[Step], graph: Graph, *,
                 verify: bool | None = None) -> PipelineRun:
    """Run `steps` in order on `graph`; returns (last graph, count per step name, outcomes).

    `verify=None` verifies inside `verifying_passes()` only.
    """
    if verify is None:
        verify = _VERIFY.get()
    counts: Counter[str] = Counter()
    outcomes: dict[str, list[Outcome]] = {}
    previous: str | None = None
    steps = list(steps)
    for number, step in enumerate(steps, 1):
        progress.debug("pass %d of %d: %s", number, len(steps), step.name,
                       extra={"progress": (number - 1, len(steps))})
        try:
            graph, result = step.run(graph)
            if verify:
                _verify(graph)
        except Exception as err:
            renamed = _renamed(err, f"pass {step.name} failed{_after(previous)}")
            if renamed is err:
                raise
            raise renamed from err
        if not isinstance(result, int):
            outcomes.setdefault(step.name, []).append(result)
        count = result if isinstance(result, int) else result.count
        counts[step.name] += count
        log.debug("%s: %d rewrite(s)", step.name, count)
        previous = step.name
    return PipelineRun(graph, counts, outcomes)


def _verify(graph: Graph) -> None:
    try:
        verify_graph(graph)
    except GraphError as err:
        raise type(err)(f"it left an invalid graph: {err}") from err


def _after(previous: str | None) -> str:
    return f" (after {previous})" if previous else " (the first pass)"


def _renamed(err: Exception, where: str) -> Exception:
    """`err` again, of the same type and attributes, its message prefixed with `where`
    (or `err` itself, noted, when its type cannot be copied)."""
    try:
        renamed = copy.copy(err)
    except Exception:  # an exception type whose constructor its args do not fit
        log.error("%s", where)
        return err
    renamed.args = (f"{where}: {err}",)
    return renamed
