"""Where weight bytes live in a baked artifact (the seed's memory-layout module).

- duplex: bytes in the graph's Constants and in the weight table;
- runtime: bytes in the graph only, the table keeps name/shape/encoding;
- compact: bytes in the table only; materialise before compiling.

Table rows point at their graph Constant by node id, so stripping and filling touch exactly
that node (never "every node with this name"), each function is O(nodes + rows), and
materialising shares the table's buffer with the graph instead of copying it.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from rlx.enums import parse_enum
from rlx.errors import ArtifactError, BakeError
from rlx.ir.graph import Graph
from rlx.ir.ops.sources import Constant
from rlx.record import dataclass

if TYPE_CHECKING:
    from rlx.artifact.model import RlxFile, RlxWeight

__all__ = [
    "MemoryMode", "MemoryStats", "strip_graph_weight_bytes",
    "strip_table_weight_bytes", "materialize_weights", "drop_weight_table_data",
    "into_runtime_graph", "apply_memory_mode", "relayout", "ensure_runtime_ready",
    "needs_materialize",
]

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


def _linked_constants(graph: Graph, weights: Sequence[RlxWeight]):
    """(row, node) pairs for rows that point at a Constant of the graph."""
    for row in weights:
        if row.node_id is None or not 0 <= row.node_id < len(graph):
            continue
        node = graph.node(row.node_id)
        if isinstance(node.op, Constant):
            yield row, node


def strip_graph_weight_bytes(graph: Graph, weights: Sequence[RlxWeight]) -> tuple[Graph, int]:
    """Empty the payload of every Constant a table row points at; (new graph, bytes cleared)."""
    ops, stripped = {}, 0
    for _, node in _linked_constants(graph, weights):
        if not node.op.is_stripped:
            stripped += node.op.nbytes
            ops[node.id] = Constant(np.zeros(0, np.uint8))
    return (graph.replace_ops(ops) if ops else graph), stripped


def strip_table_weight_bytes(weights: Sequence[RlxWeight]) -> tuple[list[RlxWeight], int]:
    """Empty every row's data, keeping name/shape/encoding; (new rows, bytes cleared)."""
    rows, stripped = [], 0
    for row in weights:
        stripped += row.nbytes
        note = row.note if METADATA_ONLY in row.note else f"{row.note} {METADATA_ONLY}".strip()
        rows.append(row.replace(data=_EMPTY, note=note))
    return rows, stripped


def needs_materialize(file: RlxFile) -> bool:
    """True when a row with bytes points at a graph Constant whose bytes were stripped."""
    return any(row.nbytes and node.op.is_stripped
               for row, node in _linked_constants(file.graph, file.weights))


def materialize_weights(file: RlxFile) -> int:
    """Point each stripped graph Constant at its row's bytes (shared, not copied).

    Returns the number of bytes made available to the graph. Rows without a graph node
    (biases that were folded, kept source bindings) are fine and skipped.
    """
    file.check_integrity()
    ops, filled = {}, 0
    for row, node in _linked_constants(file.graph, file.weights):
        if row.nbytes and node.op.is_stripped:
            ops[node.id] = Constant(row.data)
            filled += row.nbytes
    if ops:
        file.graph = file.graph.replace_ops(ops)
    return filled


def drop_weight_table_data(file: RlxFile) -> int:
    """After materialising, forget the table's bytes (the graph keeps them)."""
    file.weights, dropped = strip_table_weight_bytes(file.weights)
    return dropped


def ensure_runtime_ready(file: RlxFile) -> None:
    """Materialise a compact file; raise if some graph Constant is still without bytes."""
    file.check_integrity()
    filled = materialize_weights(file) if needs_materialize(file) else 0
    empty = [n for n in file.graph.nodes()
             if isinstance(n.op, Constant) and n.op.is_stripped and n.tensor_shape.numel != 0]
    if empty:
        raise ArtifactError(
            f"compact *.rlx still has {len(empty)} empty Constant(s) after materialize "
            f"(filled {filled} bytes), first {empty[0].label}: the weight table is incomplete"
        )


def into_runtime_graph(file: RlxFile) -> Graph:
    """The graph, materialised if needed, ready for `Session.compile`."""
    ensure_runtime_ready(file)
    return file.graph


def relayout(file: RlxFile, mode: MemoryMode) -> RlxFile:
    """A copy of `file` laid out for `mode` without re-baking; weight buffers are shared."""
    from rlx.artifact.model import RlxFile

    file.check_integrity()
    ops, rows = {}, []
    linked = {row.name: node for row, node in _linked_constants(file.graph, file.weights)}
    for row in file.weights:
        node = linked.get(row.name)
        if node is not None and node.op.is_stripped and row.nbytes:
            ops[node.id] = Constant(row.data)
        if node is not None and not row.nbytes and not node.op.is_stripped:
            note = row.note.replace(METADATA_ONLY, "").strip()
            row = row.replace(data=node.op.data, note=note)
        rows.append(row)
    whole = RlxFile(dataclasses.replace(file.meta), file.graph.replace_ops(ops), rows)
    whole.apply_memory_mode(mode)
    return whole


def apply_memory_mode(file: RlxFile, mode: MemoryMode) -> MemoryStats:
    """Lay out an already-built file's weight bytes for `mode` (used at the end of bake)."""
    stats = MemoryStats(mode=mode.value)
    if mode is MemoryMode.RUNTIME:
        file.weights, stats.table_bytes_stripped = strip_table_weight_bytes(file.weights)
    elif mode is MemoryMode.COMPACT:
        file.graph, stats.graph_bytes_stripped = strip_graph_weight_bytes(file.graph,
                                                                          file.weights)
    file.meta.memory_mode = mode.value
    file.refresh_meta()
    return stats
