"""rlx: bake a model and its weights into one artifact, and run it on the CPU.

The everyday API is re-exported here; the subpackages hold the rest (see DESIGN.md).
"""

from rlx.bake import BakeOptions, BakeProfile, BakeReport, MemoryMode, RlxFile, bake, bake_bundle
from rlx.errors import RlxError
from rlx.ir import DType, Graph, Shape
from rlx.runtime import CompiledGraph, Session

__version__ = "0.1.0"

__all__ = [
    "BakeOptions", "BakeProfile", "BakeReport", "CompiledGraph", "DType", "Graph",
    "MemoryMode", "RlxError", "RlxFile", "Session", "Shape", "bake", "bake_bundle",
]
