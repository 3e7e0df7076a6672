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
from collections.abc import Collection
from pathlib import Path

import numpy as np
import openvino as ov

from rlx.ir.graph import Graph, Node

__all__ = ["has_bf16", "bf16_outputs", "keep_f32", "share_transposed", "f32_weights"]

_PRECISE = "precise_0"
"""The runtime-info key OpenVINO's IR writer turns into the keep-precision attribute."""
_UNMARKED = {"Parameter", "Constant", "Result"}
_MARK = "DisablePrecisionConversion"
"""The attribute the IR reader makes of `_PRECISE` (its runtime-info key, with a suffix)."""


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
        names = set().union(*(o.get_names() for o in op.outputs()))
        if names & bf16 or op.get_friendly_name().split("/")[0] in bf16:
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


def _marked(op: ov.Node) -> bool:
    return any(key.startswith(_MARK) for key in op.get_rt_info())


def f32_weights(model: ov.Model) -> set[str]:
    """The weight inputs of `model` (marked by `keep_f32`) that only f32 MatMuls read: to
    stay inputs, set on each request, not constants.

    The CPU plugin drops the keep-f32 mark of a MatMul with a constant weight when it fuses
    a constant Add (the bias) into it as a FullyConnected: that product ran bf16 (measured
    on OpenVINO 2026.4; a Convolution with its bias, or a MatMul with only a Relu after it,
    keeps f32). A MatMul whose weight is an input is no FullyConnected and keeps its mark;
    an f32 MatMul reads such a weight in place, no private copy (a fused constant Multiply
    still drops the mark: the plan's units are products with their bias only).
    """
    found = set()
    for param in model.get_parameters():
        readers = [t.get_node() for t in param.output(0).get_target_inputs()]
        if readers and all(r.get_type_name() == "MatMul" and _marked(r) for r in readers):
            found.add(param.get_friendly_name())
    return found
