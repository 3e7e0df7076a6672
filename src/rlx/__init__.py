"""rlx: bake a model and its weights into one artifact, and run it on the CPU.

The everyday API is re-exported here; the subpackages hold the rest (see DESIGN.md).
`import_onnx` is loaded on first use, so `import rlx` does not pay for importing onnx.
"""

from rlx.artifact import read_rlx, write_rlx
from rlx.bake import BakeOptions, BakeProfile, BakeReport, MemoryMode, RlxFile, bake, bake_bundle
from rlx.errors import RlxError
from rlx.ir import DType, Graph, Shape
from rlx.runtime import CompiledGraph, Session
from rlx.version import __version__
from rlx.weights import load_weights


__all__ = [
    "BakeOptions", "BakeProfile", "BakeReport", "CompiledGraph", "DType", "Graph",
    "MemoryMode", "RlxError", "RlxFile", "Session", "Shape", "bake", "bake_bundle",
    "__version__", "import_onnx", "load_weights", "read_rlx", "write_rlx",
]


def __getattr__(name: str):
    if name == "import_onnx":
        from rlx.frontends.onnx import import_onnx

        return import_onnx
    raise AttributeError(f"module 'rlx' has no attribute {name!r}")
