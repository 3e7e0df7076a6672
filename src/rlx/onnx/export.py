"""ONNX export of a baked graph: `export_onnx(file_or_graph, path=None) -> onnx.ModelProto`.

The model is standard ONNX (opset `EXPORT_OPSET`, 21 where blocked quantisation needs its
`block_size`; plus `com.microsoft` when packed weights become MatMulNBits) that
`onnx.checker.check_model(full_check=True)` accepts. Every rlx op maps to one ONNX op or a
short chain of standard ops (`export_ops`); a tuple-valued node becomes one ONNX node with
several outputs, which its `TupleGet`s name; `If` / `Loop` / `Scan` bodies become ONNX
subgraphs whose captured inputs are outer-scope names. A `Composite` (a foreign node kept
whole) is written as that node where the target runs its domain (`domains`: all of them
by default, as the model had them) and as its body, inline, where it does not.

Where weights go is the caller's choice (`WeightPlacer`): inline `raw_data` (the default,
`path` then moves the large ones to external data next to the file), a reference into the
`.rlx` file itself (the onnxruntime engine), or a graph input the caller binds later (the
OpenVINO engine). Large weights always sit in the main graph, so a placer sees them all.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import onnx
from onnx import TensorProto, helper

from rlx.codecs import Encoding
from rlx.errors import ExportError
from rlx.ir.dtype import DType
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.multi import TupleGet
from rlx.ir.ops.sources import Constant, Input, Param
from rlx.ir.shape import UNKNOWN, Shape
from rlx.onnx.export_quant import PackedForm, nbits_supported
from rlx.version import __version__

__all__ = ["EXPORT_OPSET", "ExportSummary", "ExportResult", "WeightPlacer", "export_onnx",
           "build_onnx", "onnx_dtype", "LARGE_WEIGHT_BYTES", "inline_tensor", "weight_names",
           "external_tensor"]

EXPORT_OPSET = 20
"""Opset 20: Gelu (with tanh approximation) is one node; every other op rlx has exists."""

LARGE_WEIGHT_BYTES = 1024
"""Constants at least this big are weights (placed by the `WeightPlacer`); smaller ones
(shape vectors, scalars) stay inline in their own graph."""

_ONNX_DTYPE = {
    DType.F32: TensorProto.FLOAT, DType.F16: TensorProto.FLOAT16,
    DType.BF16: TensorProto.BFLOAT16, DType.F64: TensorProto.DOUBLE,
    DType.I8: TensorProto.INT8, DType.I16: TensorProto.INT16, DType.I32: TensorProto.INT32,
    DType.I64: TensorProto.INT64, DType.U8: TensorProto.UINT8, DType.U16: TensorProto.UINT16,
    DType.U32: TensorProto.UINT32, DType.U64: TensorProto.UINT64, DType.BOOL: TensorProto.BOOL,
}


def onnx_dtype(dtype: DType | np.dtype) -> int:
    if not isinstance(dtype, DType):
        dtype = DType.from_numpy(dtype)
    return _ONNX_DTYPE[dtype]


class WeightPlacer(Protocol):
    """Where one large weight goes: a TensorProto (inline or external data) to use as an
    initializer, or None to make it a graph input of that name (bound by the caller)."""

    def __call__(self, name: str, array: np.ndarray) -> TensorProto | None: ...


def inline_tensor(name: str, array: np.ndarray) -> TensorProto:
    """A TensorProto holding `array`'s bytes (little-endian raw_data, any rlx dtype)."""
    arr = np.asarray(array)  # (np.ascontiguousarray would make a scalar 1-D)
    return helper.make_tensor(name, onnx_dtype(arr.dtype), arr.shape, arr.tobytes(order="C"),
                              raw=True)


def external_tensor(name: str, array: np.ndarray, location: str, offset: int) -> TensorProto:
    """A TensorProto of `array`'s type and shape whose bytes are `location` at `offset`."""
    tensor = TensorProto(name=name, data_type=onnx_dtype(array.dtype), dims=list(array.shape))
    for key, value in (("location", location), ("offset", str(offset)),
                       ("length", str(array.nbytes))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    tensor.data_location = TensorProto.EXTERNAL
    return tensor


@dataclass
class ExportSummary:
    """What the export did with the graph, for the CLI and for engines' logs."""

    nodes: int = 0
    weights: int = 0
    weight_bytes: int = 0
    packed: dict[str, int] = field(default_factory=dict)  # "Q8_0 -> MatMulNBits(8 bits)": count
    opset: int = EXPORT_OPSET

    def lines(self) -> list[str]:
        out = [f"opset {self.opset}, {self.nodes} ONNX nodes, {self.weights} weights "
               f"({self.weight_bytes:,} bytes)"]
        out += [f"{count} packed weight(s): {how}" for how, count in sorted(self.packed.items())]
        return out


@dataclass
class ExportResult:
    model: onnx.ModelProto
    summary: ExportSummary
    inputs_bound: dict[str, np.ndarray]  # weights the placer made graph inputs


def _default_packed() -> PackedForm:
    return PackedForm.NBITS if nbits_supported(8, 32) else PackedForm.DEQUANTIZE


def build_onnx(graph: Graph, *, placer: WeightPlacer = inline_tensor,
               packed: PackedForm | str | None = None, name: str | None = None,
               constant_names: dict[int, str] | None = None,
               domains: Collection[str] | None = None) -> ExportResult:
    """The ONNX model of a runnable rlx graph (every Constant with its bytes).

    `constant_names` names main-graph Constants by node id (the weight table's names).
    `domains`: the op domains besides ONNX's the target runs (None: any), which decides
    whether a `Composite` is written as its node or as its body."""
    from rlx.onnx import export_ops

    form = _default_packed() if packed is None else PackedForm(packed)
    builder = _Builder(form, placer, export_ops)
    builder.constant_names = constant_names or {}
    builder.domains = None if domains is None else frozenset(domains)
    main = builder.main_graph(graph, name or graph.name)
    opsets = [helper.make_opsetid("", builder.opset)]
    opsets += [helper.make_opsetid(domain, 1) for domain in sorted(builder.domains_used)]
    model = helper.make_model(main, opset_imports=opsets, producer_name="rlx",
                              producer_version=__version__)
    model.ir_version = min(model.ir_version, 10)  # what onnxruntime >= 1.18 reads
    builder.summary.nodes = _count_nodes(main)
    builder.summary.opset = builder.opset
    return ExportResult(model, builder.summary, builder.bound)


def export_onnx(file_or_graph: Any, path: str | os.PathLike | None = None, *,
                packed: PackedForm | str | None = None,
                summary: ExportSummary | None = None,
                domains: Collection[str] | None = None) -> onnx.ModelProto:
    """Export a baked `RlxFile` (or a runnable `Graph`) as ONNX; with `path`, also write it,
    weights of `LARGE_WEIGHT_BYTES` and more in `<name>.onnx.data` next to it, atomically.

    `packed`: how DequantMatMul weights are written (`export_quant.PackedForm`); default
    MatMulNBits when the installed onnxruntime runs it, else f32. `summary`, when given, is
    filled with what was done. `domains`: the foreign op domains the target runs (default
    all: ops kept whole are written as the model had them; `()` writes their standard-op
    bodies, for runtimes without onnxruntime's com.microsoft ops).
    """
    graph = _runnable_graph(file_or_graph)
    result = build_onnx(graph, packed=packed, constant_names=weight_names(file_or_graph),
                        domains=domains)
    if summary is not None:
        summary.__dict__.update(result.summary.__dict__)
    if path is not None:
        onnx.checker.check_model(result.model, full_check=True)
        _save(result.model, Path(path))
    return result.model


def weight_names(file: Any) -> dict[int, str]:
    """Graph Constant id -> weight-table name, for an RlxFile (empty for a bare Graph)."""
    rows = getattr(file, "weights", None) or ()
    return {row.node_id: row.name for row in rows if row.node_id is not None}


def _runnable_graph(file_or_graph: Any) -> Graph:
    if isinstance(file_or_graph, Graph):
        return file_or_graph
    into = getattr(file_or_graph, "into_runtime_graph", None)
    if into is None:
        raise ExportError(f"export_onnx takes an RlxFile or a Graph, got "
                          f"{type(file_or_graph).__name__}")
    return into()


def _save(model: onnx.ModelProto, path: Path) -> None:
    """Write `path` and `path.data` via temporary names, then rename both into place."""
    import copy

    data_name = f"{path.name}.data"
    tmp_model = path.with_name(f".{path.name}.tmp")
    tmp_data = path.with_name(f".{data_name}.tmp")
    out = copy.deepcopy(model)
    big = [t for t in _all_initializers(out.graph) if len(t.raw_data) >= LARGE_WEIGHT_BYTES]
    try:
        offset = 0
        with open(tmp_data, "wb") as f:
            for tensor in big:
                pad = -offset % 64
                f.write(b"\0" * pad)
                offset += pad
                raw = tensor.raw_data
                f.write(raw)
                for key, value in (("location", data_name), ("offset", str(offset)),
                                   ("length", str(len(raw)))):
                    entry = tensor.external_data.add()
                    entry.key, entry.value = key, value
                tensor.ClearField("raw_data")
                tensor.data_location = TensorProto.EXTERNAL
                offset += len(raw)
        with open(tmp_model, "wb") as f:
            f.write(out.SerializeToString())
        if big:
            os.replace(tmp_data, path.with_name(data_name))
        else:
            tmp_data.unlink()
        os.replace(tmp_model, path)
    finally:
        for tmp in (tmp_model, tmp_data):
            if tmp.exists():
                tmp.unlink()


def _all_initializers(graph: onnx.GraphProto):
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _all_initializers(attr.g)


def _count_nodes(graph: onnx.GraphProto) -> int:
    total = len(graph.node)
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                total += _count_nodes(attr.g)
    return total


# -- the builder -------------------------------------------------------------------------------
Values = dict[int, Any]  # node id -> ONNX value name (str) or names (list, tuple-valued nodes)


class _Builder:
    """State shared by every scope of one export: names, large weights, the summary."""

    def __init__(self, packed: PackedForm, placer: WeightPlacer, ops):
        self.packed = packed
        self.placer = placer
        self.ops = ops
        self.used: set[str] = set()
        self.summary = ExportSummary()
        self.bound: dict[str, np.ndarray] = {}
        self.main_inits: list[TensorProto] = []
        self.main_inputs: list[onnx.ValueInfoProto] = []
        self.domains: frozenset[str] | None = None  # foreign domains the target runs
        self.domains_used: set[str] = set()
        self.opset = EXPORT_OPSET  # raised by ops that need a newer one (blocked quantisation)
        self.node_names: set[str] = set()
        self.constant_names: dict[int, str] = {}
        self.main: Graph | None = None

    def fresh(self, base: str, used: set[str] | None = None) -> str:
        """A name not used yet (values and nodes are separate namespaces in ONNX)."""
        used = self.used if used is None else used
        base = base or "v"
        name, k = base, 1
        while name in used:
            k += 1
            name = f"{base}_{k}"
        used.add(name)
        return name

    def weight(self, hint: str, array: np.ndarray) -> str:
        """A large array as a main-graph initializer or bound input; its value name."""
        name = self.fresh(hint)
        self.summary.weights += 1
        self.summary.weight_bytes += int(array.nbytes)
        tensor = self.placer(name, array)
        if tensor is None:
            self.bound[name] = array
            self.main_inputs.append(_value_info(name, DType.from_numpy(array.dtype),
                                                array.shape))
        else:
            self.main_inits.append(tensor)
        return name

    def note_packed(self, encoding: Encoding, how: str) -> None:
        key = f"{encoding.short_name} -> {how}"
        self.summary.packed[key] = self.summary.packed.get(key, 0) + 1

    def main_graph(self, graph: Graph, name: str) -> onnx.GraphProto:
        self.main = graph
        for node in graph.inputs():
            self.used.add(node.source_name)
        values: Values = {n.id: n.source_name for n in graph.inputs()}
        out_names = [graph.node(o).name or f"out{o}" for o in graph.outputs]
        self.used.update(out_names)
        anchor = graph.inputs()[0].source_name if graph.inputs() else None
        scope = _Scope(self, graph, values, anchor)
        nodes, inits = scope.emit(out_names)
        inputs = [_value_info(n.source_name, n.tensor_shape.dtype, n.tensor_shape.dims)
                  for n in graph.inputs()]
        outputs = [_value_info(nm, graph.node(o).tensor_shape.dtype,
                               graph.node(o).tensor_shape.dims)
                   for nm, o in zip(out_names, graph.outputs)]
        return helper.make_graph(nodes, _safe(name), inputs + self.main_inputs, outputs,
                                 self.main_inits + inits)

    def subgraph(self, graph: Graph, bound: Values, formal: int, anchor: str | None,
                 label: str) -> onnx.GraphProto:
        """A body: its first `formal` Inputs are the ONNX subgraph's inputs; the others are
        bound to outer names (`bound`, by input position)."""
        inputs = graph.inputs()
        values: Values = {}
        formals = []
        for k, node in enumerate(inputs):
            if k < formal:
                values[node.id] = self.fresh(f"{label}/{node.source_name}")
                shape = node.tensor_shape
                formals.append(_value_info(values[node.id], shape.dtype, shape.dims,
                                           loose=True))
            else:
                values[node.id] = bound[k]
        out_names = [self.fresh(f"{label}/out{k}") for k in range(len(graph.outputs))]
        scope = _Scope(self, graph, values, anchor if anchor else
                       (values[inputs[0].id] if inputs else None))
        nodes, inits = scope.emit(out_names)
        outputs = [_value_info(nm, graph.node(o).tensor_shape.dtype,
                               graph.node(o).tensor_shape.dims, loose=True)
                   for nm, o in zip(out_names, graph.outputs)]
        return helper.make_graph(nodes, _safe(label), formals, outputs, inits)


class _Scope:
    """One graph being written: its nodes, small initializers and value names."""

    def __init__(self, builder: _Builder, graph: Graph, values: Values, anchor: str | None):
        self.b = builder
        self.graph = graph
        self.values = values
        self.anchor = anchor
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []

    def emit(self, out_names: list[str]) -> tuple[list[onnx.NodeProto], list[TensorProto]]:
        graph = self.graph
        targets: dict[int, str] = {}
        for name, o in zip(out_names, graph.outputs):
            node = graph.node(o)
            produced = not isinstance(node.op, (Input, Constant, TupleGet)) and not node.is_tuple
            if produced and o not in targets and o not in self.values:
                targets[o] = name
        for node in graph.nodes():
            if node.id in self.values:
                continue
            if isinstance(node.op, Param):
                raise ExportError(f"{node.label}: param {node.op.name!r} has no value; "
                                  "bake the graph with its weights before exporting")
            if isinstance(node.op, TupleGet):
                self.values[node.id] = self.value(node.inputs[0])[node.op.index]
                continue
            if isinstance(node.op, Constant):
                continue  # written when first read (a packed weight read raw never is)
            self.values[node.id] = self.op_node(node, targets.get(node.id))
        for name, o in zip(out_names, graph.outputs):
            if self.value(o) != name:  # (a graph input may be an output as it is)
                self.add("Identity", [self.values[o]], [name], f"{name}/Identity")
        return self.nodes, self.inits

    # -- values ---------------------------------------------------------------------------
    def value(self, node_id: int) -> Any:
        """The ONNX name of a node's value, writing a Constant on its first use."""
        if node_id not in self.values:
            node = self.graph.node(node_id)
            if not isinstance(node.op, Constant):
                raise ExportError(f"{node.label} is read before it is written")
            self.values[node_id] = self.constant(node)
        return self.values[node_id]

    def constant(self, node: Node) -> str:
        assert isinstance(node.op, Constant)  # callers pass Constant nodes
        if node.op.is_stripped and node.tensor_shape.numel:
            raise ExportError(f"{node.label}: constant has no bytes (a compact artifact); "
                              "export the RlxFile, which materialises its weights")
        array = node.op.array(node.tensor_shape)
        named = self.b.constant_names.get(node.id) if self.graph is self.b.main else None
        return self.array(array, named or node.name or f"const{node.id}")

    def array(self, array: np.ndarray, hint: str = "c") -> str:
        """A value holding `array`: a main-graph weight when large, else inline here."""
        if array.nbytes >= LARGE_WEIGHT_BYTES:
            return self.b.weight(_safe(hint), array)
        name = self.b.fresh(_safe(hint))
        self.inits.append(inline_tensor(name, array))
        return name

    def ints(self, values, hint: str = "i") -> str:
        return self.array(np.asarray(values, dtype=np.int64), hint)

    def op_node(self, node: Node, target: str | None) -> Any:
        handler = self.b.ops.HANDLERS.get(type(node.op))
        if handler is None:
            raise ExportError(f"{node.label}: no ONNX export for op {type(node.op).__name__}")
        base = node.name or f"{type(node.op).__name__}_{node.id}"
        if isinstance(node.shape, tuple):
            outs = [self.b.fresh(f"{base}:{k}") for k in range(len(node.shape))]
        else:
            outs = [target or self.b.fresh(base)]
        raw = getattr(handler, "raw_inputs", ())
        names = ["" if k in raw else self.value(i) for k, i in enumerate(node.inputs)]
        call = _Call(self, node, names, outs, base)
        handler(call)
        return outs if node.is_tuple else outs[0]

    def add(self, op_type: str, inputs: list[str], outputs: list[str], name: str,
            domain: str = "", **attrs) -> None:
        if domain:
            self.b.domains_used.add(domain)
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op_type, inputs, outputs,
                                           name=self.b.fresh(name, self.b.node_names),
                                           domain=domain or None, **attrs))


class _Call:
    """What a handler sees: the rlx node, its input names, the names it must produce."""

    def __init__(self, scope: _Scope, node: Node, inputs: list[str], outs: list[str],
                 base: str):
        self.scope = scope
        self.node = node
        self.op = node.op
        self.x = inputs
        self.outs = outs
        self.base = base

    @property
    def builder(self) -> _Builder:
        return self.scope.b

    def shape(self, k: int = 0) -> Shape:
        return self.scope.graph.node(self.node.inputs[k]).tensor_shape

    @property
    def out_shape(self) -> Shape:
        return self.node.tensor_shape

    def final(self, op_type: str, inputs: list[str], domain: str = "", **attrs) -> None:
        """The node that writes this rlx node's outputs."""
        self.scope.add(op_type, inputs, self.outs, self.base, domain, **attrs)

    def tmp(self, op_type: str, inputs: list[str], domain: str = "", **attrs) -> str:
        """An intermediate node; its one output's name."""
        out = self.scope.b.fresh(f"{self.base}/{op_type}")
        self.scope.add(op_type, inputs, [out], f"{self.base}/{op_type}", domain, **attrs)
        return out

    def const(self, array: np.ndarray, hint: str = "c") -> str:
        return self.scope.array(np.asarray(array), f"{self.base}/{hint}")

    def ints(self, values, hint: str = "i") -> str:
        return self.scope.ints(values, f"{self.base}/{hint}")

    def scalar(self, value, dtype: DType) -> str:
        return self.const(np.asarray(value, dtype=dtype.numpy), "k")

    def subgraph(self, graph: Graph, bound: Values, formal: int, label: str,
                 anchor: str | None = None) -> onnx.GraphProto:
        return self.scope.b.subgraph(graph, bound, formal, anchor or self.scope.anchor,
                                     _safe(f"{self.base}/{label}"))

    @property
    def anchor(self) -> str | None:
        return self.scope.anchor

    def inline(self, graph: Graph) -> None:
        """`graph`'s nodes written here, its Inputs bound to this node's inputs in order and
        its outputs to this node's outputs."""
        values: Values = {node.id: name for node, name in zip(graph.inputs(), self.x)}
        scope = _Scope(self.scope.b, graph, values, self.scope.anchor)
        nodes, inits = scope.emit(self.outs)
        self.scope.nodes += nodes
        self.scope.inits += inits


def _value_info(name: str, dtype: DType, dims, loose: bool = False) -> onnx.ValueInfoProto:
    """A typed value; symbolic dims keep their names (UNKNOWN is unnamed). `loose` (bodies)
    writes only the rank: a body's static claim may not hold on every iteration."""
    shape = [None if loose or not isinstance(d, int) or d == UNKNOWN else d for d in dims]
    if not loose:
        shape = [d if isinstance(d, int) else (None if d == UNKNOWN else d)
                 for d in dims]
    return helper.make_tensor_value_info(name, onnx_dtype(dtype), shape)


def _safe(name: str) -> str:
    return name.replace(" ", "_") or "v"


def opset_of(model: onnx.ModelProto) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


Handler = Callable[[_Call], None]
