"""The ONNX importer: `import_onnx(path_or_model) -> (Graph, bindings)`.

Layout: `importer` drives a model's conversion, `scope` holds the graph being built and
the names visible in it (subgraph captures), `node` is a converter's view of one ONNX node,
`emit` has the IR-building shorthands, `tensors` and `external` decode tensors, and `ops`
holds one converter module per op family.
"""

from rlx.frontends.onnx.importer import (
    MAX_OPSET, MIN_OPSET, import_onnx, onnx_op_types, read_model,
)

__all__ = ["import_onnx", "MIN_OPSET", "MAX_OPSET", "onnx_op_types", "read_model"]
