"""Graph passes: each a function that builds a new graph and never mutates its input.

Every pass returns `(graph, rewrites)` and gives back the very same graph object when it
changed nothing. Node names (the stable identities of weights and outputs) survive every
pass; see `rlx.ir.rewrite` for the rules. `unfold_weights` only reads the graph. The
contract (`Pass`) and the runner that sequences named steps (`run_pipeline`) are in
`rlx.passes.pipeline`.

Names load on first use (`rlx._lazy`): a caller that needs one pass does not import them all.
"""

from rlx._lazy import lazy_exports

_LAZY = {
    "bind_packed": "rlx.passes.packed_binding",
    "mlx_companions": "rlx.passes.packed_binding",
    "orient_bt_tensors": "rlx.passes.packed_binding",
    "eliminate_dead_code": "rlx.passes.dce",
    "dedupe_identical_constants": "rlx.passes.dedupe_constants",
    "fold_batchnorm": "rlx.passes.batchnorm_folding",
    "fold_constants": "rlx.passes.constant_folding",
    "fuse_patterns": "rlx.passes.fuse",
    "pack_quant": "rlx.passes.quant_packing",
    "pack_ternary": "rlx.passes.ternary_packing",
    "SkipReason": "rlx.passes.packing",
    "pack_matmuls": "rlx.passes.packing",
    "packing_candidates": "rlx.passes.packing",
    "resolve_shapes": "rlx.passes.shape_resolution",
    "algebraic_simplify": "rlx.passes.simplify",
    "skip_zero_matmul": "rlx.passes.zero_matmuls",
    "specialize": "rlx.passes.specialization",
    "Pass": "rlx.passes.pipeline",
    "Step": "rlx.passes.pipeline",
    "run_pipeline": "rlx.passes.pipeline",
    "verifying_passes": "rlx.passes.pipeline",
    "HOIST_MIN_BYTES": "rlx.passes.subgraphs",
    "captured_inputs": "rlx.passes.subgraphs",
    "hoist_subgraph_weights": "rlx.passes.subgraphs",
    "in_subgraphs": "rlx.passes.subgraphs",
    "sink_constant_captures": "rlx.passes.subgraphs",
    "WeightRow": "rlx.passes.weight_rows",
    "unfold_weights": "rlx.passes.weight_rows",
    **dict.fromkeys(("WeightRole", "WeightChoice", "plan_weight_encodings",
                     "apply_weight_encodings", "Q8_0", "TQ2_0", "F16"),
                    "rlx.passes.weight_encoding"),
}
__all__ = [
    "HOIST_MIN_BYTES", "Pass", "SkipReason", "Step", "WeightRow",
    "algebraic_simplify", "bind_packed", "captured_inputs", "dedupe_identical_constants",
    "eliminate_dead_code", "fold_batchnorm", "fold_constants", "fuse_patterns",
    "hoist_subgraph_weights", "in_subgraphs", "pack_matmuls", "pack_quant", "pack_ternary",
    "packing_candidates", "resolve_shapes", "run_pipeline", "sink_constant_captures",
    "skip_zero_matmul", "specialize", "unfold_weights", "verifying_passes",
]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
