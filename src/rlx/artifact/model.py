"""The in-memory artifact: `RlxFile` = meta + graph + weight table (`RlxWeight` rows).

`rlx.artifact` turns it into bytes on disk and back; this module owns only its shape and
the memory-layout methods (delegating to `rlx.artifact.memory`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import field

import numpy as np

from rlx.artifact import memory
from rlx.deferred import Deferred, Payload
from rlx.ir.graph import Graph
from rlx.ir.ops.sources import Constant, Input, Param, as_byte_array
from rlx.ir.shape import Dim, Shape
from rlx.record import dataclass

__all__ = ["LAYOUTS", "RlxIo", "RlxWeight", "RlxMeta", "RlxFile"]

LAYOUTS = ("row_major", "bt_nk", "padded_rows")
"""How a row's bytes are ordered: as the tensor, as packed W^T [N, K] blocks, or as rows
padded to whole blocks (read by DecodeWeight / DequantGather)."""


@dataclass(frozen=True)
class RlxIo:
    """A graph input or output: name, dims (symbolic names kept), dtype name."""

    name: str
    shape: tuple[Dim, ...]
    dtype: str


@dataclass(frozen=True)
class RlxWeight:
    """One weight-table row.

    `shape` is the logical shape ([K, N] for a matmul weight even when packed as BT [N, K]);
    `layout` says how `data` is ordered ("row_major" or "bt_nk"); `data` is flat bytes, or
    for a bake's large weights a `Deferred` (`rlx.deferred`: read or computed when written
    or used, never all held at once); `node_id` links the row to
    its graph Constant (None for rows with no node, e.g. kept source bindings).
    `row_aligned` tells per-row kernels whether each row of K is a whole number of blocks.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    encoding: str
    data: Payload = field(repr=False, compare=False)
    note: str = ""
    layout: str = "row_major"
    node_id: int | None = None
    row_aligned: bool = True

    def __post_init__(self):
        if not isinstance(self.data, Deferred):
            object.__setattr__(self, "data", as_byte_array(self.data))

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def replace(self, **changes) -> RlxWeight:
        return dataclasses.replace(self, **changes)


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


@dataclass
class RlxFile:
    """A baked model: meta, graph and weight table.

    `integrity_check`, when set (a file read with `verify="lazy"`), checks the weight bytes
    against their checksums; it runs once, the first time the weights are used.
    """

    meta: RlxMeta
    graph: Graph
    weights: list[RlxWeight] = field(default_factory=list)
    integrity_check: Callable[[], None] | None = field(default=None, repr=False, compare=False)

    def check_integrity(self) -> None:
        check, self.integrity_check = self.integrity_check, None
        if check is not None:
            try:
                check()
            except BaseException:
                self.integrity_check = check  # still unverified: check again next time
                raise

    @classmethod
    def from_baked(cls, graph: Graph, weights: Sequence[RlxWeight], **counters) -> RlxFile:
        """Build meta (I/O lists, counters) around a baked graph and its table."""
        inputs = [_io(n.op.name, n.tensor_shape) for n in graph.nodes() if isinstance(n.op, Input)]
        outputs = [_io(graph.node(o).name or f"out{o}", graph.node(o).tensor_shape)
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

    def weight(self, name: str) -> RlxWeight | None:
        return next((w for w in self.weights if w.name == name), None)

    def tensor(self, name: str) -> np.ndarray:
        """Weight `name` decoded (f16, Q8_0, TQ2_0 -> its dtype) in its logical layout
        ([K, N] for a matmul weight packed as `bt_nk`): a new array, as
        `safetensors.get_tensor` gives. Unknown names raise `ArtifactError`."""
        from rlx.artifact.tensors import decode_weight, find_weight

        self.check_integrity()
        return decode_weight(self, find_weight(self, name))

    # -- memory layout (rlx.artifact.memory) ---------------------------------------------------
    def needs_materialize(self) -> bool:
        return memory.needs_materialize(self)

    def materialize_weights(self) -> int:
        return memory.materialize_weights(self)

    def drop_weight_table_data(self) -> int:
        return memory.drop_weight_table_data(self)

    def into_runtime_graph(self) -> Graph:
        return memory.into_runtime_graph(self)

    def apply_memory_mode(self, mode: memory.MemoryMode) -> memory.MemoryStats:
        return memory.apply_memory_mode(self, mode)


def _io(name: str, shape: Shape) -> RlxIo:
    return RlxIo(name, shape.dims, shape.dtype.value)
