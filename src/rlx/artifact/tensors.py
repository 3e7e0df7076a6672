"""A weight-table row back as the array it stands for, in its logical layout.

Rows hold encoded bytes (f16, Q8_0, TQ2_0 blocks, or plain dtypes) and packed matmul
weights are stored transposed (`bt_nk`: the block stream of W^T, [N, K]); a user asking for
a weight wants the [K, N] values the model was exported with, as `safetensors`'
`get_tensor(name)` gives them. Where the row's bytes live depends on the memory mode (the
table, or the linked graph Constant): both are looked at.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence

import numpy as np

from rlx.artifact.weight_row import RlxWeight
from rlx.codecs import Encoding, decode, decode_rows, padded_length
from rlx.errors import ArtifactError
from rlx.ir.dtype import DType
from rlx.ir.graph import Graph
from rlx.ir.ops.packed import DecodeWeight, DequantGather
from rlx.ir.ops.sources import Constant
from rlx.payload import byte_view, materialize

__all__ = ["decode_weight", "find_weight"]

_ENCODINGS = {e.value for e in Encoding}


def find_weight(weights: Sequence[RlxWeight], name: str, model: str) -> RlxWeight:
    """The row called `name`, or an error naming `model` and the closest names."""
    row = next((w for w in weights if w.name == name), None)
    if row is not None:
        return row
    names = [w.name for w in weights]
    close = difflib.get_close_matches(name, names, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else \
        f" ({len(names)} weights; `rlx-bake inspect` lists them)"
    raise ArtifactError(f"{model}: no weight named {name!r}{hint}")


def _row_bytes(graph: Graph, row: RlxWeight) -> np.ndarray:
    if row.nbytes:
        return byte_view(materialize(row.data))
    if row.node_id is not None and 0 <= row.node_id < len(graph):
        op = graph.node(row.node_id).op
        if isinstance(op, Constant) and op.nbytes:
            return byte_view(materialize(op.data))
    raise ArtifactError(f"weight {row.name!r} holds no bytes in the table or the graph "
                        "(a metadata-only row)")


def decode_weight(graph: Graph, row: RlxWeight) -> np.ndarray:
    """`row`'s values as a new array of its logical dtype and shape (its bytes from the
    table, or from its Constant in `graph` when the table's were stripped)."""
    data = _row_bytes(graph, row)
    count = math.prod(row.shape)
    dtype = DType(row.dtype).numpy
    if row.layout == "padded_rows":
        flat = np.empty(0)  # decoded by the op that reads the rows
    elif row.encoding in _ENCODINGS:
        flat = decode(row.encoding, data, count)
    else:  # a plain dtype stored as itself (integer and bool weights)
        flat = data.view(DType(row.encoding).numpy)[:count]
    if row.layout == "bt_nk":
        k, n = row.shape
        values = flat.reshape(n, k).T
    elif row.layout == "row_major":
        values = flat.reshape(row.shape)
    elif row.layout == "padded_rows":
        values = _padded_rows(graph, row, data)
    else:
        raise ArtifactError(f"weight {row.name!r}: unknown layout {row.layout!r}")
    return np.array(values, dtype=dtype, order="C")  # (ascontiguousarray makes rank 0 rank 1)


def _padded_rows(graph: Graph, row: RlxWeight, data: np.ndarray) -> np.ndarray:
    """A weight stored as padded rows, decoded by the op that reads it (which knows the
    row length and the stored order); without a reader in the top graph, the table shape
    is the logical one when no padding was added."""
    readers = [n for n in graph.nodes() if row.node_id in n.inputs
               and isinstance(n.op, (DecodeWeight, DequantGather))]
    if readers and isinstance(readers[0].op, DecodeWeight):
        exponents = readers[0].inputs[1:]  # row exponents: a small Constant, never stripped
        return readers[0].op.dense(data, *(_constant_values(graph, i) for i in exponents))
    if readers and isinstance(readers[0].op, DequantGather):
        op = readers[0].op
        return decode_rows(op.encoding, data, op.vocab, op.dim)
    count = math.prod(row.shape)
    if padded_length(row.encoding, row.shape[-1]) != row.shape[-1]:
        raise ArtifactError(f"weight {row.name!r} is stored as padded rows read inside a "
                            "subgraph; export the graph to read it")
    return decode(row.encoding, data, count).reshape(row.shape)


def _constant_values(graph: Graph, node_id: int) -> np.ndarray:
    node = graph.node(node_id)
    if not isinstance(node.op, Constant) or not node.op.nbytes:
        raise ArtifactError(f"{node.label}: row exponents must be a constant with its bytes")
    return node.op.array(node.tensor_shape)
