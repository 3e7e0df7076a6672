"""Where weight bytes live in a baked artifact: the memory modes, and stripping bytes from
a graph or a weight table.

- duplex: bytes in the graph's Constants and in the weight table;
- runtime: bytes in the graph only, the table keeps name/shape/encoding;
- compact: bytes in the table only; materialise before compiling.

Table rows point at their graph Constant by node id, so stripping and filling touch exactly
that node (never "every node with this name"), each function is O(nodes + rows), and
materialising shares the table's buffer with the graph instead of copying it. The
operations on a whole file (materialise, relayout, apply a mode) are `RlxFile`'s methods
(`rlx.artifact.model`); these functions see only a graph and rows.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence

import numpy as np

from rlx.artifact.weight_row import RlxWeight
from rlx.enums import parse_enum
from rlx.errors import BakeError
from rlx.ir.graph import Graph
from rlx.ir.ops.sources import Constant
from rlx.record import dataclass

__all__ = ["METADATA_ONLY", "MemoryMode", "MemoryStats", "linked_constants",
           "strip_graph_weight_bytes", "strip_table_weight_bytes"]

METADATA_ONLY = "[metadata-only]"
_EMPTY = b""


class MemoryMode(enum.Enum):
    DUPLEX = "duplex"
    RUNTIME = "runtime"
    COMPACT = "compact"

    @classmethod
    def parse(cls, text: str) -> MemoryMode:
        return parse_enum(cls, text, lambda t: BakeError(
            f"unknown memory mode {t.strip().lower()!r}; expected duplex, runtime, or compact"),
            _ALIASES)

    @property
    def description(self) -> str:
        return _DESCRIPTIONS[self]

    def __str__(self) -> str:
        return self.value


_ALIASES = {
    MemoryMode.DUPLEX: ("both", "full"),
    MemoryMode.RUNTIME: ("graph",),
    MemoryMode.COMPACT: ("table", "lean"),
}
_DESCRIPTIONS = {
    MemoryMode.DUPLEX: "weight bytes in graph and table (duplicate)",
    MemoryMode.RUNTIME: "weight bytes in graph only; table is metadata",
    MemoryMode.COMPACT: "weight bytes in table only; materialize before compile",
}


@dataclass
class MemoryStats:
    mode: str = MemoryMode.COMPACT.value
    constants_deduped: int = 0  # identical Constant nodes merged
    graph_bytes_stripped: int = 0  # cleared from graph Constants (compact)
    table_bytes_stripped: int = 0  # cleared from the weight table (runtime)
    folded_bindings_dropped: int = 0  # bindings folded away and not kept in the table


def linked_constants(graph: Graph, weights: Sequence[RlxWeight]
                     ) -> Iterator[tuple[RlxWeight, int, Constant]]:
    """(row, node id, its Constant) for rows that point at a Constant of the graph."""
    for row in weights:
        if row.node_id is None or not 0 <= row.node_id < len(graph):
            continue
        op = graph.node(row.node_id).op
        if isinstance(op, Constant):
            yield row, row.node_id, op


def strip_graph_weight_bytes(graph: Graph, weights: Sequence[RlxWeight]) -> tuple[Graph, int]:
    """Empty the payload of every Constant a table row points at; (new graph, bytes cleared)."""
    ops, stripped = {}, 0
    for _, node_id, constant in linked_constants(graph, weights):
        if not constant.is_stripped:
            stripped += constant.nbytes
            ops[node_id] = Constant(np.zeros(0, np.uint8))
    return (graph.replace_ops(ops) if ops else graph), stripped


def strip_table_weight_bytes(weights: Sequence[RlxWeight]) -> tuple[list[RlxWeight], int]:
    """Empty every row's data, keeping name/shape/encoding; (new rows, bytes cleared)."""
    rows, stripped = [], 0
    for row in weights:
        stripped += row.nbytes
        note = row.note if METADATA_ONLY in row.note else f"{row.note} {METADATA_ONLY}".strip()
        rows.append(row.replace(data=_EMPTY, note=note))
    return rows, stripped
