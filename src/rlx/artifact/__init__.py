"""The artifact: the in-memory `RlxFile` and its memory layouts, and the `.rlx` file on disk
(schema-3 writer, validating memory-mapped reader, RLXENC01 encryption; docs/format.md).

Depends on `ir` and `codecs` only: reading a file never imports the optimiser.
"""

from rlx.artifact.memory import (
    MemoryMode,
    MemoryStats,
    apply_memory_mode,
    drop_weight_table_data,
    ensure_runtime_ready,
    into_runtime_graph,
    materialize_weights,
    needs_materialize,
    relayout,
    strip_graph_weight_bytes,
    strip_table_weight_bytes,
)
from rlx.artifact.model import RlxFile, RlxIo, RlxMeta, RlxWeight
from rlx.artifact.open import artifact_kind, open_artifact
from rlx.artifact.reader import parse_rlx, read_rlx

_LAZY = {
    "write_rlx": "rlx.artifact.writer",
    **dict.fromkeys(("RlxpOptions", "RlxpPackage", "read_rlxp", "read_rlxp_package",
                     "write_rlxp"), "rlx.artifact.rlxp"),
    **dict.fromkeys(("generate_keypair", "save_keypair", "sign_artifact", "signature_path",
                     "verify_signature"), "rlx.artifact.signing"),
}


def __getattr__(name: str):
    """Writers, `.rlxp` and signing load on first use: reading and running a `.rlx` file
    never write (the writer brings `secrets`, `random` and the atomic-file helpers, ~15% of
    the import of a reader) and need no zstandard or Ed25519."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "MemoryMode", "MemoryStats", "RlxFile", "RlxIo", "RlxMeta", "RlxWeight",
    "apply_memory_mode", "drop_weight_table_data", "ensure_runtime_ready",
    "into_runtime_graph", "materialize_weights", "needs_materialize", "parse_rlx", "read_rlx",
    "relayout", "strip_graph_weight_bytes", "strip_table_weight_bytes", "write_rlx",
    "RlxpOptions", "RlxpPackage", "artifact_kind", "open_artifact", "read_rlxp",
    "read_rlxp_package", "write_rlxp", "generate_keypair", "save_keypair", "sign_artifact",
    "signature_path", "verify_signature",
]
