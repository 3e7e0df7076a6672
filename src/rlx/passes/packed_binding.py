"""Bind weights that arrive already packed (e.g. GGUF Q8_0 / TQ2_0 tensors) to their MatMuls.

A packed row named like a `Param` [K, N] whose every reader is a MatMul taking it as the
right operand becomes a u8 Constant holding the row's bytes, and those MatMuls become
`DequantMatMul(scheme, n=N)`. GGUF stores a matmul weight as N rows of K values (shape
[N, K], the "BT" layout DequantMatMul reads), so the bytes are used as they are. A row that
cannot be bound this way is refused with the reason, never guessed at.

MLX rows (`<base>.weight` holding codes, encoding `mlx_*`, shape [N, K] as MLX saves a
Linear weight) come with `<base>.scales` (and `<base>.biases` for affine) rows. Their param
is read either as `[K, N]` by MatMuls directly, or as MLX's own `[N, K]` through 2-D
Transposes feeding MatMuls (`x @ W.T`); either way the MatMuls become
`DequantMatMul(scheme, n=N)` over `[x, codes, scales(, biases)]`, the scales and biases
becoming Constants of their own dtype and the Transposes going away.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

import numpy as np

from rlx.codecs import Encoding, decode, transposed
from rlx.deferred import Payload, compute, defer
from rlx.errors import BakeError, BindingError
from rlx.ir.dtype import DType
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.dequant import PACKED_SCHEMES, DequantMatMul, dequant_inputs
from rlx.ir.ops.linalg import MatMul
from rlx.ir.ops.shaping import Transpose
from rlx.ir.ops.sources import Constant, Param
from rlx.ir.rewrite import Rewriter
from rlx.ir.shape import Shape

__all__ = ["bind_packed", "mlx_companions", "orient_bt_tensors"]

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
    bound: dict[int, tuple[Encoding, int]] = {}  # param id -> (scheme, N)
    groups: dict[int, list[PackedRow]] = {}  # MLX param id -> its scales (and biases) rows
    transposes: dict[int, int] = {}  # a dropped Transpose -> the MLX param it read
    for node in graph.params():
        row = by_name.get(_param_name(node))
        if row is None:
            continue
        if _mlx(row.encoding):
            bound[node.id], groups[node.id], through = _check_mlx(graph, node, row, by_name,
                                                                  users)
            transposes.update(dict.fromkeys(through, node.id))
        else:
            bound[node.id] = _check(graph, node, row, users[node.id])
    if not bound:
        return graph, 0
    rw = Rewriter(graph)
    extra: dict[int, list[int]] = {}  # param id -> new ids of its scales (and biases)
    for node in graph.nodes():
        if node.id in bound:
            row = by_name[_param_name(node)]
            data = defer(np.asarray(row.data, np.uint8).reshape(-1))  # read from its file
            rw.substitute(node, Constant(data), (), Shape([data.size], DType.U8))
            extra[node.id] = [rw.emit_constant(_array(part), part.name)
                              for part in groups.get(node.id, ())]
        elif node.id in transposes:
            rw.drop(node.id)
        elif isinstance(node.op, MatMul) and (node.inputs[1] in bound
                                              or node.inputs[1] in transposes):
            param = transposes.get(node.inputs[1], node.inputs[1])
            scheme, n = bound[param]
            inputs = (rw.id(node.inputs[0]), rw.id(param), *extra.get(param, ()))
            rw.substitute(node, DequantMatMul(scheme, n), inputs, node.shape)
        else:
            rw.copy(node)
    log.info("bound %d packed weight(s) to DequantMatMul", len(bound))
    return rw.finish(), len(bound)


def mlx_companions(rows: Sequence[PackedRow]) -> set[str]:
    """Names of the scales/biases rows that go with an MLX weight row (bound with it, not
    to params of their own)."""
    bases = {r.name.removesuffix(".weight") for r in rows if _mlx(r.encoding)}
    return {r.name for r in rows if r.name.endswith((".scales", ".biases"))
            and r.name.rsplit(".", 1)[0] in bases}


def _mlx(encoding: str) -> bool:
    return encoding.startswith("mlx_")


_RUNNABLE = {s.label: s for s in PACKED_SCHEMES}
"""The encodings DequantMatMul runs, by the names weight files give them."""

_ROW_DTYPES = tuple(t.value for t in (DType.F32, DType.F16, DType.BF16, DType.U8))


def _array(row: PackedRow) -> np.ndarray:
    """A scales/biases row as the array it holds (a view of its bytes in their dtype)."""
    data = np.asarray(row.data).reshape(-1).view(np.uint8)
    values = data if row.encoding == DType.U8.value else decode(row.encoding, data)
    return values.reshape(row.shape)


def _check_mlx(graph: Graph, param: Node, row: PackedRow, by_name: dict[str, PackedRow],
               users: Sequence[list[int]]
               ) -> tuple[tuple[Encoding, int], list[PackedRow], list[int]]:
    """(scheme, N), the scales (and biases) rows, and the Transposes the MatMuls read it
    through; BindingError with the reason when the param cannot run packed."""
    name = param.source_name
    try:
        scheme = Encoding.parse(row.encoding)
    except BakeError:
        raise BindingError(f"packed weight {name!r} has unknown MLX scheme {row.encoding}") \
            from None
    if len(row.shape) != 2:
        raise BindingError(f"MLX weight {name!r} has shape {list(row.shape)}, [N, K] expected")
    n, k = row.shape
    base = name.removesuffix(".weight")
    wanted = [f"{base}.scales", *([f"{base}.biases"] if dequant_inputs(scheme) == 4 else [])]
    if any(w not in by_name for w in wanted):
        raise BindingError(f"MLX weight {name!r} ({scheme}) needs rows {' and '.join(wanted)}")
    parts = [by_name[w] for w in wanted]
    for part in parts:
        if part.encoding not in _ROW_DTYPES or \
                tuple(part.shape) != (n, k // scheme.block_size) or k % scheme.block_size:
            raise BindingError(f"MLX {part.name!r}: {part.encoding}{list(part.shape)} does not "
                               f"fit {k} values per row in groups of {scheme.block_size}")
    shape: Shape = param.tensor_shape
    readers = users[param.id]
    through: list[int] = []
    if shape.dims == (k, n):
        matmuls = readers
    elif shape.dims == (n, k) and readers and all(
            _is_transpose_2d(graph.node(r)) for r in readers):
        through = list(readers)
        matmuls = [m for t in through for m in users[t]]
    else:
        raise BindingError(f"MLX weight {name!r} [{n}, {k}]: param is {shape}; it must be "
                           f"[{k}, {n}] read by MatMuls, or [{n}, {k}] read through "
                           "Transposes by MatMuls")
    operand = set(through) or {param.id}
    for reader in matmuls:
        node = graph.node(reader)
        if not isinstance(node.op, MatMul) or node.inputs[1] not in operand \
                or node.inputs[0] in operand:
            raise BindingError(f"packed weight {name!r} is read by {node.label}, which cannot "
                               "take packed bytes: load it with --weights-policy f32")
    return (scheme, n), parts, through


def _is_transpose_2d(node: Node) -> bool:
    return isinstance(node.op, Transpose) and isinstance(node.shape, Shape) \
        and node.shape.rank == 2 and node.op.perm in (None, (1, 0))


def _param_name(node: Node) -> str:
    assert isinstance(node.op, Param)  # Graph.params() lists Param nodes
    return node.op.name


def _check(graph: Graph, param: Node, row: PackedRow,
           readers: list[int]) -> tuple[Encoding, int]:
    name = _param_name(param)
    scheme = _RUNNABLE.get(row.encoding)
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


def orient_bt_tensors(graph: Graph, tensors: Mapping[str, Payload],
                      bt: Collection[str]) -> dict[str, Payload]:
    """`tensors` with each `[N, K]`-stored matrix (names in `bt`) transposed to `[K, N]`
    where it binds a Param [K, N] read only as MatMuls' right operand: the rule by which
    `bind_packed` takes a packed row's bytes as BT, so a model baked from decoded (dense)
    GGUF tensors is the model baked from the packed ones (a large transpose is deferred:
    `rlx.deferred.compute`). Others are left as they are."""
    if not bt:
        return dict(tensors)
    users = graph.users()
    out = dict(tensors)
    for node in graph.params():
        name = node.source_name
        value = tensors.get(name)
        shape: Shape = node.tensor_shape
        if name not in bt or value is None or shape.rank != 2 or value.ndim != 2:
            continue
        readers = [graph.node(r) for r in users[node.id]]
        if not readers or not all(isinstance(r.op, MatMul) and r.inputs[1] == node.id
                                  and r.inputs[0] != node.id for r in readers):
            continue
        k, n = shape.dims
        if isinstance(k, int) and isinstance(n, int) and tuple(value.shape) == (n, k):
            out[name] = compute(transposed, (value,), (), (k, n), value.dtype)
            log.debug("GGUF matrix %r [%d, %d] bound transposed to its MatMul weight", name,
                      n, k)
    return out
