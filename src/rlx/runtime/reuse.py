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
from rlx.ir.ops.elementwise import Binary, Clamp, Unary
from rlx.ir.ops.linalg import MatMul
from rlx.ir.ops.nn import BatchNormInference, Conv, GlobalPool, LayerNorm, Softmax
from rlx.ir.ops.shaping import Concat
from rlx.ir.ops.sources import Constant, Input, Param
from rlx.kernels.registry import WRITES_INTO, load_kernels

__all__ = ["into", "plan_reuse"]

_FRESH = (Unary, Binary, Conv, MatMul, Softmax, LayerNorm, BatchNormInference, GlobalPool,
          Concat)
"""Ops whose kernels always return a new array (Clamp too when it has a bound)."""


def _is_fresh(node: Node) -> bool:
    op = node.op
    if isinstance(op, Clamp):
        return op.min is not None or op.max is not None
    return isinstance(op, _FRESH) and not isinstance(node.shape, tuple)


def plan_reuse(graph: Graph, steps: Sequence[Any]) -> dict[int, int]:
    """Node id -> position of the input whose buffer that step may write into; `steps` are
    the planned steps (`.node`) in run order."""
    last_use: dict[int, int] = {}
    for p, st in enumerate(steps):
        for i in st.node.inputs:
            last_use[i] = p
    keep = set(graph.outputs)
    views = _views(graph, steps)
    fresh: set[int] = set()
    reuses: dict[int, int] = {}
    for p, st in enumerate(steps):
        node = st.node
        if _is_fresh(node):
            fresh.add(node.id)
        load_kernels(type(node.op))
        writes = WRITES_INTO.get(type(node.op))
        if writes is None or isinstance(node.shape, tuple) or not writes(node):
            continue
        for k, v in enumerate(node.inputs):
            source = graph.node(v)
            if (v in fresh and v not in keep and last_use.get(v) == p
                    and not isinstance(source.op, (Input, Constant, Param))
                    and source.shape == node.shape and node.inputs.count(v) == 1
                    and all(last_use.get(a, -1) < p and a not in keep for a in views[v])):
                reuses[node.id] = k
                fresh.add(node.id)  # its result is that buffer: fresh for the next step
                break
    return reuses


def _views(graph: Graph, steps: Sequence[Any]) -> dict[int, AbstractSet[int]]:
    """Per value: the values that may share its memory (outputs of non-fresh ops fed by it,
    transitively, including through tuple-valued nodes and their TupleGets)."""
    readers: dict[int, list[Node]] = {}
    for st in steps:
        for i in st.node.inputs:
            readers.setdefault(i, []).append(st.node)
    memo: dict[int, AbstractSet[int]] = {}
    for st in reversed(steps):  # readers before their inputs: shallow recursion
        _aliases(st.node.id, readers, memo)
    for node in graph.nodes():
        _aliases(node.id, readers, memo)
    return memo


_NO_ALIASES: frozenset[int] = frozenset()
"""The aliases of most values: one object for all of them (an empty set is 216 bytes; one
per node was most of a compile's peak, which the allocator keeps resident)."""


def _aliases(v: int, readers: dict[int, list[Node]],
             memo: dict[int, AbstractSet[int]]) -> AbstractSet[int]:
    """The values that may share `v`'s memory, memoised. A function of its own, not a
    closure: a closure calling itself is a cycle that kept `readers` and `memo` alive after
    the plan (~0.2 MiB for a 400-node CNN) until the cyclic collector ran."""
    if v in memo:
        return memo[v]
    found: set[int] | None = None
    for reader in readers.get(v, ()):
        if not _is_fresh(reader):
            found = set() if found is None else found
            found.add(reader.id)
            found |= _aliases(reader.id, readers, memo)
    memo[v] = out = _NO_ALIASES if found is None else found
    return out


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
