"""The bake pipeline, its options and report, the in-memory artifact and memory layouts."""

from rlx.bake.memory import (
    MemoryMode, MemoryStats, apply_memory_mode, dedupe_identical_constants,
    drop_weight_table_data, ensure_runtime_ready, into_runtime_graph, materialize_weights,
    needs_materialize, relayout, strip_graph_weight_bytes, strip_table_weight_bytes,
)
from rlx.bake.pipeline import BakeReport, OptimizeStats, bake, bake_bundle
from rlx.bake.profile import BakeOptions, BakeProfile
from rlx.bake.rlxfile import RlxFile, RlxIo, RlxMeta, RlxWeight

__all__ = [
    "BakeOptions", "BakeProfile", "BakeReport", "MemoryMode", "MemoryStats", "OptimizeStats",
    "RlxFile", "RlxIo", "RlxMeta", "RlxWeight", "apply_memory_mode", "bake", "bake_bundle",
    "dedupe_identical_constants", "drop_weight_table_data", "ensure_runtime_ready",
    "into_runtime_graph", "materialize_weights", "needs_materialize", "relayout",
    "strip_graph_weight_bytes", "strip_table_weight_bytes",
]
