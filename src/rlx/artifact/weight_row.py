"""`RlxWeight`: one row of an artifact's weight table, on its own so that the memory layouts
(`rlx.artifact.memory`) and the tensor reader (`rlx.artifact.tensors`) can work on rows
without importing the `RlxFile` that holds them."""

from __future__ import annotations

from rlx.ir.ops.sources import as_byte_array
from rlx.payload import Deferred, Payload
from rlx.record import dataclass, field, replace

__all__ = ["LAYOUTS", "RlxWeight"]

LAYOUTS = ("row_major", "bt_nk", "padded_rows")
"""How a row's bytes are ordered: as the tensor, as packed W^T [N, K] blocks, or as rows
padded to whole blocks (read by DecodeWeight / DequantGather)."""


@dataclass(frozen=True, slots=True)
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
        return replace(self, **changes)
