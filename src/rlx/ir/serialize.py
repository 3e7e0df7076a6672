"""Graph <-> JSON-ready dicts, with ops by name and attributes by field name.

Enum attributes are written as their value strings, tuples as lists, subgraphs as nested
graph dicts. Constant payloads go through `encode_constant`/`decode_constant`, so the
artifact writer can replace them with blob references; the default is base64 text, which
makes a self-contained graph JSON file.
"""

from __future__ import annotations

import enum
import functools
import sys
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any

from rlx.enums import lookup
from rlx.errors import GraphError
from rlx.ir.dtype import DType
from rlx.ir.graph import Graph, Node
from rlx.ir.ops.base import Op, op_type
from rlx.ir.ops.sources import Constant
from rlx.ir.shape import Shape
from rlx.payload import byte_view, materialize
from rlx.record import fields

__all__ = [
    "GRAPH_JSON_FORMAT", "GRAPH_JSON_VERSION", "ConstantEncoder", "ConstantDecoder",
    "enum_text", "shape_to_json", "op_to_json", "graph_to_dict", "graph_to_json",
    "shape_from_json", "AttrDecoder", "op_from_json", "graph_from_dict", "graph_from_json",
]

GRAPH_JSON_FORMAT = "rlx-graph"
GRAPH_JSON_VERSION = 1

ConstantEncoder = Callable[[Node], Any]
ConstantDecoder = Callable[[Any, Shape], Any]


def _base64_encode(node: Node) -> str:
    import base64  # only graph JSON files use it: the artifact keeps payloads as blobs

    assert isinstance(node.op, Constant)  # the encoder is called for Constant nodes only
    return base64.b64encode(byte_view(materialize(node.op.data)).tobytes()).decode("ascii")


def _base64_decode(value: Any, shape: Shape) -> bytes:
    if not isinstance(value, str):
        raise GraphError("constant payload must be base64 text")
    import base64

    return base64.b64decode(value.encode("ascii"), validate=True)


# -- encoding ------------------------------------------------------------------------------
def enum_text(member: enum.Enum) -> str:
    """The stable text of an enum member: its value (what `rlx.enums.lookup` matches)."""
    return str(member.value)


def shape_to_json(shape) -> Any:
    if isinstance(shape, tuple):
        return {"tuple": [shape_to_json(s) for s in shape]}
    return {"dims": list(shape.dims), "dtype": shape.dtype.value}


def _attr_to_json(value: Any, encode: ConstantEncoder) -> Any:
    if isinstance(value, Graph):
        return graph_to_dict(value, encode)
    if isinstance(value, enum.Enum):
        return enum_text(value)
    if isinstance(value, (tuple, list)):
        return [_attr_to_json(v, encode) for v in value]
    return value


def op_to_json(op: Op, encode_constant: ConstantEncoder = _base64_encode) -> dict[str, Any]:
    """`{"op": name, "attrs": {...}}` for any op but Constant (whose data needs its node)."""
    entry: dict[str, Any] = {"op": type(op).__name__}
    attrs = {k: _attr_to_json(v, encode_constant) for k, v in op.attrs().items()}
    if attrs:
        entry["attrs"] = attrs
    return entry


def graph_to_dict(graph: Graph, encode_constant: ConstantEncoder = _base64_encode) -> dict:
    nodes = []
    for node in graph.nodes():
        if isinstance(node.op, Constant):
            entry: dict[str, Any] = {"op": "Constant", "data": encode_constant(node)}
        else:
            entry = op_to_json(node.op, encode_constant)
        if node.inputs:
            entry["inputs"] = list(node.inputs)
        entry["shape"] = shape_to_json(node.shape)
        if node.name is not None:
            entry["name"] = node.name
        if node.origin is not None:
            entry["origin"] = node.origin
        nodes.append(entry)
    return {"name": graph.name, "nodes": nodes, "outputs": list(graph.outputs)}


def graph_to_json(graph: Graph, *, indent: int | None = None) -> str:
    import json  # here, not above: reading an artifact needs no JSON text (~2.5 ms)

    body = {"format": GRAPH_JSON_FORMAT, "version": GRAPH_JSON_VERSION,
            "graph": graph_to_dict(graph)}
    return json.dumps(body, indent=indent, sort_keys=False)


# -- decoding ------------------------------------------------------------------------------
def shape_from_json(value: Any):
    if not isinstance(value, dict):
        raise GraphError(f"shape must be an object, got {type(value).__name__}")
    if "tuple" in value:
        return tuple(shape_from_json(v) for v in _list(value["tuple"], "shape tuple"))
    dims = _list(value.get("dims"), "shape dims")
    for d in dims:
        if not (isinstance(d, str) or (isinstance(d, int) and not isinstance(d, bool))):
            raise GraphError(f"shape dim must be an int or a name, got {d!r}")
    # a name such as "batch" recurs in most shapes of a graph: one string for all of them
    return Shape([sys.intern(d) if isinstance(d, str) else d for d in dims],
                 DType.parse(str(value.get("dtype"))))


def _list(value: Any, what: str) -> list:
    if not isinstance(value, list):
        raise GraphError(f"{what} must be a list")
    return value


AttrDecoder = Callable[[Any, ConstantDecoder, str], Any]
"""(JSON value, constant decoder, where for errors) -> attribute value."""


_FIELD_DECODERS: dict[type[Op], dict[str, AttrDecoder]] = {}


def _field_decoders(cls: type[Op]) -> dict[str, AttrDecoder]:
    """The decoders of an op type's fields, built once per type."""
    found = _FIELD_DECODERS.get(cls)
    if found is None:
        hints: list[tuple[str, Any]] = [(f.name, f.type) for f in fields(cls)]
        found = _FIELD_DECODERS[cls] = {
            name: _annotation_decoder(hint, cls.__module__) for name, hint in hints}
    return found


@functools.cache
def _annotation_decoder(annotation: Any, module: str) -> AttrDecoder:
    """The decoder of a field annotation: ops modules use postponed annotations, so this is
    its text, evaluated in the op's module (a direct eval, ~10x cheaper than
    typing.get_type_hints per class, and shared by every field spelled the same)."""
    if isinstance(annotation, str):
        # ops that hold subgraphs name `Graph` only under TYPE_CHECKING (import cycle)
        annotation = eval(annotation, {**vars(sys.modules[module]), "Graph": Graph})
    return _decoder(annotation)


@functools.cache
def _decoder(hint: Any) -> AttrDecoder:
    """The decoder of one attribute type, worked out once per type (a file decodes the same
    few types thousands of times)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return _union_decoder(type(None) in args, [_decoder(a) for a in args
                                                   if a is not type(None)])
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = _decoder(args[0])
            return lambda value, decode, where: tuple(
                item(v, decode, where) for v in _list(value, where))
        items = [_decoder(a) for a in args]

        def fixed(value: Any, decode: ConstantDecoder, where: str) -> tuple:
            values = _list(value, where)
            if len(values) != len(items):
                raise GraphError(f"{where}: expected {len(items)} items")
            return tuple(item(v, decode, where) for item, v in zip(items, values))

        return fixed
    if hint is Graph:
        return lambda value, decode, where: graph_from_dict(value, decode)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum_decoder(hint)
    if hint is float:
        return _scalar(hint, lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
                       float)
    if hint in (int, str, bool):
        return _scalar(hint, lambda v: type(v) is hint, lambda v: v)
    if hint is Any:
        return lambda value, decode, where: value
    raise TypeError(f"no JSON decoder for attribute type {hint!r}")


def _union_decoder(optional: bool, options: list[AttrDecoder]) -> AttrDecoder:
    def union(value: Any, decode: ConstantDecoder, where: str) -> Any:
        if value is None and optional:
            return None
        last_error: Exception | None = None
        for option in options:
            try:
                return option(value, decode, where)
            except GraphError as err:
                last_error = err
        raise last_error or GraphError(f"{where}: bad value {value!r}")

    return union


def _enum_decoder(cls: type[enum.Enum]) -> AttrDecoder:
    def member(value: Any, decode: ConstantDecoder, where: str) -> enum.Enum:
        found = lookup(cls, value, exact=True, names=True) if isinstance(value, str) else None
        if found is None:
            raise GraphError(f"{where}: unknown {cls.__name__} {value!r}")
        return found

    return member


def _scalar(hint: type, accepts: Callable[[Any], bool],
            convert: Callable[[Any], Any]) -> AttrDecoder:
    def scalar(value: Any, decode: ConstantDecoder, where: str) -> Any:
        if not accepts(value):
            raise GraphError(f"{where}: expected {hint.__name__}, got {value!r}")
        return convert(value)

    return scalar


def op_from_json(entry: dict, shape, decode: ConstantDecoder) -> Op:
    name = entry.get("op")
    cls = op_type(name) if isinstance(name, str) else None
    if cls is None:
        raise GraphError(f"unknown op {name!r}")
    if cls is Constant:
        return Constant(decode(entry.get("data"), shape))
    attrs = entry.get("attrs", {})
    if not isinstance(attrs, dict):
        raise GraphError(f"{name}: attrs must be an object")
    decoders = _field_decoders(cls)
    unknown = set(attrs) - set(decoders)
    if unknown:
        raise GraphError(f"{name}: unknown attribute(s) {sorted(unknown)}")
    kwargs = {k: decoders[k](v, decode, f"{name}.{k}") for k, v in attrs.items()}
    try:
        return cls(**kwargs)
    except TypeError as err:
        raise GraphError(f"{name}: {err}") from None


def _shared_op(entry: dict, shape, decode: ConstantDecoder, ops: dict[str, Op]) -> Op:
    """`op_from_json`, made once for all the nodes that spell one op with the same
    attributes (ops are immutable values; the key is their JSON's text, where -0.0 is not
    0.0): a CNN's Convs and activations repeat a few ops hundreds of times. Constants and
    ops holding subgraphs are made per node."""
    attrs = entry.get("attrs")
    if entry.get("op") == "Constant" or (
            isinstance(attrs, dict) and any(isinstance(v, dict) for v in attrs.values())):
        return op_from_json(entry, shape, decode)
    key = repr((entry.get("op"), attrs))
    op = ops.get(key)
    if op is None:
        op = ops[key] = op_from_json(entry, shape, decode)
    return op


def graph_from_dict(body: Any, decode_constant: ConstantDecoder = _base64_decode, *,
                    consume: bool = False) -> Graph:
    """The graph a JSON body describes. Its node list may be an iterator (a reader that
    parses each node's JSON as it is reached). `consume`: empty the body's node list as it
    is read, for a reader whose parsed header is dropped after: each node's JSON is freed
    as its node is built and its memory reused, rather than both held at once (the
    allocator keeps the peak resident: 0.4 MiB of a 413-node model's load, issue 35)."""
    if not isinstance(body, dict):
        raise GraphError("graph must be a JSON object")
    graph = Graph(str(body.get("name", "graph")))
    nodes = body.get("nodes")
    if not isinstance(nodes, Iterator):
        nodes = _list(nodes, "graph nodes")
    shapes: dict = {}  # nodes of one shape share one Shape (a few hundred bytes each)
    spelled: dict[tuple, Any] = {}  # and each spelling of a shape is read once
    ops: dict[str, Op] = {}
    for position, entry in enumerate(nodes):
        if consume and isinstance(nodes, list):
            nodes[position] = None
        if not isinstance(entry, dict):
            raise GraphError(f"node {position} must be an object")
        shape = _shared_shape(entry.get("shape"), shapes, spelled)
        op = _shared_op(entry, shape, decode_constant, ops)
        name = _text(entry.get("name"), f"node {position}: name")
        origin = _text(entry.get("origin"), f"node {position}: origin")
        inputs = _list(entry.get("inputs", []), f"node {position} inputs")
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in inputs):
            raise GraphError(f"node {position}: inputs must be node ids")
        graph.add_node(op, inputs, shape, name=name, origin=origin)
    outputs = _list(body.get("outputs", []), "graph outputs")
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in outputs):
        raise GraphError("graph outputs must be node ids")
    graph.set_outputs(outputs)
    return graph


def _shared_shape(value: Any, shapes: dict, spelled: dict[tuple, Any]):
    """`shape_from_json`, one object for equal shapes (`shapes`), read once per spelling
    (`spelled`): a file spells a layer's few shapes over and over, and their ops' shape
    checks are made once per shape object (`rlx.ir.verification`)."""
    key = _spelling(value)
    found = None if key is None else spelled.get(key)
    if found is None:
        shape = shape_from_json(value)
        found = shapes.setdefault(shape, shape)
        if key is not None:
            spelled[key] = found
    return found


def _spelling(value: Any) -> tuple | None:
    """A plain shape's JSON as a key: its dtype's text and dims of exactly `int` or `str`
    (a bool or a float, which would equal an int, is no key: `shape_from_json` judges it);
    None for any other value."""
    if type(value) is not dict or "tuple" in value:
        return None
    dims = value.get("dims")
    if type(dims) is not list or not all(type(d) is int or type(d) is str for d in dims):
        return None
    return (str(value.get("dtype")), *dims)


def _text(value: Any, what: str) -> str | None:
    """An optional string of a node, interned: the nodes one source node became repeat its
    origin, and a weight row repeats its constant's name (one string object for each)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise GraphError(f"{what} must be a string")
    return sys.intern(value)


def graph_from_json(text: str | bytes) -> Graph:
    import json

    try:
        body = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise GraphError(f"graph JSON is not valid JSON: {err}") from None
    if isinstance(body, dict) and body.get("format") == GRAPH_JSON_FORMAT:
        if body.get("version") != GRAPH_JSON_VERSION:
            raise GraphError(f"graph JSON version {body.get('version')!r} is not supported "
                             f"(this rlx reads version {GRAPH_JSON_VERSION})")
        body = body.get("graph")
    return graph_from_dict(body)

