"""The in-memory artifact: `RlxFile` = meta + graph + weight table (`RlxWeight` rows), and
the operations on a whole file: where its weight bytes live (its memory layout, with
`rlx.artifact.memory`) and its weights back as arrays (with `rlx.artifact.tensors`).

`rlx.artifact` turns it into bytes on disk and back. The seed's function spellings of the
memory-layout methods (`materialize_weights(file)`, `into_runtime_graph(file)`, ...) are
the same methods, named here as functions (DESIGN.md section 4).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rlx.artifact.memory import (
    METADATA_ONLY,
    MemoryMode,
    MemoryStats,
    linked_constants,
    strip_graph_weight_bytes,
    strip_table_weight_bytes,
)
from rlx.artifact.weight_row import LAYOUTS, RlxWeight
from rlx.errors import ArtifactError
from rlx.ir.graph import Graph
from rlx.ir.ops.sources import Constant, Input, Param
from rlx.ir.shape import Dim, Shape
from rlx.record import dataclass, field, replace

if TYPE_CHECKING:  # a file with a self-test or a plan brings its module (rlx.artifact.reader)
    from rlx.artifact.precision import PrecisionPlan
    from rlx.artifact.self_test import SelfTest, SelfTestSection

__all__ = ["ALL", "GRAPH", "LAYOUTS", "TABLE", "ArtifactOrigin", "io_of", "RlxIo", "RlxWeight",
           "RlxMeta", "RlxFile", "needs_materialize",
           "materialize_weights", "drop_weight_table_data", "ensure_runtime_ready",
           "into_runtime_graph", "relayout", "apply_memory_mode"]

GRAPH, TABLE, ALL = "graph", "table", "all"
"""The parts of a file's weight bytes `RlxFile.check_integrity` checks: the graph's
constants (what a compile runs), the weight table's rows, or both. A duplex file holds
the weights in both: a load checks the layout it runs, and the other one when it is used."""


@dataclass(frozen=True)
class RlxIo:
    """A graph input or output: name, dims (symbolic names kept), dtype name."""

    name: str
    shape: tuple[Dim, ...]
    dtype: str


@dataclass(frozen=True)
class ArtifactOrigin:
    """Where a file read from disk came from, as validated (docs/DESIGN 2b: check what
    you use, use what you checked): `buffer`, the bytes that were checksummed (and
    signature-checked) and that the weights are views into, None when they are no single
    mapping (decrypted plaintext, a dir package); `key`, the content those bytes hold,
    which engine caches are keyed by; `encrypted`, whether the file on disk is (nothing of
    it may then be cached in plaintext)."""

    buffer: memoryview | None
    key: str
    encrypted: bool = False


@dataclass
class RlxMeta:
    name: str
    inputs: list[RlxIo] = field(default_factory=list)
    outputs: list[RlxIo] = field(default_factory=list)
    params_remaining: list[str] = field(default_factory=list)
    nodes: int = 0
    constant_bytes: int = 0
    params_baked: int = 0
    weight_count: int = 0
    weight_bytes: int = 0
    skipped_zero_matmuls: int = 0
    ternary_packed: int = 0
    quant_packed: int = 0
    profile: str = ""
    memory_mode: str = "duplex"
    # a fast bake's precision plan (`rlx.artifact.precision.PrecisionPlan.to_json`), or {}
    precision_plan: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The header's `meta` object (dims as lists, as JSON has them; no precision plan
        unless there is one, so files of the other profiles keep their bytes)."""

        import dataclasses  # the writer's: a load never asks

        meta = dataclasses.asdict(self)
        if not meta["precision_plan"]:
            del meta["precision_plan"]
        for io_list in ("inputs", "outputs"):
            meta[io_list] = [{**io, "shape": list(io["shape"])} for io in meta[io_list]]
        return meta


@dataclass
class RlxFile:
    """A baked model: meta, graph and weight table.

    `integrity_check`, when set (a file read with `verify="lazy"`), checks the weight bytes
    of a part (GRAPH, TABLE or ALL) against their checksums, each byte once, the first time
    that part is used, and says whether every part now is checked (it is then dropped).
    """

    meta: RlxMeta
    graph: Graph
    weights: list[RlxWeight] = field(default_factory=list)
    integrity_check: Callable[[str], bool] | None = field(default=None, repr=False,
                                                          compare=False)
    origin: ArtifactOrigin | None = field(default=None, repr=False, compare=False)
    # the bundled self-test (rlx.artifact.self_test): as built, or as read (decoded on use)
    self_test: SelfTest | SelfTestSection | None = field(default=None, repr=False,
                                                          compare=False)

    def check_integrity(self, part: str = ALL) -> None:
        """Check the bytes of `part` before they are used (DESIGN.md 2b); IntegrityError if
        one differs from its checksum (and it stays unchecked: the next use checks again)."""
        check = self.integrity_check
        if check is not None and check(part):
            self.integrity_check = None

    @classmethod
    def from_baked(cls, graph: Graph, weights: Sequence[RlxWeight], **counters) -> RlxFile:
        """Build meta (I/O lists, counters) around a baked graph and its table."""
        inputs = [io_of(n.op.name, n.tensor_shape) for n in graph.nodes()
                  if isinstance(n.op, Input)]
        outputs = [io_of(graph.node(o).name or f"out{o}", graph.node(o).tensor_shape)
                   for o in graph.outputs]
        remaining = sorted({n.op.name for n in graph.nodes() if isinstance(n.op, Param)})
        meta = RlxMeta(graph.name, inputs, outputs, remaining, **counters)
        file = cls(meta, graph, list(weights))
        file.refresh_meta()
        return file

    def refresh_meta(self) -> None:
        """Recompute the size counters from the graph and table as they are now."""
        self.meta.nodes = len(self.graph)
        self.meta.constant_bytes = sum(
            n.op.nbytes for n in self.graph.nodes() if isinstance(n.op, Constant))
        self.meta.weight_count = len(self.weights)
        self.meta.weight_bytes = sum(w.nbytes for w in self.weights)

    @property
    def precision_plan(self) -> PrecisionPlan | None:
        """The plan a fast bake stored (already checked by the reader), or None."""
        if not self.meta.precision_plan:
            return None
        from rlx.artifact.precision import PrecisionPlan  # a fast bake's files only

        return PrecisionPlan.from_json(self.meta.precision_plan, _refuse)

    def weight(self, name: str) -> RlxWeight | None:
        return next((w for w in self.weights if w.name == name), None)

    def tensor(self, name: str) -> np.ndarray:
        """Weight `name` decoded (f16, Q8_0, TQ2_0 -> its dtype) in its logical layout
        ([K, N] for a matmul weight packed as `bt_nk`): a new array, as
        `safetensors.get_tensor` gives. Unknown names raise `ArtifactError`."""
        from rlx.artifact.tensors import decode_weight, find_weight  # the codecs, when used

        self.check_integrity()
        return decode_weight(self.graph, find_weight(self.weights, name, self.meta.name))

    # -- memory layout (rlx.artifact.memory) ---------------------------------------------------
    def needs_materialize(self) -> bool:
        """True when a row with bytes points at a graph Constant whose bytes were stripped."""
        return any(row.nbytes and constant.is_stripped
                   for row, _, constant in linked_constants(self.graph, self.weights))

    def materialize_weights(self) -> int:
        """Point each stripped graph Constant at its row's bytes (shared, not copied).

        Returns the number of bytes made available to the graph. Rows without a graph node
        (biases that were folded, kept source bindings) are fine and skipped.
        """
        self.check_integrity(TABLE)
        ops, filled = {}, 0
        for row, node_id, constant in linked_constants(self.graph, self.weights):
            if row.nbytes and constant.is_stripped:
                ops[node_id] = Constant(row.data)
                filled += row.nbytes
        if ops:
            self.graph = self.graph.replace_ops(ops)
        return filled

    def drop_weight_table_data(self) -> int:
        """After materialising, forget the table's bytes (the graph keeps them)."""
        self.weights, dropped = strip_table_weight_bytes(self.weights)
        return dropped

    def ensure_runtime_ready(self) -> None:
        """Materialise a compact file; raise if some graph Constant is still without bytes.
        The graph's own bytes are checked, the table's only when they fill the graph."""
        self.check_integrity(GRAPH)
        filled = self.materialize_weights() if self.needs_materialize() else 0
        empty = [n for n in self.graph.nodes()
                 if isinstance(n.op, Constant) and n.op.is_stripped
                 and n.tensor_shape.numel != 0]
        if empty:
            raise ArtifactError(
                f"compact *.rlx still has {len(empty)} empty Constant(s) after materialize "
                f"(filled {filled} bytes), first {empty[0].label}: the weight table is "
                "incomplete")

    def into_runtime_graph(self) -> Graph:
        """The graph, materialised if needed, ready for `Session.compile`."""
        self.ensure_runtime_ready()
        return self.graph

    def relayout(self, mode: MemoryMode) -> RlxFile:
        """A copy laid out for `mode` without re-baking; weight buffers are shared."""
        self.check_integrity()
        ops: dict[int, Constant] = {}
        rows = []
        linked = {row.name: (node_id, constant)
                  for row, node_id, constant in linked_constants(self.graph, self.weights)}
        for row in self.weights:
            if row.name not in linked:
                rows.append(row)
                continue
            node_id, constant = linked[row.name]
            if constant.is_stripped and row.nbytes:
                ops[node_id] = Constant(row.data)
            if not row.nbytes and not constant.is_stripped:
                note = row.note.replace(METADATA_ONLY, "").strip()
                row = row.replace(data=constant.data, note=note)
            rows.append(row)
        whole = RlxFile(replace(self.meta), self.graph.replace_ops(ops), rows,
                        self_test=self.self_test)
        whole.apply_memory_mode(mode)
        return whole

    def apply_memory_mode(self, mode: MemoryMode) -> MemoryStats:
        """Lay out this file's weight bytes for `mode` (used at the end of a bake)."""
        stats = MemoryStats(mode=mode.value)
        if mode is MemoryMode.RUNTIME:
            self.weights, stats.table_bytes_stripped = strip_table_weight_bytes(self.weights)
        elif mode is MemoryMode.COMPACT:
            self.graph, stats.graph_bytes_stripped = strip_graph_weight_bytes(self.graph,
                                                                              self.weights)
        self.meta.memory_mode = mode.value
        self.refresh_meta()
        return stats


# the seed's function spellings (DESIGN.md section 4): `materialize_weights(file)` is
# `file.materialize_weights()`, one implementation under both names
needs_materialize = RlxFile.needs_materialize
materialize_weights = RlxFile.materialize_weights
drop_weight_table_data = RlxFile.drop_weight_table_data
ensure_runtime_ready = RlxFile.ensure_runtime_ready
into_runtime_graph = RlxFile.into_runtime_graph
relayout = RlxFile.relayout
apply_memory_mode = RlxFile.apply_memory_mode


def _refuse(message: str) -> None:
    raise ArtifactError(message)


def io_of(name: str, shape: Shape) -> RlxIo:
    """The meta entry of an input or output of `shape`."""
    return RlxIo(name, shape.dims, shape.dtype.value)
