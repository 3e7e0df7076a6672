"""What a file holds, as the reports of `bake`, `inspect` and `encrypt` show it: weight
table rows with where their bytes live, totals by encoding, encryption parameters."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rlx import RlxFile, RlxWeight
from rlx.artifact.crypto import ENC_MAGIC, EncryptionInfo
from rlx.ir import Constant, Graph

__all__ = ["by_encoding", "encryption_info", "linked_constant", "row_info"]


def linked_constant(graph: Graph, row: RlxWeight) -> Constant | None:
    """The op of the graph's Constant node the table row is linked to, if any."""
    if row.node_id is not None and 0 <= row.node_id < len(graph):
        op = graph.node(row.node_id).op
        if isinstance(op, Constant):
            return op
    return None


def row_info(file: RlxFile, row: RlxWeight) -> dict[str, Any]:
    """One table row; `bytes` is its encoded size wherever the bytes live (table or graph)."""
    constant = linked_constant(file.graph, row)
    graph_bytes = constant.nbytes if constant is not None else 0
    return {"name": row.name, "encoding": row.encoding, "shape": list(row.shape),
            "layout": row.layout, "bytes": row.nbytes or graph_bytes,
            "in_table": row.nbytes > 0, "in_graph": graph_bytes > 0, "note": row.note}


def by_encoding(rows: list[dict]) -> list[dict]:
    tensors: Counter[str] = Counter()
    nbytes: Counter[str] = Counter()
    for r in rows:
        tensors[r["encoding"]] += 1
        nbytes[r["encoding"]] += r["bytes"]
    return [{"encoding": e, "tensors": tensors[e], "bytes": nbytes[e]} for e in sorted(tensors)]


def encryption_info(info: EncryptionInfo) -> dict[str, Any]:
    return {"container": ENC_MAGIC.decode(), "version": info.version,
            "kdf": {"algorithm": "argon2id", "m_cost_kib": info.kdf.m_cost,
                    "t_cost": info.kdf.t_cost, "p_cost": info.kdf.p_cost},
            "aead": "chacha20-poly1305, chunked (STREAM)", "chunk_size": info.chunk_size,
            "chunks": info.chunk_count, "plaintext_bytes": info.plaintext_length,
            "file_bytes": info.file_size}

