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
    "resolve_shapes": "rlx.passes.shape_resolution",
    "algebraic_simplify": "rlx.passes.simplify",
    "batch_step_products": "rlx.passes.step_batching",
    "skip_zero_matmul": "rlx.passes.zero_matmuls",
    "specialize": "rlx.passes.specialization",
    "Outcome": "rlx.passes.pipeline",
    "Pass": "rlx.passes.pipeline",
    "PipelineRun": "rlx.passes.pipeline",
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
    **dict.fromkeys(("WeightRole", "SkipReason", "weight_role", "fits_dequant_matmul",
                     "matmul_skip_reason"), "rlx.passes.weight_roles"),
    **dict.fromkeys(("WeightChoice", "EncodingPlan", "plan_weight_encodings",
                     "plan_ternary_matmuls", "apply_weight_encodings", "encode_ternary_matmuls",
                     "matmul_choice"),
                    "rlx.passes.weight_encoding"),
}
__all__ = [
    "EncodingPlan", "HOIST_MIN_BYTES", "Outcome", "Pass", "PipelineRun", "SkipReason", "Step",
    "WeightChoice", "WeightRole", "WeightRow", "algebraic_simplify", "apply_weight_encodings",
    "batch_step_products", "bind_packed", "captured_inputs", "dedupe_identical_constants",
    "eliminate_dead_code",
    "encode_ternary_matmuls", "fits_dequant_matmul", "fold_batchnorm", "fold_constants",
    "fuse_patterns", "hoist_subgraph_weights", "in_subgraphs", "matmul_choice",
    "matmul_skip_reason", "plan_ternary_matmuls", "plan_weight_encodings", "resolve_shapes",
    "run_pipeline", "sink_constant_captures", "skip_zero_matmul", "specialize", "unfold_weights",
    "verifying_passes", "weight_role",
]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
