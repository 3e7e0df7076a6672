"""`Node` and `Graph`: an append-only SSA list of ops in topological order.

A node's id is its index and never changes; its inputs are ids of earlier nodes. Passes never
edit a graph: they build a new one (see `rlx.ir.rewrite`). Builder methods infer the output
shape when it is not given and check the inputs against the op as they go.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from rlx.errors import GraphError, ShapeError
from rlx.ir.dtype import DType
from rlx.ir.ops.base import Op, OutShape
from rlx.ir.ops.elementwise import Activation, Binary, BinaryOp, Unary
from rlx.ir.ops.linalg import MatMul
from rlx.ir.ops.multi import TupleGet
from rlx.ir.ops.sources import Constant, Input, Param
from rlx.ir.shape import Shape
from rlx.payload import Deferred
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = ["ShapeLike", "Node", "Graph", "unique_name"]

ShapeLike = Shape | tuple[Shape, ...]


@dataclass(frozen=True, slots=True)
class Node:
    id: int
    op: Op
    inputs: tuple[int, ...]
    shape: ShapeLike
    name: str | None = None
    # the source-model node this one computes part of (an ONNX node's name, or its first
    # output when unnamed): what reports show the user. Unlike `name` it need not be unique
    # (one ONNX node may become several IR nodes) and it is not an identity for anything.
    origin: str | None = None

    @property
    def is_tuple(self) -> bool:
        return isinstance(self.shape, tuple)

    @property
    def tensor_shape(self) -> Shape:
        """`shape` of a node that yields one tensor (most do: not Split, TopK, If, ...)."""
        if isinstance(self.shape, tuple):
            raise ShapeError(f"{self.label} yields {len(self.shape)} values, not one tensor")
        return self.shape

    @property
    def source_name(self) -> str:
        """The name an Input is fed by or a Param is bound by (`op.name`)."""
        if not isinstance(self.op, (Input, Param)):
            raise GraphError(f"{self.label} is not an Input or a Param")
        return self.op.name

    @property
    def label(self) -> str:
        """How messages refer to this node: `%3 'name' (Conv)`, and the ONNX node it came
        from when that is another name (`%7 (MatMul) of '/fc/Gemm'`)."""
        name = f" {self.name!r}" if self.name else ""
        origin = f" of {self.origin!r}" if self.origin and self.origin != self.name else ""
        return f"%{self.id}{name} ({type(self.op).__name__}){origin}"


class Graph:
    """A named list of nodes plus the ids of its outputs."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self._nodes: list[Node] = []
        self._by_name: dict[str, int] = {}
        self.outputs: list[int] = []
        # set by rlx.ir.verify to what it checked, (node count, outputs); nodes are only
        # ever appended, so a graph still matching it needs no second check
        self.verified_as: tuple | None = None

    # -- reading ---------------------------------------------------------------------------
    def nodes(self) -> Sequence[Node]:
        return tuple(self._nodes)

    def node(self, node_id: int) -> Node:
        try:
            return self._nodes[node_id]
        except (IndexError, TypeError):
            raise GraphError(f"graph {self.name!r} has no node %{node_id}") from None

    def __len__(self) -> int:
        return len(self._nodes)

    def __iter__(self):
        return iter(self._nodes)

    def find(self, name: str) -> Node | None:
        """The node with this name, or None."""
        node_id = self._by_name.get(name)
        return None if node_id is None else self._nodes[node_id]

    def inputs(self) -> list[Node]:
        return [n for n in self._nodes if isinstance(n.op, Input)]

    def params(self) -> list[Node]:
        return [n for n in self._nodes if isinstance(n.op, Param)]

    def users(self) -> list[list[int]]:
        """For each node id, the ids of the nodes that read it (in order, with repeats)."""
        users: list[list[int]] = [[] for _ in self._nodes]
        for node in self._nodes:
            for i in node.inputs:
                users[i].append(node.id)
        return users

    # -- building --------------------------------------------------------------------------
    def add_node(
        self,
        op: Op,
        inputs: Iterable[int] = (),
        shape: ShapeLike | None = None,
        name: str | None = None,
        origin: str | None = None,
    ) -> int:
        """Append `op` applied to `inputs`; infer `shape` when omitted. Returns the new id."""
        inputs = tuple(int(i) for i in inputs)
        for i in inputs:
            if not 0 <= i < len(self._nodes):
                raise GraphError(
                    f"{type(op).__name__} node %{len(self._nodes)} reads %{i}, which is not an "
                    "earlier node (nodes must be added in topological order)"
                )
        lo, hi = op.arity
        if len(inputs) < lo or (hi is not None and len(inputs) > hi):
            want = f"{lo}" if lo == hi else f"{lo}..{'' if hi is None else hi}"
            raise GraphError(f"{type(op).__name__} takes {want} inputs, got {len(inputs)}")
        if shape is None:
            shape = self.infer(op, inputs)
        if name is not None:
            if name in self._by_name:
                raise GraphError(f"graph {self.name!r}: duplicate node name {name!r}")
            self._by_name[name] = len(self._nodes)
        node = Node(len(self._nodes), op, inputs, shape, name, origin)
        self._nodes.append(node)
        return node.id

    def claim_origin(self, start: int, origin: str | None) -> None:
        """Give nodes `start..` that have no origin yet (graph inputs and params aside) the
        origin `origin`: the nodes one source node became, wherever they were emitted."""
        if origin is None:
            return
        for i in range(start, len(self._nodes)):
            node = self._nodes[i]
            if node.origin is None and not isinstance(node.op, (Input, Param)):
                self._nodes[i] = Node(node.id, node.op, node.inputs, node.shape, node.name,
                                      origin)

    def infer(self, op: Op, inputs: Sequence[int]) -> OutShape:
        """Output shape of `op` applied to existing nodes, raising `ShapeError` with context."""
        in_shapes = [self._nodes[i].shape for i in inputs]
        if any(isinstance(s, tuple) for s in in_shapes) and not isinstance(op, TupleGet):
            raise ShapeError(f"{type(op).__name__}: reads a tuple-valued node; use TupleGet")
        try:
            return op.infer(in_shapes)
        except ShapeError as err:
            where = f"graph {self.name!r} node %{len(self._nodes)}"
            raise ShapeError(f"{where}: {err}") from None
        except NotImplementedError:
            raise ShapeError(
                f"{type(op).__name__}: shape must be given (cannot be inferred)") from None

    def set_outputs(self, outputs: Iterable[int]) -> None:
        outputs = [int(o) for o in outputs]
        for o in outputs:
            self.node(o)
        self.outputs = outputs

    # -- builder shorthands ----------------------------------------------------------------
    def input(self, name: str, shape: Shape) -> int:
        return self.add_node(Input(name), (), shape, name=name)

    def param(self, name: str, shape: Shape) -> int:
        return self.add_node(Param(name), (), shape, name=name)

    def constant(
        self, value, shape: Shape | None = None, name: str | None = None
    ) -> int:
        """A constant from an array or a `Deferred` one (shape taken from it) or raw bytes
        (`shape` required)."""
        if shape is None:
            if isinstance(value, (bytes, bytearray, memoryview)):
                raise GraphError("constant from raw bytes needs a shape")
            if not isinstance(value, Deferred):
                value = np.asarray(value)
            shape = Shape(value.shape, DType.from_numpy(value.dtype))
        elif isinstance(value, np.ndarray) and value.dtype != shape.dtype.numpy:
            value = value.astype(shape.dtype.numpy)
        op = Constant(value)
        if shape.nbytes is not None and op.nbytes not in (0, shape.nbytes):
            raise ShapeError(
                f"constant {name or ''!s}: {op.nbytes} bytes do not fill shape {shape}"
            )
        return self.add_node(op, (), shape, name=name)

    def binary(self, op: BinaryOp, a: int, b: int, shape: Shape | None = None) -> int:
        return self.add_node(Binary(op), (a, b), shape)

    def unary(self, kind: Activation, x: int, shape: Shape | None = None) -> int:
        return self.add_node(Unary(kind), (x,), shape)

    def matmul(self, a: int, b: int, shape: Shape | None = None) -> int:
        return self.add_node(MatMul(), (a, b), shape)

    def unpack(self, node_id: int) -> list[int]:
        """`TupleGet` nodes for every output of a tuple-valued node."""
        shape = self.node(node_id).shape
        if not isinstance(shape, tuple):
            raise GraphError(f"node %{node_id} is not tuple-valued")
        return [self.add_node(TupleGet(i), (node_id,)) for i in range(len(shape))]

    def replace_ops(self, ops: Mapping[int, Op]) -> Graph:
        """A copy whose nodes `ops` keys get new ops (same id, inputs, shape and name).

        For swapping payloads of Constants (stripping, materialising weights) in O(nodes)
        without re-inferring anything; the original graph is left as it was. A graph whose
        only changes are Constant payloads stays verified (see `verified_as`)."""
        out = Graph(self.name)
        out._nodes = [
            Node(n.id, ops[n.id], n.inputs, n.shape, n.name, n.origin) if n.id in ops
            else n
            for n in self._nodes
        ]
        out._by_name = dict(self._by_name)
        out.outputs = list(self.outputs)
        if all(isinstance(op, Constant) and isinstance(self._nodes[i].op, Constant)
               for i, op in ops.items()):
            out.verified_as = self.verified_as
        return out

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self._nodes)} nodes, outputs={self.outputs})"


def unique_name(base: str, used: set[str]) -> str:
    """`base`, or `base_1`, `base_2`, ...: the first not in `used`, which it is added to."""
    name, k = base, 1
    while name in used:
        name, k = f"{base}_{k}", k + 1
    used.add(name)
    return name
