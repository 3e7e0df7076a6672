"""`import_onnx`: an ONNX model to an rlx `Graph` plus the bindings of its initializers.

The importer reads the protobuf (external data through a checked memory map), checks that
every op is one rlx can convert (listing all that are not, at once), orders the nodes, and
hands each node to its converter (`rlx.onnx.ops`). Ops without a converter that
ONNX defines as a function of other ops are expanded through that function body, as are
the model's own functions. Graph inputs, outputs and initializers keep their ONNX names.
"""

from __future__ import annotations

import heapq
import itertools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx.defs
from google.protobuf.message import DecodeError
from onnx import FunctionProto, GraphProto, ModelProto, NodeProto, TypeProto, helper

from rlx.errors import GraphError, ModelImportError, UnsupportedOpError
from rlx.ir import Graph, Shape, verify
from rlx.ir.graph import unique_name
from rlx.ir.shape import UNKNOWN
from rlx.onnx import ops  # noqa: F401  (registers the converters)
from rlx.onnx.branch_ranks import BranchRanks
from rlx.onnx.declared import declared_rank_misses, with_declared_outputs
from rlx.onnx.external import ExternalData
from rlx.onnx.layouts import refuse_layouts
from rlx.onnx.node import NodeContext, node_label, node_origin
from rlx.onnx.registry import (
    CONVERTERS,
    DOMAIN_CONVERTERS,
    NEVER_EXPANDED,
    find_converter,
)
from rlx.onnx.scope import Scope, finish_graph, free_variables, subgraph_attributes
from rlx.onnx.tensors import dtype_of, onnx_elem_type, sparse_to_array, tensor_to_array
from rlx.onnx.validate import check_model_text, check_node, check_text
from rlx.safeio import read_regular

__all__ = ["import_onnx", "Importer", "MIN_OPSET", "MAX_OPSET", "onnx_op_types", "read_model"]

MIN_OPSET = 7
"""The oldest default-domain opset imported as such. Older models are accepted when every
op they use is unchanged between their opset and this one (so it means the same)."""

MAX_OPSET = onnx.defs.onnx_opset_version()
"""The newest default-domain opset: the newest the installed `onnx` package knows."""

DEFAULT_DOMAINS = ("", "ai.onnx")

ModelSource = str | os.PathLike | bytes | bytearray | memoryview | ModelProto

MIN_EXPANSION = 256
EXPANSION_PER_NODE = 16
"""Function-body nodes an import may expand: 256 + 16 per node the model itself writes (a
schema function such as LayerNormalization expands to ~10)."""
MIN_DENSE_BUDGET = 16 << 20
DENSE_PER_MODEL_BYTE = 16
"""Bytes sparse tensors may densify to: 16x the model's size, at least 16 MiB."""
MAX_MODEL_BYTES = 2**31  # protobuf's own limit on a serialized message


def import_onnx(model: ModelSource, *, base_dir: str | os.PathLike | None = None,
                input_shapes: Mapping[str, Sequence[int | str]] | None = None,
                dims: Mapping[str, int] | None = None,
                ) -> tuple[Graph, dict[str, np.ndarray]]:
    """Read an ONNX model (a path, serialized bytes or a `ModelProto`) into an rlx graph.

    Returns `(graph, bindings)`: initializers become `Param`s named like them, with their
    values (native dtypes, views into the file where possible) in `bindings`. External data
    is read relative to the model's folder, or `base_dir` for a model given in memory.
    `input_shapes` fixes the dims of graph inputs by name (ints, or names for symbolic
    dims), for models that declare them unknown but branch on them; `dims` fixes symbolic
    dims by name wherever graph inputs declare them (`{"batch": 1}`).
    """
    proto, folder = _load(model, base_dir)
    try:
        return Importer(proto, folder, input_shapes, dims).run()
    except RecursionError:
        raise ModelImportError("the model nests subgraphs or functions too deeply") from None


def read_model(path: str | os.PathLike) -> ModelProto:
    """The `ModelProto` of an ONNX file, external data left where it is (pass it to
    `import_onnx` with `base_dir` set to the file's folder)."""
    return _load(path, None)[0]


def onnx_op_types(model: ModelProto) -> dict[str, int]:
    """The model's nodes by op type (domain-qualified outside the default domain), subgraphs
    included, Constant nodes left out: what a user counts as the model's computing nodes."""
    counts: dict[str, int] = {}

    def visit(nodes: Iterable[NodeProto]) -> None:
        for node in nodes:
            op = node.op_type if node.domain in DEFAULT_DOMAINS else \
                f"{node.domain}.{node.op_type}"
            if op != "Constant":
                counts[op] = counts.get(op, 0) + 1
            for sub in subgraph_attributes(node):
                visit(sub.node)

    visit(model.graph.node)
    return counts


def _load(model: ModelSource, base_dir) -> tuple[ModelProto, str | None]:
    folder = None if base_dir is None else os.fspath(base_dir)
    if isinstance(model, ModelProto):
        return model, folder
    if isinstance(model, (bytes, bytearray, memoryview)):
        data, where = bytes(model), "model bytes"
    else:
        where = os.fspath(model)
        # a regular file only (a FIFO would block, /dev/zero never end), read through one
        # descriptor
        data = read_regular(where, ModelImportError, limit=MAX_MODEL_BYTES)
        folder = folder or os.path.dirname(os.path.abspath(where))
    try:
        proto = ModelProto.FromString(data)
    except (DecodeError, ValueError, RuntimeError) as err:
        raise ModelImportError(f"{where}: not an ONNX model (protobuf: {err})") from None
    if not proto.HasField("graph"):
        raise ModelImportError(f"{where}: not an ONNX model (it has no graph)")
    return proto, folder


class Importer:
    """One model's conversion: opsets, functions, external data and the bindings."""

    def __init__(self, model: ModelProto, base_dir: str | None,
                 input_shapes: Mapping[str, Sequence[int | str]] | None = None,
                 dims: Mapping[str, int] | None = None):
        self.model = model
        self.input_shapes = dict(input_shapes or {})
        self.dims = {str(k): int(v) for k, v in (dims or {}).items()}
        self.external = ExternalData(base_dir, dense_budget=max(
            MIN_DENSE_BUDGET, DENSE_PER_MODEL_BYTE * model.ByteSize()))
        self.bindings: dict[str, np.ndarray] = {}
        check_model_text(model)
        self.opsets = self._opsets(model)
        self.functions = {(f.domain, f.name): f for f in model.functions}
        self._fresh = itertools.count()
        self._looked_at: set[tuple[str, str]] = set()  # local functions _unsupported saw
        self._free_memo: dict[int, tuple] = {}  # see free_variables
        # Function bodies expanded, in nodes: local functions calling each other twice
        # per level expand exponentially (a 1,135-byte model made 16,385 nodes in 11 s)
        written = sum(1 for _ in _all_nodes(model.graph)) + \
            sum(len(f.node) for f in model.functions)
        self.expansion_budget = MIN_EXPANSION + EXPANSION_PER_NODE * written
        self._expanding = 0  # > 0 while converting the body of a function-defined node
        self.producers: dict[str, str] = {}  # value name -> op type of the node writing it
        self.branch_ranks = BranchRanks()  # If nodes whose branches differ in rank

    # -- driver ------------------------------------------------------------------------------
    def run(self) -> tuple[Graph, dict[str, np.ndarray]]:
        """The model's graph and bindings (converted again per rank of an If that needs it,
        see `rlx.onnx.branch_ranks`)."""
        return self.branch_ranks.settle(self._run, outermost=True)

    def _run(self) -> tuple[Graph, dict[str, np.ndarray]]:
        graph = self.model.graph
        refuse_layouts(graph)
        unsupported = sorted(set(self._unsupported(graph.node, self.opsets)))
        if unsupported:
            raise UnsupportedOpError([_qualified(d, op) for d, op in unsupported],
                                     where=f"ONNX model {graph.name!r}",
                                     notes=_unsupported_notes(unsupported, self.opsets))
        scope = Scope(self, graph.name or "model")
        names = set()
        for value in graph.input:
            if value.name in names:
                raise ModelImportError(f"graph input {value.name!r} is listed twice")
            names.add(value.name)
        initialized = {t.name for t in graph.initializer} | \
            {t.values.name for t in graph.sparse_initializer}
        real = [v.name for v in graph.input if v.name not in initialized]
        unknown = sorted(set(self.input_shapes) - set(real))
        if unknown:
            raise ModelImportError(
                f"input_shapes names no graph input: {', '.join(unknown)} (the model's "
                f"inputs: {', '.join(real) or 'none'})")
        used_symbols: set[str] = set()
        for value in graph.input:
            if value.name not in initialized:  # an initialized input is a Param (IR >= 4)
                shape = self.declared_shape(value, f"graph input {value.name!r}", used_symbols)
                scope.define(value.name, scope.graph.input(value.name,
                                                           self._fixed(value.name, shape)))
        unused = sorted(set(self.dims) - used_symbols)
        if unused:
            declared = ", ".join(sorted(used_symbols)) or "none"
            raise ModelImportError(f"dims names no symbolic dim of the graph inputs: "
                                   f"{', '.join(unused)} (declared: {declared})")
        self.convert_graph_body(scope, graph)
        outputs = [(o.name, scope.get(o.name)) for o in graph.output]
        result = with_declared_outputs(finish_graph(scope.graph, outputs), graph.output)
        self.branch_ranks.misfits += declared_rank_misses(result, graph.output)
        used = {n.source_name for n in result.params()}
        try:
            verify(result)
        except GraphError as err:
            raise ModelImportError(f"imported graph does not verify: {err}") from None
        return result, {k: v for k, v in self.bindings.items() if k in used}

    def free_variables(self, graph: GraphProto) -> list[str]:
        """`scope.free_variables` of `graph`, each graph of the model computed once per import."""
        return free_variables(graph, self._free_memo)

    def convert_graph_body(self, scope: Scope, graph: GraphProto) -> None:
        """Initializers and nodes of `graph` (the model's or a subgraph) into `scope`."""
        for tensor in graph.initializer:
            scope.initializers[tensor.name] = tensor_to_array(tensor, self.external,
                                                              "initializer")
        for sparse in graph.sparse_initializer:
            scope.initializers[sparse.values.name] = sparse_to_array(
                sparse, self.external, f"sparse initializer {sparse.values.name!r}")
        for node in _topological(graph, scope.visible(), self.free_variables):
            self.convert_node(scope, node, self.opsets)

    def convert_node(self, scope: Scope, node: NodeProto, opsets: dict[str, int]) -> None:
        """Convert one node; the IR nodes it becomes carry its name as their origin (a
        function-defined node's body nodes carry the outer node's: the one the user sees)."""
        start = len(scope.graph)
        self._convert_node(scope, node, opsets)
        self.producers.update((name, node.op_type) for name in node.output if name)
        if not self._expanding:
            scope.graph.claim_origin(start, node_origin(node))

    def _convert_node(self, scope: Scope, node: NodeProto, opsets: dict[str, int]) -> None:
        label = node_label(node)
        check_text(node, label)
        domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
        convert = find_converter(domain, node.op_type)
        local = self.functions.get((node.domain, node.op_type))
        if local is None and domain == "":
            check_node(node, opsets[""], label)
        try:
            if local is not None:
                self._expand(scope, node, local, {})
                return
            if convert is None:
                found = self._schema_function(scope, node, opsets[""])
                if found is None:
                    pair = [(domain, node.op_type)]
                    raise UnsupportedOpError([_qualified(*pair[0])], where=node_label(node),
                                             notes=_unsupported_notes(pair, opsets))
                self._expand(scope, node, *found)
                return
            ctx = NodeContext(scope, node, opsets.get(domain, 1))
            results = convert(ctx)
        except GraphError as err:  # ShapeError is a GraphError
            raise ModelImportError(f"{label}: {err}") from None
        except (ValueError, IndexError, KeyError, TypeError, ArithmeticError) as err:
            # a value the schema allows but the node cannot mean (pads that do not fit the
            # axes, an axis past the rank): the model is malformed; the cause stays chained
            raise ModelImportError(f"{label}: malformed node ({type(err).__name__}: "
                                   f"{err})") from err
        self._bind_outputs(scope, node, results)

    def _bind_outputs(self, scope: Scope, node: NodeProto, results) -> None:
        if isinstance(results, (int, np.integer)):
            results = [int(results)]
        for i, name in enumerate(node.output):
            if not name:
                continue
            node_id = results[i] if i < len(results) else None
            if node_id is None:
                raise ModelImportError(f"{node_label(node)}: output {i} ({name!r}) is not "
                                       "supported")
            scope.define(name, node_id)

    # -- functions ---------------------------------------------------------------------------
    def _schema_function(self, scope: Scope, node: NodeProto, opset: int):
        """The ONNX function body defining `node`'s op at `opset` and the op's attribute
        defaults, or None when it has no body."""
        if node.op_type in NEVER_EXPANDED:
            return None
        schema: Any  # onnx's stubs lack the function-body accessors the bindings have
        try:
            schema = onnx.defs.get_schema(node.op_type, opset, "")
        except onnx.defs.SchemaError:
            return None
        body = b""
        if schema.has_function:
            body = schema.get_function_with_opset_version(opset) or b""
        if not body and schema.has_context_dependent_function:
            types = [self._type_proto(scope, name).SerializeToString() for name in node.input]
            try:
                body = schema.get_context_dependent_function_with_opset_version(
                    opset, node.SerializeToString(), types) or b""
            except Exception as err:  # onnx raises its own error kinds for bad nodes
                raise ModelImportError(f"{node_label(node)}: cannot expand its ONNX function "
                                       f"body: {err}") from None
        if not body:
            return None
        defaults = {name: a.default_value for name, a in schema.attributes.items()
                    if a.default_value.type != onnx.AttributeProto.UNDEFINED}
        return FunctionProto.FromString(body), defaults

    @staticmethod
    def _type_proto(scope: Scope, name: str) -> TypeProto:
        if not name:
            return TypeProto()
        shape = scope.shape(scope.get(name))
        dims = [None if d == UNKNOWN else d for d in shape.dims]
        return helper.make_tensor_type_proto(onnx_elem_type(shape.dtype), dims)

    def _expand(self, scope: Scope, node: NodeProto, function: FunctionProto,
                defaults: dict[str, onnx.AttributeProto]) -> None:
        """Convert `node` as the nodes of its function body, names made private;
        `defaults` are the op's attribute defaults (from its schema)."""
        opsets = dict(self.opsets)
        for entry in function.opset_import:
            opsets["" if entry.domain in DEFAULT_DOMAINS else entry.domain] = entry.version
        self.expansion_budget -= len(function.node)
        if self.expansion_budget < 0:
            raise ModelImportError(
                f"{node_label(node)}: expanding its function {function.name!r} exceeds the "
                f"node budget ({MIN_EXPANSION} + {EXPANSION_PER_NODE} per node the model "
                "writes): functions that call each other expand exponentially")
        prefix = f"{node.output[0] if node.output else node.op_type}/{function.name}" \
                 f"#{next(self._fresh)}/"
        self._expanding += 1
        try:
            for inner in _inline(function, node, prefix, defaults):
                self.convert_node(scope, inner, opsets)
        finally:
            self._expanding -= 1

    # -- checks ------------------------------------------------------------------------------
    def _opsets(self, model: ModelProto) -> dict[str, int]:
        opsets = {}
        for entry in model.opset_import:
            opsets["" if entry.domain in DEFAULT_DOMAINS else entry.domain] = entry.version
        version = opsets.get("")
        if version is None:
            if any(n.domain in DEFAULT_DOMAINS for n in model.graph.node):
                raise ModelImportError("the model imports no default-domain opset")
            opsets[""] = MAX_OPSET
        elif version < 1:
            raise ModelImportError(f"opset {version} is not an ONNX opset (they start at 1)")
        elif version > MAX_OPSET:
            raise ModelImportError(f"opset {version} is newer than {MAX_OPSET}, the newest "
                                   f"the installed onnx {onnx.__version__} knows")
        elif version < MIN_OPSET:
            _check_old_opset(model.graph, version)
        return opsets

    def _unsupported(self, nodes: Iterable[NodeProto],
                     opsets: dict[str, int]) -> list[tuple[str, str]]:
        """(domain, op type) of the ops nothing here converts ("" for ONNX's domain). Each
        local function's body is looked at once, however often it is called (functions
        calling each other twice per level made this walk exponential)."""
        missing: list[tuple[str, str]] = []
        for node in nodes:
            for sub in subgraph_attributes(node):
                missing += self._unsupported(sub.node, opsets)
            key = (node.domain, node.op_type)
            local = self.functions.get(key)
            if local is not None:
                if key not in self._looked_at:
                    self._looked_at.add(key)
                    missing += self._unsupported(local.node, opsets)
            elif node.domain not in DEFAULT_DOMAINS:
                if find_converter(node.domain, node.op_type) is None:
                    missing.append((node.domain, node.op_type))
            elif node.op_type not in CONVERTERS and not _has_function(node.op_type,
                                                                       opsets[""]):
                missing.append(("", node.op_type))
        return missing

    def declared_shape(self, value, what: str, used: set[str]) -> Shape:
        """The rlx shape of a graph input's declared type; unknown dims get fresh names."""
        kind = value.type.WhichOneof("value")
        if kind != "tensor_type":
            raise ModelImportError(f"{what}: {kind or 'untyped'} values are not supported "
                                   "(rlx graphs carry plain tensors)")
        tensor = value.type.tensor_type
        dtype = dtype_of(tensor.elem_type, what)
        if not tensor.HasField("shape"):
            raise ModelImportError(f"{what}: its rank is not declared")
        dims = []
        for axis, dim in enumerate(tensor.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value >= 0:
                dims.append(dim.dim_value)
            elif dim.dim_param and dim.dim_param != UNKNOWN:
                used.add(dim.dim_param)
                dims.append(self.dims.get(dim.dim_param, dim.dim_param))
            else:  # unknown (or exported as -1 / "?"): a name of its own
                dims.append(unique_name(f"{value.name}_{axis}", used))
        return Shape(dims, dtype)

    def _fixed(self, name: str, declared: Shape) -> Shape:
        """`declared` with the dims the caller gave in `input_shapes`."""
        given = self.input_shapes.get(name)
        if given is None:
            return declared
        dims = tuple(d if isinstance(d, str) else int(d) for d in given)
        clash = [(a, b) for a, b in zip(declared.dims, dims)
                 if isinstance(a, int) and isinstance(b, int) and a != b]
        if len(dims) != declared.rank or clash:
            raise ModelImportError(f"input_shapes[{name!r}] = {list(dims)} does not fit the "
                                   f"declared shape {declared}")
        return declared.with_dims(dims)



def _has_function(op_type: str, opset: int) -> bool:
    if op_type in NEVER_EXPANDED:
        return False
    schema: Any  # onnx's stubs lack the function-body accessors the bindings have
    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return False
    return bool(schema.has_function and schema.get_function_with_opset_version(opset)) or \
        schema.has_context_dependent_function


def _qualified(domain: str, op_type: str) -> str:
    return f"{domain or 'ai.onnx'}.{op_type}"


def _unsupported_notes(missing: Iterable[tuple[str, str]], opsets: dict[str, int]) -> list[str]:
    """Per unsupported op, where rlx does convert it: under another domain, or (ONNX ops)
    at the opsets whose function body rlx expands."""
    notes = []
    for domain, op_type in missing:
        name = _qualified(domain, op_type)
        elsewhere = [_qualified(d, op_type) for d, table in
                     (("", CONVERTERS), *DOMAIN_CONVERTERS.items())
                     if d != domain and op_type in table]
        if elsewhere:
            notes.append(f"{name}: rlx converts {', '.join(elsewhere)}")
            continue
        if domain:
            notes.append(f"{name}: no converter for any opset of {domain}")
            continue
        versions = [v for v in range(1, MAX_OPSET + 1) if _has_function(op_type, v)]
        if versions:
            notes.append(f"{name}: no converter at opset {opsets['']}; rlx expands it at "
                         f"opset {versions[0]}..{versions[-1]}")
        else:
            notes.append(f"{name}: no converter for any opset")
    return notes


def _check_old_opset(graph: GraphProto, version: int) -> None:
    """An opset older than MIN_OPSET is read as MIN_OPSET when no op used changed since."""
    changed = set()
    for node in _all_nodes(graph):
        if node.domain not in DEFAULT_DOMAINS:
            continue
        try:
            new = onnx.defs.get_schema(node.op_type, MIN_OPSET, "").since_version
        except onnx.defs.SchemaError:
            continue  # not in opset 7 either: an op rlx has a converter for, or unsupported
        try:
            old = onnx.defs.get_schema(node.op_type, version, "").since_version
        except onnx.defs.SchemaError:
            old = None  # the op did not exist yet
        if old != new:
            changed.add(node.op_type)
    if changed:
        raise ModelImportError(f"opset {version} is older than {MIN_OPSET} and these ops "
                               f"changed since: {', '.join(sorted(changed))}")


def _all_nodes(graph: GraphProto) -> Iterable[NodeProto]:
    for node in graph.node:
        yield node
        for sub in subgraph_attributes(node):
            yield from _all_nodes(sub)


# -- node order --------------------------------------------------------------------------------
def _topological(graph: GraphProto, available: set[str],
                 free: Callable[[GraphProto], list[str]] = free_variables) -> list[NodeProto]:
    """`graph`'s nodes in an order where every value is made before it is read.

    Models are usually sorted already (one pass); otherwise nodes wait for their inputs.
    An input nobody makes, or a cycle, is a malformed model.
    """
    known = set(available) | {v.name for v in graph.input}
    known |= {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}
    needs = [[n for n in (*node.input, *(v for g in subgraph_attributes(node)
                                          for v in free(g))) if n]
             for node in graph.node]
    made = {o for node in graph.node for o in node.output if o}
    for node, names in zip(graph.node, needs):
        missing = [n for n in names if n not in known and n not in made]
        if missing:
            raise ModelImportError(f"{node_label(node)}: input {missing[0]!r} is not defined "
                                   "by any node, graph input or initializer")
    order = _kahn(list(graph.node), needs, known)
    for value in graph.output:
        if value.name not in known:
            raise ModelImportError(f"graph output {value.name!r} is not defined by any node, "
                                   "graph input or initializer")
    return order


def _kahn(nodes: list[NodeProto], needs: list[list[str]], known: set[str]) -> list[NodeProto]:
    """Nodes in dependency order in time linear in the graph (nodes waiting on a value are
    released when it is made; ready nodes go in their listed order, so a sorted graph
    keeps its order). Updates `known` with every value made."""
    start = set(known)
    for node, names in zip(nodes, needs):  # a sorted graph (the usual case): one pass
        if not all(n in known for n in names):
            break
        known.update(o for o in node.output if o)
    else:
        return list(nodes)
    known.clear()
    known.update(start)
    missing = [len({n for n in names if n not in known}) for names in needs]
    waiters: dict[str, list[int]] = {}
    for i, names in enumerate(needs):
        for name in {n for n in names if n not in known}:
            waiters.setdefault(name, []).append(i)
    ready = [i for i, count in enumerate(missing) if not count]
    heapq.heapify(ready)
    order: list[NodeProto] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(nodes[i])
        for out in nodes[i].output:
            if not out or out in known:
                continue
            known.add(out)
            for j in waiters.pop(out, ()):
                missing[j] -= 1
                if not missing[j]:
                    heapq.heappush(ready, j)
    if len(order) < len(nodes):
        stuck = next(i for i, count in enumerate(missing) if count)
        raise ModelImportError(f"{node_label(nodes[stuck])}: its inputs depend on its own "
                               "outputs (the graph has a cycle)")
    return order


# -- functions ---------------------------------------------------------------------------------
def _inline(function: FunctionProto, node: NodeProto, prefix: str,
            defaults: dict[str, onnx.AttributeProto]) -> list[NodeProto]:
    """The body of `function` specialised to `node`: formal names -> the node's values,
    private names prefixed, attribute references -> the node's attributes (or defaults)."""
    rename = {formal: actual for formal, actual in
              itertools.zip_longest(function.input, node.input[:len(function.input)],
                                    fillvalue="") if formal}
    rename.update((formal, actual) for formal, actual in zip(function.output, node.output))
    given = {a.name: a for a in node.attribute}
    defaults = {**defaults, **{a.name: a for a in function.attribute_proto}}

    def name(value: str) -> str:
        if not value:
            return value
        return rename.setdefault(value, prefix + value)

    body = []
    for inner in function.node:
        new = NodeProto()
        new.CopyFrom(inner)
        del new.attribute[:]
        for attr in inner.attribute:
            if attr.ref_attr_name:
                source = given.get(attr.ref_attr_name, defaults.get(attr.ref_attr_name))
                if source is None:
                    continue  # not given and no default: the op's own default applies
                resolved = onnx.AttributeProto()
                resolved.CopyFrom(source)
                resolved.name = attr.name
                new.attribute.append(resolved)
            else:
                new.attribute.append(attr)
        new.input[:] = [name(v) for v in inner.input]
        new.output[:] = [name(v) for v in inner.output]
        for sub in subgraph_attributes(new):
            _rename_free(sub, rename)
        body.append(new)
    return body


def _rename_free(graph: GraphProto, rename: dict[str, str]) -> None:
    """Point a nested graph's reads of the function's private names at their new names."""
    for node in graph.node:
        node.input[:] = [rename.get(v, v) for v in node.input]
        for sub in subgraph_attributes(node):
            _rename_free(sub, rename)
    for value in graph.output:
        value.name = rename.get(value.name, value.name)
