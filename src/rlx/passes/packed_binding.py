"""Bind weights that arrive already packed (e.g. GGUF Q8_0 / TQ2_0 tensors) to their MatMuls.

A packed row named like a `Param` [K, N] whose every reader is a MatMul taking it as the
right operand becomes a u8 Constant holding the row's bytes, and those MatMuls become
`DequantMatMul(scheme, n=N)`. GGUF stores a matmul weight as N rows of K values (shape
[N, K], the "BT" layout DequantMatMul reads), so the bytes are used as they are. A row that
cannot be bound this way is refused with the reason, never guessed at.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from rlx.errors import BindingError
from rlx.ir.dtype import DType
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.linalg import PACKED_SCHEMES, DequantMatMul, MatMul, QuantScheme
from rlx.ir.ops.sources import Constant, Param
from rlx.ir.rewrite import Rewriter
from rlx.ir.shape import Shape

__all__ = ["bind_packed"]

log = logging.getLogger(__name__)


class PackedRow(Protocol):
    name: str
    shape: tuple[int, ...]
    encoding: str
    data: np.ndarray


def bind_packed(graph: Graph, rows: Sequence[PackedRow]) -> tuple[Graph, int]:
    """Returns (new graph, number of params bound); rows naming no param are left alone."""
    by_name = {row.name: row for row in rows}
    users = graph.users()
    bound: dict[int, tuple[QuantScheme, int]] = {}  # param id -> (scheme, N)
    for node in graph.params():
        row = by_name.get(_param_name(node))
        if row is not None:
            bound[node.id] = _check(graph, node, row, users[node.id])
    if not bound:
        return graph, 0
    rw = Rewriter(graph)
    for node in graph.nodes():
        if node.id in bound:
            row = by_name[_param_name(node)]
            data = np.asarray(row.data, np.uint8).reshape(-1)
            rw.substitute(node, Constant(data), (), Shape([data.size], DType.U8))
        elif isinstance(node.op, MatMul) and node.inputs[1] in bound:
            scheme, n = bound[node.inputs[1]]
            rw.substitute(node, DequantMatMul(scheme, n), rw.inputs(node), node.shape)
        else:
            rw.copy(node)
    log.info("bound %d packed weight(s) to DequantMatMul", len(bound))
    return rw.finish(), len(bound)


def _param_name(node: Node) -> str:
    assert isinstance(node.op, Param)  # Graph.params() lists Param nodes
    return node.op.name


def _check(graph: Graph, param: Node, row: PackedRow,
           readers: list[int]) -> tuple[QuantScheme, int]:
    name = _param_name(param)
    scheme = next((s for s in PACKED_SCHEMES if s.value == row.encoding), None)
    if scheme is None:
        runnable = " and ".join(str(s) for s in PACKED_SCHEMES)
        raise BindingError(f"packed weight {name!r} is {row.encoding}; only {runnable} "
                           "run packed: load it with --weights-policy f32")
    shape: Shape = param.tensor_shape
    if shape.rank != 2 or not shape.is_static:
        raise BindingError(f"packed weight {name!r}: param is {shape}, a static [K, N] matrix "
                           "is needed")
    k, n = (int(d) for d in shape.dims)  # static
    if tuple(row.shape) != (n, k):
        raise BindingError(f"packed weight {name!r} has shape {list(row.shape)}; param {shape} "
                           f"needs the GGUF layout [{n}, {k}]")
    if k * n % scheme.block_size or \
            row.data.nbytes != k * n // scheme.block_size * scheme.block_bytes:
        raise BindingError(f"packed weight {name!r}: {row.data.nbytes} bytes of {scheme} do "
                           f"not hold {k * n} values")
    for reader in readers:
        node = graph.node(reader)
        if not isinstance(node.op, MatMul) or node.inputs != (node.inputs[0], param.id) \
                or node.inputs[0] == param.id:
            raise BindingError(f"packed weight {name!r} is read by {node.label}, which cannot "
                               "take packed bytes: load it with --weights-policy f32")
    return scheme, n
