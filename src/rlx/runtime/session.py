"""`Session` and `CompiledGraph`: run a graph on the CPU with the numpy kernels.

Compiling resolves every node to a step once, binds constants, and plans when each value
dies, so a run is one tight loop over steps that frees values after their last use. A run
keeps all its state in local variables: one `CompiledGraph` may run from many threads.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from types import MethodType
from typing import Any

import numpy as np

from rlx.errors import GraphError, KernelError, RlxError, UnsupportedOpError
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.sources import Constant, Input, Param
from rlx.ir.shape import Shape
from rlx.ir.verification import verify
from rlx.kernels.registry import BUILDERS, KERNELS, SHARED_STEPS, has_kernel, load_kernels
from rlx.runtime.feeds import FeedChecker
from rlx.runtime.heap import keep_freed_memory, release_free_heap
from rlx.runtime.reuse import into as _into
from rlx.runtime.reuse import plan_reuse

__all__ = ["DEVICES", "STEP_TIMER", "Session", "CompiledGraph"]

DEVICES = ("cpu",)

STEP_TIMER: ContextVar[Any] = ContextVar("rlx_step_timer", default=None)
"""While set (by `rlx.runtime.profile`), every graph run in this context, subgraphs
included, runs `STEP_TIMER.get().loop(compiled)`: its steps wrapped in a clock."""


class Session:
    """Entry point of the runtime: `Session("cpu").compile(graph).run(feeds)`.

    `keep_heap`: compiling keeps the memory runs free for the next run (`rlx.runtime.heap`,
    process-wide, once); False leaves the C allocator as it is.
    """

    def __init__(self, device: str = "cpu", *, keep_heap: bool = True):
        if device not in DEVICES:
            raise GraphError(f"unknown device {device!r}; rlx runs on: {', '.join(DEVICES)}")
        self.device = device
        self.keep_heap = keep_heap

    def compile(self, graph: Graph) -> CompiledGraph:
        return CompiledGraph(graph, keep_heap=self.keep_heap)


class CompiledGraph:
    """A graph ready to run. `run(feeds)` returns the outputs in graph order."""

    def __init__(self, graph: Graph, *, nested: bool = False, keep_heap: bool = True):
        """`nested`: a subgraph of a graph being compiled, which has checked it already;
        `keep_heap`: as `Session`'s."""
        verify(graph)
        if not nested:
            _check_runnable(graph)
        if not nested and keep_heap:
            keep_freed_memory()  # once per process: no page faults for tensors freed last run
        self.graph = graph
        self._inputs = graph.inputs()
        self._input_ids = [n.id for n in self._inputs]
        self._feeds = FeedChecker(self._inputs)
        self._constants: dict[int, np.ndarray] = {}
        nodes: list[Node] = []
        runs: list[Callable] = []
        alike: dict[tuple, Callable] = {}  # the steps nodes share (`_resolve`)
        for node in graph.nodes():
            if isinstance(node.op, Constant):
                self._constants[node.id] = node.op.array(node.tensor_shape)
            elif not isinstance(node.op, Input):
                nodes.append(node)
                runs.append(_resolve(node, alike))
        self.steps: tuple[Node, ...] = tuple(nodes)
        """The nodes that run, in run order (Inputs and Constants are not steps)."""
        del nodes
        self.reuses: dict[int, int] = plan_reuse(graph, self.steps)
        """Node id -> the input position whose dying buffer that step writes its result
        into (elementwise steps after a fresh producer, `plan_reuse`)."""
        frees = _frees(graph, self.steps, keep=set(graph.outputs) | set(self._constants))
        alike.clear()  # now keyed by the wrapped step: the reusing steps share theirs too
        self._loop = [(_into(run, node, self.reuses[node.id], alike)
                       if node.id in self.reuses else run,
                       *_fetcher(node.inputs), node.id, free)
                      for node, run, free in zip(self.steps, runs, frees)]
        if not nested and keep_heap:
            release_free_heap()  # what compiling freed: its peak is not what it keeps

    @property
    def input_names(self) -> list[str]:
        return [n.source_name for n in self._inputs]

    @property
    def input_shapes(self) -> dict[str, Shape]:
        return {n.source_name: n.tensor_shape for n in self._inputs}

    @property
    def output_names(self) -> list[str]:
        return [self.graph.node(o).name or f"out{o}" for o in self.graph.outputs]

    def run(self, feeds: Mapping[str, Any]) -> list[np.ndarray]:
        """Check `feeds` against the graph's inputs, run, return outputs in graph order."""
        checked = self._feeds.by_name(feeds)
        return self._execute({n.id: checked[n.source_name] for n in self._inputs})

    def call(self, *args: np.ndarray) -> list[np.ndarray]:
        """Run with inputs given positionally in graph order (subgraphs; no feed checks)."""
        return self._execute(dict(zip(self._input_ids, args)))

    @property
    def loop(self) -> list[tuple]:
        """The run loop: `(run, fetch, one input?, output id, ids freed after)` per step;
        with one input `fetch` is its id, else `fetch(values)` gives the inputs' tuple."""
        return self._loop

    def _execute(self, values: dict[int, Any]) -> list[np.ndarray]:
        values.update(self._constants)
        timer = STEP_TIMER.get()
        return _RUN_STEPS(self, values, self._loop if timer is None else timer.loop(self))

    def __repr__(self) -> str:
        return f"CompiledGraph({self.graph.name!r}, {len(self.steps)} steps)"


def _quiet(run: Callable[..., list[np.ndarray]]) -> Callable[..., list[np.ndarray]]:
    """`run` with NumPy's floating-point warnings off. NumPy 2's errstate decorator keeps
    its state per call (a context variable's token), ~0.6 us a run against ~1.1 us for a
    `with np.errstate(...)` block; NumPy 1's keeps it on the errstate object, which runs on
    several threads would share, so there each run enters its own."""
    if int(np.__version__.split(".")[0]) >= 2:
        return np.errstate(all="ignore")(run)

    def one_context(*args: Any) -> list[np.ndarray]:
        with np.errstate(all="ignore"):
            return run(*args)

    return one_context


def _run_steps(compiled: CompiledGraph, values: dict[int, Any],
               loop: Iterable[tuple]) -> list[np.ndarray]:
    # the hot loop: plain tuples, no attribute lookups per step
    for run, fetch, single, out, frees in loop:
        try:
            values[out] = run(values[fetch]) if single else run(*fetch(values))
        except RlxError:
            raise
        except Exception as err:
            node = compiled.graph.node(out)
            raise KernelError(f"while running {node.label}: {err}") from err
        for i in frees:
            del values[i]
    return [values[o] for o in compiled.graph.outputs]


_RUN_STEPS = _quiet(_run_steps)
"""A run's loop with IEEE results (inf, NaN) as values, not warnings: one context for the
whole run, so the elementwise steps need none of their own (`kernels.elementwise.quiet`).
One for all graphs: a wrapper of a graph's bound method, kept on the graph, was a reference
cycle that held a dropped model's steps until the cyclic collector ran."""


def _check_runnable(graph: Graph) -> None:
    """Every op has a kernel (all missing ones reported at once), every param a value and
    every constant its bytes, in `graph` and the subgraphs nested in it."""
    nodes = list(_all_nodes(graph))
    missing = {type(n.op).__name__ for n in nodes
               if not isinstance(n.op, (Input, Constant, Param)) and not has_kernel(type(n.op))}
    if missing:
        raise UnsupportedOpError(missing, where=f"graph {graph.name!r}")
    for node in nodes:
        if isinstance(node.op, Param):
            raise GraphError(
                f"param {node.op.name!r} has no value: bake the graph with its weights first"
            )
        if isinstance(node.op, Constant) and node.op.is_stripped and node.tensor_shape.numel != 0:
            raise GraphError(
                f"constant {node.label} has no bytes (a compact artifact): "
                "call ensure_runtime_ready() or into_runtime_graph() before compile"
            )


def _all_nodes(graph: Graph) -> Iterator[Node]:
    pending = [graph]
    while pending:
        for node in pending.pop().nodes():
            yield node
            pending.extend(node.op.subgraphs())


def _resolve(node: Node, alike: dict[tuple, Callable]) -> Callable:
    """The step that runs `node`: its op's built step (one for all the nodes of one op
    object, shape and arity where the op's builder allows, `SHARED_STEPS`), or its kernel
    bound to it as a method (64 bytes; a `functools.partial` is ~180)."""
    op_type = type(node.op)
    load_kernels(op_type)
    build = BUILDERS.get(op_type)
    if build is None:
        return MethodType(KERNELS[op_type], node)
    if op_type not in SHARED_STEPS:
        return build(node, _NESTED)
    key = (id(node.op), node.shape, len(node.inputs))  # the graph holds its ops meanwhile
    run = alike.get(key)
    if run is None:
        run = alike[key] = build(node, _NESTED)
    return run


_NESTED = functools.partial(CompiledGraph, nested=True)
"""How builders compile a subgraph; one object for all of them."""


def _no_inputs(values: dict) -> tuple:
    return ()


def _fetcher(inputs: tuple[int, ...]) -> tuple[Callable[[dict], Any] | int, bool]:
    """(fetch, single): the input's id for one input (the loop reads `values[id]`), else
    an itemgetter for the step's inputs, ~3x cheaper per step than building the argument
    list in Python."""
    if len(inputs) == 1:
        return inputs[0], True
    return (operator.itemgetter(*inputs) if inputs else _no_inputs), False


def _frees(graph: Graph, steps: Sequence[Node], keep: set[int]) -> list[tuple[int, ...]]:
    """Per step, the values whose last reader it is, but those in `keep`: the step's own
    `inputs` tuple when it frees all of them (most steps), so a step keeps no tuple of its
    own. Lists indexed by node id (ids are positions): a dict and a list per step were
    most of a compile's peak, which the allocator keeps resident."""
    last_use = [-1] * len(graph)
    for position, node in enumerate(steps):
        for i in node.inputs:
            last_use[i] = position
    frees: list[tuple[int, ...]] = []
    for position, node in enumerate(steps):
        freed: tuple[int, ...] = ()
        for i in node.inputs:  # the inputs' own ints: ids past 256 are objects of their own
            if last_use[i] == position and i not in keep and i not in freed:
                freed += (i,)
        frees.append(node.inputs if freed == node.inputs else freed)
    return frees
