"""OpenVINO running a fast plan's bf16 part: the plan's bf16 nodes in bf16, the rest in f32.

The CPU plugin runs a model in bf16 when INFERENCE_PRECISION_HINT is bf16 (on CPUs whose
OPTIMIZATION_CAPABILITIES list BF16: AVX512-BF16 or AMX), except the operations whose
runtime info forbids converting their precision: those keep f32 (the plugin's
"keep original precision"; OpenVINO's rt_info attribute `DisablePrecisionConversion`, once
`disable_fp16_compression`). The Python API sets runtime info only as plain strings, which
the plugin does not read as that attribute; written into the IR as `precise` and read back,
it is one (measured on OpenVINO 2026.4 with a two-MatMul model: the marked MatMul's output
bit-equal to the f32 run, the other's off by bf16 rounding; set directly, both ran bf16).
So `keep_f32` marks every operation outside the plan's bf16 set, writes the model to IR in
a temporary folder (weights are graph inputs at this point: the file holds only the small
constants) and reads it back. The folder is private (mode 0700, no other user can swap a
file in it) and both files are read whole into memory before it is removed: no path is
read again once checked; a kill in between leaves that small folder (the graph without its
weights) in the temp dir.

The plan names nodes by their labels in the rlx graph; the export names each node (and its
output) after the rlx node (`export_name`), which is how an OpenVINO operation is found
again: by an output name, or by its own name up to a "/" (the frontend splits an ONNX Conv
with a bias into "NAME/WithoutBiases" and an Add named NAME).
"""

from __future__ import annotations

import tempfile
from collections.abc import Collection, Mapping
from pathlib import Path

import numpy as np
import openvino as ov

from rlx.ir.graph import Graph, Node

__all__ = ["has_bf16", "bf16_outputs", "keep_f32", "share_transposed",
           "unfolded_operands"]

_PRECISE = "precise_0"
"""The runtime-info key OpenVINO's IR writer turns into the keep-precision attribute."""
_UNMARKED = {"Parameter", "Constant", "Result"}


def has_bf16(core: ov.Core) -> bool:
    """Whether this CPU computes bf16 (OpenVINO's own reading of the CPU's features)."""
    return "BF16" in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def export_name(node: Node) -> str:
    """The ONNX output name the export gives `node` (`rlx.onnx.export`) when unique."""
    return node.name or f"{type(node.op).__name__}_{node.id}"


def bf16_outputs(graph: Graph, labels: Collection[str]) -> set[str]:
    """The export names of the nodes of `graph` whose label is in `labels`."""
    wanted = set(labels)
    return {export_name(n) for n in graph.nodes() if (n.origin or n.name) in wanted}


def keep_f32(core: ov.Core, model: ov.Model, bf16: set[str]) -> tuple[ov.Model, str]:
    """`model` with every operation but those writing a tensor named in `bf16` marked to
    keep f32 (module doc), and what runs, for `Model.precision`."""
    running = marked = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() in _UNMARKED:
            continue
        if _runs_bf16(op, bf16):
            running += 1
        else:
            op.get_rt_info()[_PRECISE] = ""
            marked += 1
    with tempfile.TemporaryDirectory(prefix="rlx-ov-") as folder:
        xml, weights = Path(folder, "model.xml"), Path(folder, "model.bin")
        ov.serialize(model, str(xml), str(weights))
        data = np.frombuffer(weights.read_bytes(), np.uint8).copy()
        marked_model = core.read_model(xml.read_text(), ov.Tensor(data))
    return marked_model, f"fast: bf16 {running} nodes, f32 {marked}"


def share_transposed(model: ov.Model) -> int:
    """Give the MatMuls that share a constant 2-D weight one copy of it transposed, read
    with transpose_b, and return how many weights were so copied.

    The CPU plugin runs a MatMul with a constant weight as a FullyConnected over the weight
    transposed: for a weight stored [K, N] it folds a Transpose of it per reader. An
    unrolled RNN's 20 steps reading one [4096, 400] weight then ran on 20 private copies,
    out of cache (40 such products: 43 ms against 8.5 with one copy, 128 MiB more RSS).
    """
    readers: dict[int, list[ov.Node]] = {}
    weights: dict[int, ov.Node] = {}
    for op in model.get_ordered_ops():
        if op.get_type_name() != "MatMul" or op.get_attributes()["transpose_b"]:
            continue
        weight = op.input_value(1).get_node()
        if weight.get_type_name() == "Constant" and len(weight.get_output_shape(0)) == 2:
            readers.setdefault(id(weight), []).append(op)
            weights[id(weight)] = weight
    shared = {key: ops for key, ops in readers.items() if len(ops) >= 2}
    for key, ops in shared.items():
        data = np.ascontiguousarray(np.asarray(weights[key].get_data()).T)
        transposed = ov.op.Constant(data)
        transposed.set_friendly_name(weights[key].get_friendly_name() + "/T")
        for op in ops:
            _rewire(op, transposed)
    model.validate_nodes_and_infer_types()
    return len(shared)


def _rewire(op: ov.Node, transposed: ov.Node) -> None:
    """Let MatMul `op` read `transposed` with transpose_b (the op itself kept: the Python
    API cannot copy its runtime info, the f32 mark, to a new one)."""
    op.input(1).replace_source_output(transposed.output(0))
    op.set_attribute("transpose_b", True)


_PRODUCTS = {"MatMul", "Convolution"}
_SHAPING = {"Reshape", "Unsqueeze", "Squeeze", "Broadcast", "Transpose", "Convert"}
"""Ops the plugin folds on a constant input (their other inputs shape-only too)."""


def _runs_bf16(op: ov.Node, bf16: set[str]) -> bool:
    """Whether `keep_f32` leaves `op` to bf16: it writes a tensor named in `bf16`, or its
    name does up to a "/" (module doc)."""
    names = set().union(*(o.get_names() for o in op.outputs()))
    return bool(names & bf16) or op.get_friendly_name().split("/")[0] in bf16


def _fixed_source(value: ov.Output, weights: Collection[str]) -> ov.Node | None:
    """The Constant or weight input `value` is made of, through shaping ops, if it is so
    (the plugin sees it as a constant once weights are bound); else None."""
    node = value.get_node()
    kind = node.get_type_name()
    if kind == "Constant" or (kind == "Parameter" and node.get_friendly_name() in weights):
        return node
    rest = [node.input_value(k).get_node() for k in range(1, node.get_input_size())]
    if kind in _SHAPING and all(_shape_only(r) for r in rest):
        return _fixed_source(node.input_value(0), weights)
    return None


def _shape_only(node: ov.Node) -> bool:
    """Whether `node` computes from Constants and tensor shapes only (the ONNX frontend's
    target shape for a Conv bias), which the plugin folds on static shapes."""
    kind = node.get_type_name()
    if kind in ("Constant", "ShapeOf"):
        return True
    return kind != "Parameter" and all(
        _shape_only(node.input_value(k).get_node()) for k in range(node.get_input_size()))


def _product_behind(value: ov.Output, bf16: set[str], weights: Collection[str]) -> bool:
    """Whether `value` is an f32 product's with a constant weight, maybe through f32 Adds
    and Multiplies of a constant (what the plugin folds into that product)."""
    node = value.get_node()
    kind = node.get_type_name()
    if _runs_bf16(node, bf16) or node.get_input_size() != 2:
        return False
    if kind in _PRODUCTS:
        return _fixed_source(node.input_value(1), weights) is not None
    if kind not in ("Add", "Multiply"):
        return False
    data = [k for k in (0, 1) if _fixed_source(node.input_value(k), weights) is None]
    return len(data) == 1 and _product_behind(node.input_value(data[0]), bf16, weights)


def _readers(node: ov.Node) -> list[ov.Node]:
    return [t.get_node() for t in node.output(0).get_target_inputs()]


def _unfolded(op: ov.Node, bf16: set[str], weights: Collection[str]) -> ov.Node | None:
    """The fixed operand of f32 `op` that must stay an input to keep it f32 (see
    `unfolded_operands`), if any."""
    kind = op.get_type_name()
    if kind == "MatMul":
        source = _fixed_source(op.input_value(1), weights)
        if source is not None and all(r.get_type_name() == "MatMul" and not _runs_bf16(r, bf16)
                                      for r in _readers(source)):
            return source
    if kind == "Multiply":
        for k in (0, 1):
            source = _fixed_source(op.input_value(k), weights)
            if source is not None and _product_behind(op.input_value(1 - k), bf16, weights):
                return source
    return None


def unfolded_operands(model: ov.Model, bf16: set[str],
                      weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The constant operands that must stay inputs of `model`, set on each request, for the
    operations outside `bf16` to keep f32: by name, with their values (a Constant among
    them is made a Parameter of its name first). Call before `keep_f32`.

    The CPU plugin drops the keep-f32 mark when it rewrites a product with a constant
    weight into a new operation: a MatMul with its bias Add into a FullyConnected, and a
    MatMul or a Convolution followed by a Multiply of a constant (a scalar, a per-channel
    scale, behind Adds of a constant too: a BatchNorm's) into one over the scaled weight;
    those then ran bf16 (measured on OpenVINO 2026.4, at 1 and 2 threads). A Convolution's
    bias, a Relu, Clamp, Sigmoid or Swish after a product, and anything after a grouped
    Convolution keep the mark. So the weight of an f32 MatMul (if only f32 MatMuls read it:
    an f32 MatMul reads an input in place, a bf16 one would convert it at every run) and
    the scale of such a Multiply stay inputs: the product is no FullyConnected, nothing is
    folded into its weight.
    """
    kept = [op for op in model.get_ordered_ops()
            if op.get_type_name() not in _UNMARKED and not _runs_bf16(op, bf16)]
    sources = {s.get_friendly_name(): s for s in (_unfolded(op, bf16, weights) for op in kept)
               if s is not None}
    found = {}
    for name, source in sources.items():
        if source.get_type_name() == "Parameter":
            found[name] = weights[name]
            continue
        found[name] = np.array(source.get_data(), copy=True)
        param = ov.opset13.parameter(list(found[name].shape), found[name].dtype, name=name)
        source.output(0).replace(param.output(0))
        model.add_parameters([param])
    return found
