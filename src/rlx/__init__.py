"""rlx: bake a model and its weights into one artifact, and run it on the CPU.

The everyday API is re-exported here; the subpackages hold the rest (see DESIGN.md). Every
name loads on first use (`rlx._lazy`): `import rlx` costs nothing, `rlx.read_rlx` brings
the reader and `rlx.import_onnx` brings onnx, each only when used.
"""

from rlx._lazy import lazy_exports
from rlx.version import __version__

_LAZY = {
    "read_rlx": "rlx.artifact",
    "write_rlx": "rlx.artifact",
    "BakeOptions": "rlx.bake",
    "BakeProfile": "rlx.bake",
    "BakeReport": "rlx.bake",
    "MemoryMode": "rlx.bake",
    "RlxFile": "rlx.bake",
    "bake": "rlx.bake",
    "bake_bundle": "rlx.bake",
    "RlxError": "rlx.errors",
    "DType": "rlx.ir",
    "Graph": "rlx.ir",
    "Shape": "rlx.ir",
    "CompiledGraph": "rlx.runtime",
    "Session": "rlx.runtime",
    "import_onnx": "rlx.frontends.onnx",
    "load_weights": "rlx.weights",
}
__all__ = sorted([*_LAZY, "__version__"])
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
