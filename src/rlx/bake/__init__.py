"""The bake pipeline, its options and report, the in-memory artifact and memory layouts.

Names load on first use (`rlx._lazy`): reading an artifact needs `RlxFile` and the memory
layouts, not the pipeline with its passes and weight loaders.
"""

from rlx._lazy import lazy_exports

_MEMORY = (
    "MemoryMode", "MemoryStats", "apply_memory_mode", "dedupe_identical_constants",
    "drop_weight_table_data", "ensure_runtime_ready", "into_runtime_graph",
    "materialize_weights", "needs_materialize", "relayout", "strip_graph_weight_bytes",
    "strip_table_weight_bytes",
)
_LAZY = {
    **dict.fromkeys(_MEMORY, "rlx.bake.memory"),
    **dict.fromkeys(("BakeReport", "OptimizeStats", "bake", "bake_bundle"),
                    "rlx.bake.pipeline"),
    **dict.fromkeys(("BakeOptions", "BakeProfile"), "rlx.bake.profile"),
    **dict.fromkeys(("RlxFile", "RlxIo", "RlxMeta", "RlxWeight"), "rlx.bake.rlxfile"),
}
__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
