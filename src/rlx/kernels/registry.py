"""The kernel registry: one numpy implementation per op type, filled at import.

A *kernel* is `fn(node, *inputs) -> array | tuple[array, ...]`; it reads its attributes from
`node.op` and may use `node.shape` for the output dtype. A *builder* is for ops that need
work at compile time (subgraphs, weight layouts): `build(node, compile) -> step`, where
`step(*inputs)` is what runs and `compile(graph)` compiles a subgraph. A *staged* kernel
is a builder that needs no `compile`: sessions build it once per node, and it is also
registered as a kernel (building on each call) for one-shot callers such as constant
folding, so a speed-up never hides an op from them.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

from rlx.ir.ops.base import Op

__all__ = ["Kernel", "Builder", "KERNELS", "BUILDERS", "SHARED_STEPS", "kernel", "builder",
           "staged", "has_kernel", "load_kernels"]

Kernel = Callable[..., Any]
Builder = Callable[..., Callable[..., Any]]

KERNELS: dict[type[Op], Kernel] = {}
BUILDERS: dict[type[Op], Builder] = {}
WRITES_INTO: dict[type[Op], Callable[[Any], bool]] = {}
"""Op types whose built step takes `out=` (an array of the node's shape and dtype, which may
be one of its inputs) and writes its result there: `WRITES_INTO[type](node)` says whether
this node's step does. The runtime passes a dying input's buffer, so a chain of elementwise
ops runs in one buffer (every kernel it names is elementwise: same position in, out)."""
SHARED_STEPS: set[type[Op]] = set()
"""Op types whose built step depends on the node's op object, shape and input count only
(no state bound to one node's inputs, such as a weight layout): a session builds one step
for all the nodes that share those (`staged(shared=True)`)."""


def kernel(*op_types: type[Op]) -> Callable[[Kernel], Kernel]:
    """Register `fn(node, *inputs)` as the kernel of `op_types`: the default, for ops whose
    whole work depends on the inputs of each call."""

    def register(fn: Kernel) -> Kernel:
        for op_type in op_types:
            assert op_type not in KERNELS and op_type not in BUILDERS, op_type
            KERNELS[op_type] = fn
        return fn

    return register


def builder(*op_types: type[Op]) -> Callable[[Builder], Builder]:
    """Register `build(node, compile) -> step` for `op_types`. Why: some work is done once per
    node, not per run (compiling subgraphs, decoding a packed weight). When: ops with
    subgraphs, which need `compile`; one-shot callers (constant folding) cannot run them."""

    def register(fn: Builder) -> Builder:
        for op_type in op_types:
            assert op_type not in KERNELS and op_type not in BUILDERS, op_type
            BUILDERS[op_type] = fn
        return fn

    return register


def staged(*op_types: type[Op], shared: bool = False) -> Callable[[Builder], Builder]:
    """Register a builder that needs no `compile` (it is called with None) for `op_types`,
    and as their kernel too. Why: compile-time work (a weight's layout, a constant's
    conversion) is done once per session, while constant folding still finds a kernel.
    When: any op with per-node work that can be done before the first run. `shared`: the
    step reads nothing of its node but `node.op`, `node.shape` and how many inputs it has
    (`SHARED_STEPS`), so nodes alike run one step: a CNN's 58 SiLUs hold one closure."""

    def register(fn: Builder) -> Builder:
        for op_type in op_types:
            assert op_type not in KERNELS and op_type not in BUILDERS, op_type
            BUILDERS[op_type] = fn
            if shared:
                SHARED_STEPS.add(op_type)
            KERNELS[op_type] = functools.partial(_build_and_run, fn)
        return fn

    return register


def writes_into(*op_types: type[Op]) -> Callable[[Callable[[Any], bool]], Callable]:
    """Declare that the built steps of `op_types` take `out=` (see `WRITES_INTO`). Why: a
    chain of elementwise steps then reuses one buffer instead of allocating per step. When:
    elementwise ops only (the runtime hands them a dying input's buffer)."""

    def register(fn: Callable[[Any], bool]) -> Callable[[Any], bool]:
        for op_type in op_types:
            assert op_type in BUILDERS, op_type  # `out=` is a keyword of a built step
            WRITES_INTO[op_type] = fn
        return fn

    return register


def _build_and_run(build: Builder, node, *inputs):
    return build(node, None)(*inputs)


_FAMILY_KERNELS = {"dequant": ("quant",), "quant": ("integer", "qlinear"), "sources": ()}
"""The kernel modules of an op family (`rlx.ir.ops.<family>`) other than `rlx.kernels.<family>`
alone: DequantMatMul's kernel is with the other decoders, the integer ops have two modules,
sources have none. tests/kernels/test_registry.py checks each family against it."""

def load_kernels(op_type: type[Op]) -> None:
    """Import the kernel modules of `op_type`'s family, if not yet registered. Why: a compile
    imports the kernels of the ops it has, not every family's (a BERT needs no control flow,
    integer or convolution kernels: issue 35)."""
    if op_type in KERNELS or op_type in BUILDERS:
        return
    package, _, family = op_type.__module__.rpartition(".")
    if package == "rlx.ir.ops":
        for module in _FAMILY_KERNELS.get(family, (family,)):
            importlib.import_module(f"rlx.kernels.{module}")


def has_kernel(op_type: type[Op]) -> bool:
    """Whether `op_type` has a kernel or a builder (its family's kernels imported first)."""
    load_kernels(op_type)
    return op_type in KERNELS or op_type in BUILDERS
