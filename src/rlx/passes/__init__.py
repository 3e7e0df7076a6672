"""Graph passes: each a function that builds a new graph and never mutates its input.

Every pass returns `(graph, rewrites)` and gives back the very same graph object when it
changed nothing. Node names (the stable identities of weights and outputs) survive every
pass; see `rlx.ir.rewrite` for the rules. `unfold_weights` only reads the graph.

Names load on first use (`rlx._lazy`): the memory layouts need one pass, not all of them.
"""

from rlx._lazy import lazy_exports

_LAZY = {
    "bind_packed": "rlx.passes.bind_packed",
    "eliminate_dead_code": "rlx.passes.dce",
    "dedupe_identical_constants": "rlx.passes.dedupe_constants",
    "fold_batchnorm": "rlx.passes.fold_batchnorm",
    "fold_constants": "rlx.passes.fold_constants",
    "fuse_patterns": "rlx.passes.fuse",
    "pack_quant": "rlx.passes.pack_quant",
    "pack_ternary": "rlx.passes.pack_ternary",
    "SkipReason": "rlx.passes.packing",
    "packing_candidates": "rlx.passes.packing",
    "resolve_shapes": "rlx.passes.resolve_shapes",
    "algebraic_simplify": "rlx.passes.simplify",
    "skip_zero_matmul": "rlx.passes.skip_zero_matmul",
    "specialize": "rlx.passes.specialize",
    "HOIST_MIN_BYTES": "rlx.passes.subgraphs",
    "captured_inputs": "rlx.passes.subgraphs",
    "hoist_subgraph_weights": "rlx.passes.subgraphs",
    "in_subgraphs": "rlx.passes.subgraphs",
    "sink_constant_captures": "rlx.passes.subgraphs",
    "WeightRow": "rlx.passes.unfold_weights",
    "unfold_weights": "rlx.passes.unfold_weights",
}
__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
