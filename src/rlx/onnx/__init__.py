"""The ONNX importer and exporter: the one package that imports `onnx`.

`import_onnx(path_or_model) -> (Graph, bindings)` reads a model; `export_onnx(file_or_graph,
path=None) -> ModelProto` writes a baked graph back as standard ONNX. Each name loads its
module on first use (`rlx._lazy`), so exporting does not import the importer.

Importer layout: `importer` drives a model's conversion, `scope` holds the graph being built
and the names visible in it (subgraph captures), `node` is a converter's view of one ONNX
node, `emit` has the IR-building shorthands, `tensors` and `external` decode tensors, and
`ops` holds one converter module per op family. Exporter: `export` (the builder, where
weights go), `export_ops` (one writer per rlx op), `export_quant` (packed weights).
"""

from rlx._lazy import lazy_exports

_LAZY = {
    "import_onnx": "rlx.onnx.importer",
    "MIN_OPSET": "rlx.onnx.importer",
    "MAX_OPSET": "rlx.onnx.importer",
    "onnx_op_types": "rlx.onnx.importer",
    "read_model": "rlx.onnx.importer",
    "export_onnx": "rlx.onnx.export",
    "EXPORT_OPSET": "rlx.onnx.export",
}
__all__ = [
    "EXPORT_OPSET", "MAX_OPSET", "MIN_OPSET", "export_onnx", "import_onnx", "onnx_op_types",
    "read_model"
]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
