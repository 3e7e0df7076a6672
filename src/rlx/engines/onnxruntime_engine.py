"""The onnxruntime engine: the graph's ONNX export, built in memory, weights not copied.

Large weights are written as external data that points into the `.rlx` file itself, at
the offset where the artifact's memory map holds them (`mapping.FileRegions`):
onnxruntime then memory-maps those bytes from the file (read-only, shared page cache, no
anonymous copy). Arrays with no file behind them (an encrypted file's decrypted buffer,
packed weights re-laid out for MatMulNBits) go in as `OrtValue`s over the numpy arrays
(`SessionOptions.add_external_initializers`); onnxruntime 1.32 copies those once.

Prepacking: onnxruntime re-lays out constant MatMul/Conv/Gemm weights for its kernels at
load ("prepacking"), a second, anonymous copy of them. It is disabled by default
(`PREPACK`, or RLX_ORT_PREPACK=1): measured in docs/engines.md, it costs about the weight
bytes in RSS and gains little on these models at 1-2 threads.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnxruntime as ort

from rlx.artifact.model import RlxFile
from rlx.engines.mapping import FileRegions
from rlx.ir.graph import Graph

__all__ = ["OrtRunner", "build", "PREPACK", "session_options", "export_for_ort"]

PREPACK = os.environ.get("RLX_ORT_PREPACK", "") not in ("", "0")
_IN_MEMORY = "rlx-in-memory-weight"  # placeholder location; add_external_initializers binds it


class _Placer:
    """External-data TensorProtos: file offsets where mapped, else in-memory OrtValues."""

    def __init__(self, path: str | None):
        self.path = path
        self.regions = FileRegions(path) if path else None
        self.mapped: dict[str, tuple[int, int]] = {}  # name -> (offset, length)
        self.in_memory: dict[str, np.ndarray] = {}

    def __call__(self, name: str, array: np.ndarray) -> Any:
        from rlx.frontends.onnx.export import external_tensor

        offset = self.regions.offset(array) if self.regions is not None else None
        if offset is not None and self.path is not None:
            self.mapped[name] = (offset, array.nbytes)
            return external_tensor(name, array, os.path.basename(self.path), offset)
        self.in_memory[name] = np.ascontiguousarray(array)
        return external_tensor(name, array, _IN_MEMORY, 0)


def session_options(threads: int | None) -> ort.SessionOptions:
    so = ort.SessionOptions()
    if threads is not None:
        so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    return so


def export_for_ort(file: RlxFile, graph: Graph, path: str | None) -> tuple[bytes, _Placer, Any]:
    """(serialised model, where its weights went, export summary). Imports onnx."""
    from rlx.frontends.onnx.export import build_onnx, weight_names
    from rlx.frontends.onnx.export_quant import PackedForm, nbits_supported

    placer = _Placer(path)
    packed = PackedForm.NBITS if nbits_supported(8, 32) else PackedForm.DEQUANTIZE
    result = build_onnx(graph, placer=placer, packed=packed, constant_names=weight_names(file))
    return result.model.SerializeToString(), placer, result.summary


class OrtRunner:
    """`model_bytes` given (auto's cache of an earlier export of the same file, whose
    weights are all file references) skips the export and the onnx import."""

    name = "onnxruntime"

    def __init__(self, file: RlxFile, graph: Graph, path: str | None, threads: int | None,
                 model_bytes: bytes | None = None):
        self.precision = "exact"  # onnxruntime's CPU kernels run the graph's dtypes
        self.file = file  # keeps the artifact's map (and the arrays below) alive
        self.summary = None
        if model_bytes is None:
            model_bytes, placer, self.summary = export_for_ort(file, graph, path)
            self.mapped, self.in_memory = placer.mapped, placer.in_memory
        else:
            self.mapped, self.in_memory = {}, {}
        self.cacheable = not self.in_memory
        so = session_options(threads)
        if path:
            so.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                        os.path.dirname(os.path.abspath(path)))
        if not PREPACK:
            so.add_session_config_entry("session.disable_prepacking", "1")
        if self.in_memory:
            names = list(self.in_memory)
            so.add_external_initializers(
                names, [ort.OrtValue.ortvalue_from_numpy(self.in_memory[n]) for n in names])
        self.model_bytes = model_bytes
        self.session = ort.InferenceSession(self.model_bytes, so,
                                            providers=["CPUExecutionProvider"])

    def run(self, feeds: dict[str, np.ndarray], outputs: Sequence[str]) -> list[np.ndarray]:
        return self.session.run(list(outputs), feeds)


def build(file: RlxFile, graph: Graph, path: str | None, *, threads: int | None,
          precision: str, model_bytes: bytes | None = None) -> OrtRunner:
    return OrtRunner(file, graph, path, threads, model_bytes)
