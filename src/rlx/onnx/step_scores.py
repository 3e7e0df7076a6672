"""Which graph outputs are per-step class scores (a CTC head's), read off the ONNX graph.

A recogniser's output holds, for each sample and time step, one score per class: rank 3,
computed over its class axis by Softmax / LogSoftmax or by a linear layer (MatMul, Gemm, or
the Add of its bias), perhaps transposed after. Such an output is compared by its greedy
decoding, not element by element alone (`rlx.cli.ctc`). Which of the two other axes is time
is told by the declared dims when one of them carries the name of the inputs' batch dim.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnx import ModelProto, NodeProto, helper

from rlx.onnx.importer import DEFAULT_DOMAINS

__all__ = ["StepScores", "step_scores"]

_LINEAR = ("MatMul", "Gemm")
_NORMALISING = ("Softmax", "LogSoftmax")
_PASSING = ("Identity", "Transpose")  # ops that move axes, values unchanged


@dataclass(frozen=True)
class StepScores:
    """A rank-3 output read as per-step class scores: its class axis, its time axis when the
    declared dims tell it (None when they do not), and the op computing the scores."""

    class_axis: int
    time_axis: int | None
    op: str


def step_scores(model: ModelProto) -> dict[str, StepScores]:
    """The graph outputs (by name) that are per-step class scores, by the rule above."""
    graph = model.graph
    producers = {out: node for node in graph.node for out in node.output}
    constants = {t.name for t in graph.initializer}
    constants |= {o for node in graph.node if node.op_type == "Constant" for o in node.output}
    opset = next((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), 1)
    batch_names = _batch_dim_names(model, constants)
    found = {}
    for value in graph.output:
        dims = _declared(value)
        if dims is None or len(dims) != 3:
            continue
        traced = _class_axis(value.name, producers, constants, opset)
        if traced is None:
            continue
        axis, op = traced
        found[value.name] = StepScores(axis, _time_axis(dims, axis, batch_names), op)
    return found


def _class_axis(name: str, producers: dict[str, NodeProto], constants: set[str],
                opset: int) -> tuple[int, str] | None:
    """(axis of `name` holding the classes, the op scoring them), following the value back
    through axis-moving ops to the op that computes over a class axis; None if none does.
    A Softmax over a linear layer's product normalises that layer's class axis or none."""
    node, perms = _source(name, producers)
    if node is None:
        return None
    if node.op_type in _NORMALISING:
        axis = _attr(node, "axis", -1 if opset >= 13 else 1) % 3
        if opset < 13 and axis != 2:  # before opset 13: over all axes from `axis` on
            return None
        linear, inner = _source(node.input[0], producers)
        if _is_linear(linear, producers, constants) and _moved(2, inner) != axis:
            return None
    elif _is_linear(node, producers, constants):
        axis = 2
    else:
        return None
    moved = _moved(axis, perms)
    return None if moved is None else (moved, node.op_type)


def _source(name: str, producers: dict[str, NodeProto]
            ) -> tuple[NodeProto | None, list[list[int]]]:
    """The default-domain node computing `name` behind axis-moving ops, and the Transpose
    permutations on the way (nearest `name` first)."""
    perms: list[list[int]] = []
    node = producers.get(name)
    while node is not None and node.op_type in _PASSING and node.domain in DEFAULT_DOMAINS:
        if node.op_type == "Transpose":
            perms.append(_attr(node, "perm", [2, 1, 0]))
        node = producers.get(node.input[0])
    return (node if node is not None and node.domain in DEFAULT_DOMAINS else None), perms


def _moved(axis: int, perms: list[list[int]]) -> int | None:
    """Where `axis` of the source lands after the Transposes (None if one is not rank 3)."""
    for perm in reversed(perms):  # the nearest Transpose to the source first
        if sorted(perm) != [0, 1, 2]:
            return None
        axis = perm.index(axis)
    return axis


def _is_linear(node: NodeProto | None, producers: dict[str, NodeProto],
               constants: set[str]) -> bool:
    return node is not None and (node.op_type in _LINEAR
                                 or _is_bias_add(node, producers, constants))


def _is_bias_add(node: NodeProto, producers: dict[str, NodeProto], constants: set[str]
                 ) -> bool:
    """An Add of a constant to a MatMul or Gemm's product: a linear layer's bias."""
    if node.op_type != "Add" or len(node.input) != 2:
        return False
    for product, bias in (node.input, reversed(node.input)):
        source = producers.get(product)
        if bias in constants and source is not None and source.op_type in _LINEAR:
            return True
    return False


def _time_axis(dims: list[int | str | None], class_axis: int, batch_names: set[str]
               ) -> int | None:
    """The axis that is not the class axis nor named as the inputs' batch dim, when exactly
    one of the two is so named."""
    a, b = (i for i in range(3) if i != class_axis)
    named = [i for i in (a, b) if dims[i] in batch_names]
    if len(named) != 1:
        return None
    return b if named == [a] else a


def _batch_dim_names(model: ModelProto, constants: set[str]) -> set[str]:
    """The names of the graph inputs' leading dims, where they are names."""
    names = set()
    for value in model.graph.input:
        dims = _declared(value)
        if value.name not in constants and dims and isinstance(dims[0], str):
            names.add(dims[0])
    return names


def _declared(value) -> list[int | str | None] | None:
    """A value's declared dims: sizes, names, None where neither; None without a shape."""
    if not value.type.HasField("tensor_type") or not value.type.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in value.type.tensor_type.shape.dim]


def _attr(node: NodeProto, name: str, default):
    for a in node.attribute:
        if a.name == name:
            value = helper.get_attribute_value(a)
            return list(value) if isinstance(value, (list, tuple)) else value
    return default
