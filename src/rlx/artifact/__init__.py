"""The artifact: the in-memory `RlxFile` and its memory layouts, and the `.rlx` file on disk
(schema-3 writer, validating memory-mapped reader, RLXENC01 encryption; docs/format.md).

Depends on `ir` and `codecs` only: reading a file never imports the optimiser. Names load
on first use (`rlx._lazy`): a warm engine load reads only the header (`rlx.artifact.header`)
and never imports the graph IR, and reading and running a file never imports the writer
(`secrets`, `random`, the atomic-file helpers), `.rlxp` or signing (zstandard, Ed25519).
"""

from typing import TYPE_CHECKING

from rlx._lazy import lazy_exports

_LAZY = {
    **dict.fromkeys(("MemoryMode", "MemoryStats", "strip_graph_weight_bytes",
                     "strip_table_weight_bytes"), "rlx.artifact.memory"),
    **dict.fromkeys((
        "RlxFile", "RlxIo", "RlxMeta", "RlxWeight", "apply_memory_mode",
        "drop_weight_table_data", "ensure_runtime_ready", "into_runtime_graph",
        "materialize_weights", "needs_materialize", "relayout",
    ), "rlx.artifact.model"),
    **dict.fromkeys(("artifact_kind", "open_artifact"), "rlx.artifact.open"),
    **dict.fromkeys(("parse_rlx", "read_rlx"), "rlx.artifact.reader"),
    "write_rlx": "rlx.artifact.writer",
    **dict.fromkeys(("WrittenArtifact", "artifact_format", "artifact_size", "write_artifact"),
                    "rlx.artifact.output"),
    **dict.fromkeys(("RlxpOptions", "RlxpPackage", "read_rlxp", "read_rlxp_package",
                     "write_rlxp"), "rlx.artifact.rlxp"),
    **dict.fromkeys(("generate_keypair", "save_keypair", "sign_artifact", "signature_path",
                     "verify_signature"), "rlx.artifact.signing"),
}
__all__ = [
    "MemoryMode", "MemoryStats", "RlxFile", "RlxIo", "RlxMeta", "RlxWeight",
    "apply_memory_mode", "drop_weight_table_data", "ensure_runtime_ready",
    "into_runtime_graph", "materialize_weights", "needs_materialize", "parse_rlx", "read_rlx",
    "relayout", "strip_graph_weight_bytes", "strip_table_weight_bytes", "write_rlx",
    "RlxpOptions", "RlxpPackage", "artifact_kind", "open_artifact", "read_rlxp",
    "read_rlxp_package", "write_rlxp", "generate_keypair", "save_keypair", "sign_artifact",
    "signature_path", "verify_signature", "WrittenArtifact", "artifact_format",
    "artifact_size", "write_artifact",
]
if TYPE_CHECKING:  # what type checkers see: the names, imported as they are
    from rlx.artifact.memory import (
        MemoryMode,
        MemoryStats,
        strip_graph_weight_bytes,
        strip_table_weight_bytes,
    )
    from rlx.artifact.model import (
        RlxFile,
        RlxIo,
        RlxMeta,
        RlxWeight,
        apply_memory_mode,
        drop_weight_table_data,
        ensure_runtime_ready,
        into_runtime_graph,
        materialize_weights,
        needs_materialize,
        relayout,
    )
    from rlx.artifact.open import artifact_kind, open_artifact
    from rlx.artifact.output import WrittenArtifact, artifact_format, artifact_size, write_artifact
    from rlx.artifact.reader import parse_rlx, read_rlx
    from rlx.artifact.rlxp import RlxpOptions, RlxpPackage, read_rlxp, read_rlxp_package, write_rlxp
    from rlx.artifact.signing import (
        generate_keypair,
        save_keypair,
        sign_artifact,
        signature_path,
        verify_signature,
    )
    from rlx.artifact.writer import write_rlx

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
