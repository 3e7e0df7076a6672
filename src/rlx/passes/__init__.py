"""Graph passes: each a function that builds a new graph and never mutates its input.

Every pass returns `(graph, rewrites)` and gives back the very same graph object when it
changed nothing. Node names (the stable identities of weights and outputs) survive every
pass; see `rlx.ir.rewrite` for the rules. `unfold_weights` only reads the graph.
"""

from rlx.passes.bind_packed import bind_packed
from rlx.passes.dce import eliminate_dead_code
from rlx.passes.dedupe_constants import dedupe_identical_constants
from rlx.passes.fold_batchnorm import fold_batchnorm
from rlx.passes.fold_constants import fold_constants
from rlx.passes.fuse import fuse_patterns
from rlx.passes.pack_quant import pack_quant
from rlx.passes.pack_ternary import pack_ternary
from rlx.passes.packing import SkipReason, packing_candidates
from rlx.passes.resolve_shapes import resolve_shapes
from rlx.passes.simplify import algebraic_simplify
from rlx.passes.skip_zero_matmul import skip_zero_matmul
from rlx.passes.specialize import specialize
from rlx.passes.subgraphs import (
    HOIST_MIN_BYTES, captured_inputs, hoist_subgraph_weights, in_subgraphs, sink_constant_captures,
)
from rlx.passes.unfold_weights import WeightRow, unfold_weights

__all__ = [
    "bind_packed",
    "specialize", "skip_zero_matmul", "pack_ternary", "pack_quant", "packing_candidates",
    "SkipReason", "unfold_weights", "WeightRow", "algebraic_simplify", "eliminate_dead_code",
    "fold_constants", "dedupe_identical_constants", "fold_batchnorm", "resolve_shapes",
    "HOIST_MIN_BYTES", "captured_inputs", "hoist_subgraph_weights", "in_subgraphs",
    "sink_constant_captures", "fuse_patterns",
]
