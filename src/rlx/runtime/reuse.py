"""Buffer reuse: an elementwise step writes its result into an input buffer that dies there.

Without it every step of a chain (`Conv -> Add -> Sigmoid -> Mul ...`) allocates a fresh
output; large fresh buffers are fresh pages from the OS (a page fault per 4 KiB on first
touch), and the chain streams through more memory than it needs. With it a chain of any
length after a fresh producer runs in the producer's buffer.

A value's buffer may be reused by step s when, at compile time:
- s's op writes into a given buffer (`rlx.kernels.WRITES_INTO`) and the value is one of its
  inputs with exactly the output's shape and dtype;
- s is the value's last reader, and the value is no graph output, input or constant;
- its producer is *fresh*: an op whose kernel always returns a new array, never an input,
  a view of one or a cached array (`_FRESH`, or itself a reusing step);
- no view of it can still be read: every value that may alias it (an output of a non-fresh
  op fed by it, transitively) has been read for the last time before s.
At run time the step also checks that the array really is writable and of that shape and
dtype, and otherwise computes into a new one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np

from rlx.ir.graph import Graph, Node
from rlx.ir.ops.elementwise import Clamp
from rlx.ir.ops.sources import Constant, Input, Param
from rlx.kernels.registry import WRITES_INTO, load_kernels

__all__ = ["into", "plan_reuse"]

_FRESH = frozenset({"Unary", "Binary", "Conv", "MatMul", "Softmax", "LayerNorm",
                    "BatchNormInference", "GlobalPool", "Concat"})
"""Ops whose kernels always return a new array (Clamp too when it has a bound), by their
serialised names: a graph without convolutions never imports their family."""


def _is_fresh(node: Node) -> bool:
    op = node.op
    if isinstance(op, Clamp):
        return op.min is not None or op.max is not None
    return op.op_name in _FRESH and not isinstance(node.shape, tuple)


def plan_reuse(graph: Graph, steps: Sequence[Node]) -> dict[int, int]:
    """Node id -> position of the input whose buffer that step may write into; `steps` are
    the nodes that run, in run order. Per-value facts are lists indexed by node id (ids
    are positions): dicts and sets of every value were most of a compile's peak."""
    last_use = [-1] * len(graph)
    for p, node in enumerate(steps):
        for i in node.inputs:
            last_use[i] = p
    keep = set(graph.outputs)
    views = _views(steps)
    fresh = bytearray(len(graph))
    reuses: dict[int, int] = {}
    for p, node in enumerate(steps):
        if _is_fresh(node):
            fresh[node.id] = 1
        load_kernels(type(node.op))
        writes = WRITES_INTO.get(type(node.op))
        if writes is None or isinstance(node.shape, tuple) or not writes(node):
            continue
        for k, v in enumerate(node.inputs):
            source = graph.node(v)
            if (fresh[v] and v not in keep and last_use[v] == p
                    and not isinstance(source.op, (Input, Constant, Param))
                    and source.shape == node.shape and node.inputs.count(v) == 1
                    and all(last_use[a] < p and a not in keep
                            for a in views.get(v, _NO_ALIASES))):
                reuses[node.id] = k
                fresh[node.id] = 1  # its result is that buffer: fresh for the next step
                break
    return reuses


def _views(steps: Sequence[Node]) -> dict[int, AbstractSet[int]]:
    """The values that may share another's memory (outputs of non-fresh ops fed by it,
    transitively, including through tuple-valued nodes and their TupleGets), for each
    value that has any."""
    readers: dict[int, list[Node]] = {}  # of the non-fresh readers only
    for node in steps:
        if not _is_fresh(node):
            for i in node.inputs:
                readers.setdefault(i, []).append(node)
    memo: dict[int, AbstractSet[int]] = {}
    for v in sorted(readers, reverse=True):  # readers after their inputs: no recursion depth
        _aliases(v, readers, memo)
    return memo


_NO_ALIASES: frozenset[int] = frozenset()
"""The aliases of a value no non-fresh op reads: most values."""


def _aliases(v: int, readers: dict[int, list[Node]],
             memo: dict[int, AbstractSet[int]]) -> AbstractSet[int]:
    """The values that may share `v`'s memory, memoised. A function of its own, not a
    closure: a closure calling itself is a cycle that kept `readers` and `memo` alive after
    the plan (~0.2 MiB for a 400-node CNN) until the cyclic collector ran."""
    if v in memo:
        return memo[v]
    if v not in readers:
        return _NO_ALIASES
    found: set[int] = set()
    for reader in readers[v]:
        found.add(reader.id)
        found |= _aliases(reader.id, readers, memo)
    memo[v] = found
    return found


def into(run: Callable[..., Any], node: Node, k: int,
         alike: dict[tuple, Callable[..., Any]]) -> Callable[..., Any]:
    """`run` with input `k`'s buffer as `out=` when it is a writable array of the output's
    dtype (else as before), one wrapper per kind in `alike` (steps shared by nodes alike,
    `SHARED_STEPS`, share theirs). The planner matched its shape to the output's
    symbolically, so sizes agree unless a dim is unknown ("?"): only then are shapes
    compared."""
    shape = node.tensor_shape  # plan_reuse plans steps that yield one tensor only
    key = (id(run), shape.dtype, k, len(node.inputs), "?" in shape.dims)  # `run` is held
    found = alike.get(key)
    if found is None:
        found = alike[key] = _wrapped(run, shape.dtype.numpy, k, len(node.inputs), key[-1])
    return found


def _wrapped(run: Callable[..., Any], dtype: np.dtype, k: int, arity: int,
             unknown: bool) -> Callable[..., Any]:
    if arity == 1:  # no *args to pack and unpack (~0.2 us a step)
        def single(x: Any) -> Any:
            if type(x) is np.ndarray and x.dtype == dtype and x.flags.writeable:
                return run(x, out=x)
            return run(x)

        return single
    if not unknown:
        def step(*args: Any) -> Any:
            buf = args[k]
            if type(buf) is np.ndarray and buf.dtype == dtype and buf.flags.writeable:
                return run(*args, out=buf)
            return run(*args)

        return step

    def checked(*args: Any) -> Any:
        buf = args[k]
        if type(buf) is np.ndarray and buf.dtype == dtype and buf.flags.writeable and (
                len(args) == 1 or buf.shape == np.broadcast(*args).shape):  # C: ~1 us, not ~5
            return run(*args, out=buf)
        return run(*args)

    return checked
