"""rlx: bake a model and its weights into one artifact, and run it.

The names below are the stable public API; the subpackages hold the rest (see
docs/architecture.md). Every name loads on first use (`rlx._lazy`): `import rlx` costs
nothing, `rlx.read_rlx` brings the reader and `rlx.import_onnx` brings onnx, each only
when used.
"""

from rlx._lazy import lazy_exports
from rlx.version import __version__

_ARTIFACT = (
    "MemoryMode", "MemoryStats", "RlxFile", "RlxIo", "RlxMeta", "RlxWeight",
    "apply_memory_mode", "drop_weight_table_data", "ensure_runtime_ready",
    "into_runtime_graph", "materialize_weights", "needs_materialize", "read_rlx", "relayout",
    "strip_graph_weight_bytes", "strip_table_weight_bytes", "write_rlx",
    "RlxpOptions", "open_artifact", "read_rlxp", "write_rlxp",
)
_LAZY = {
    **dict.fromkeys(_ARTIFACT, "rlx.artifact"),
    **dict.fromkeys(("BakeOptions", "BakeProfile", "BakeReport", "bake", "bake_bundle",
                     "bake_file"), "rlx.baking"),
    "dedupe_identical_constants": "rlx.passes",
    "RlxError": "rlx.errors",
    "DType": "rlx.ir",
    "Graph": "rlx.ir",
    "Shape": "rlx.ir",
    "CompiledGraph": "rlx.runtime",
    "Session": "rlx.runtime",
    "import_onnx": "rlx.onnx",
    "export_onnx": "rlx.onnx",
    "load": "rlx.engines",
    "Model": "rlx.engines",
    "IoSpec": "rlx.engines",
    "load_weights": "rlx.weights",
    **dict.fromkeys(("generate_keypair", "save_keypair", "sign_artifact", "verify_signature"),
                    "rlx.artifact.signing"),
}
__all__ = [
    "BakeOptions", "BakeProfile", "BakeReport", "CompiledGraph", "DType", "Graph", "IoSpec",
    "MemoryMode", "MemoryStats", "Model", "RlxError", "RlxFile", "RlxIo", "RlxMeta",
    "RlxWeight", "RlxpOptions", "Session", "Shape", "__version__", "apply_memory_mode", "bake",
    "bake_bundle", "bake_file", "dedupe_identical_constants", "drop_weight_table_data",
    "ensure_runtime_ready", "export_onnx", "generate_keypair", "import_onnx",
    "into_runtime_graph", "load", "load_weights", "materialize_weights", "needs_materialize",
    "open_artifact", "read_rlx", "read_rlxp", "relayout", "save_keypair", "sign_artifact",
    "strip_graph_weight_bytes", "strip_table_weight_bytes", "verify_signature", "write_rlx",
    "write_rlxp",
]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
