"""Unfold weights: catalogue the constants that feed weight slots of matmuls and convolutions.

Looks at input 1 of `MatMul`, `DequantMatMul`, `Conv` and `ConvTranspose`, and at the
captured inputs of control flow (subgraph weights, once hoisted), and lists each
Constant found there once, in graph order, as a `WeightRow`: its LOGICAL shape, dtype,
encoding and layout. A packed weight is described by the matrix it stands for (`[K, N]`,
`bt_nk`), never by its byte length (the seed mixed both, inventory 9.7). The bake's weight
table is built from these rows; the graph is not changed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from rlx.ir.dtype import DType
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.dequant import DequantMatMul
from rlx.ir.ops.linalg import MatMul
from rlx.ir.ops.packed import DecodeWeight, DequantGather
from rlx.ir.ops.sources import Constant
from rlx.ir.ops.windows import Conv, ConvTranspose
from rlx.ir.shape import Dim
from rlx.passes.subgraphs import captured_inputs

__all__ = ["WeightRow", "unfold_weights", "WEIGHT_CONSUMERS"]

log = logging.getLogger(__name__)

WEIGHT_CONSUMERS = (MatMul, DequantMatMul, Conv, ConvTranspose)
"""Ops whose input 1 is a weight."""

STORED_WEIGHT_READERS = (DecodeWeight, DequantGather)
"""Ops whose input 0 is a weight stored as padded rows (rlx.ir.ops.packed)."""


@dataclass(frozen=True)
class WeightRow:
    """One weight constant of the graph.

    `name` is the node's name, or None for an unnamed constant (the caller names it from
    `node_id`, which is only valid for the graph it was taken from). `dtype` is the logical
    element type (for packed weights: what they decode to, the consumer's dtype).
    `row_aligned` says whether each row of the stored matrix starts on a block boundary
    (always true for unblocked encodings).
    """

    name: str | None
    node_id: int
    shape: tuple[Dim, ...]
    dtype: DType
    encoding: str
    layout: str
    row_aligned: bool
    note: str


def unfold_weights(graph: Graph) -> list[WeightRow]:
    """A row for every constant read as the weight of a matmul or convolution, or captured
    by control flow (the subgraph weights `hoist_subgraph_weights` brought out)."""
    rows: list[WeightRow] = []
    seen: set[int] = set()
    for node in graph.nodes():
        if isinstance(node.op, WEIGHT_CONSUMERS):
            weights = node.inputs[1:2]
        elif isinstance(node.op, STORED_WEIGHT_READERS):
            weights = node.inputs[:1]
        else:
            weights = captured_inputs(node)
        for weight in map(graph.node, weights):
            if not isinstance(weight.op, Constant) or weight.id in seen:
                continue
            seen.add(weight.id)
            if isinstance(node.op, DequantMatMul):
                rows.append(_packed_row(graph, node, weight))
            elif isinstance(node.op, STORED_WEIGHT_READERS):
                rows.append(_stored_row(node, weight))
            else:
                rows.append(_dense_row(weight))
            log.debug("unfold: %s", rows[-1])
    log.info("unfold %r: %d weight constant(s)", graph.name, len(rows))
    return rows


def _dense_row(weight: Node) -> WeightRow:
    shape = weight.tensor_shape
    encoding = shape.dtype.value
    return WeightRow(weight.name, weight.id, shape.dims, shape.dtype, encoding,
                     "row_major", True, f"unfolded {encoding}")


def _packed_row(graph: Graph, matmul: Node, weight: Node) -> WeightRow:
    """The `[K, N]` matrix a DequantMatMul's packed `[N, K]` block stream stands for.

    K is x's last dim; when that is symbolic, the stream length tells it.
    """
    assert isinstance(matmul.op, DequantMatMul)
    scheme, n = matmul.op.scheme, matmul.op.n
    k = graph.node(matmul.inputs[0]).tensor_shape.dims[-1]
    if not isinstance(k, int) and n:
        k = int(weight.tensor_shape.dims[0]) // scheme.block_bytes * scheme.block_size // n
    aligned = isinstance(k, int) and k % scheme.block_size == 0
    return WeightRow(weight.name, weight.id, (k, n), matmul.tensor_shape.dtype, scheme.label,
                     "bt_nk", aligned, f"packed {scheme} (BT [N, K] = [{n}, {k}])")


def _stored_row(reader: Node, weight: Node) -> WeightRow:
    """A weight stored as padded rows: the table shape is the tensor's (layout
    `padded_rows`), or when padding was added the stored `[rows, padded L]` matrix, which is
    what the bytes hold (readers check a row's bytes against its shape); the note says
    both."""
    op = reader.op
    shape: tuple[int, ...]
    if isinstance(op, DequantGather):
        rows, length, shape, what = op.vocab, op.dim, (op.vocab, op.dim), "gather table"
        perm = ""
    else:
        assert isinstance(op, DecodeWeight)
        rows, length, shape, what = op.rows, op.row_length, op.shape, "tensor"
        perm = f", stored transposed {list(op.perm)}" if op.perm else ""
    block = op.encoding.block_size
    padded = -(-length // block) * block
    pad = f" padded to {padded}" if padded != length else ""
    table_shape = tuple(shape) if padded == length else (rows, padded)
    return WeightRow(weight.name, weight.id, table_shape, DType.F32, op.encoding.label,
                     "padded_rows", True, f"packed {op.encoding}: {what} {list(shape)} as "
                                          f"{rows} rows of {length}{pad}{perm}")
