"""The onnxruntime engine: the graph's ONNX export, weights read from files, not copied.

Weights are handed over as they lie: each one is an `OrtValue` over the artifact's own
array (`SessionOptions.add_initializer`), which onnxruntime uses in place, without a copy
and without opening the file itself. The model's TensorProtos for them are external-data
stubs naming the `.rlx` (onnxruntime checks that the location exists, then never reads it,
since the added initializer overrides it). So the weights stay in rlx's memory map, under
its read lease: a `.rlx` truncated or rewritten while loaded neither kills the process nor
changes its results (docs/reliability.md, promise 9), in every prepack mode. Arrays with no
file behind them (packed weights re-laid out for MatMulNBits) are bound the same way; with
no file at all (`path` None) they go in through `add_external_initializers`, which
onnxruntime 1.32 copies once.

Prepacking: at load onnxruntime re-lays out constant MatMul/Gemm/Conv weights for its
kernels (and Conv weights for its NCHWc layout), an anonymous copy of about the weight
bytes that buys up to 1.4x in latency (docs/engines.md). `RLX_ORT_PREPACK` chooses:

- `mapped` (default): the first load of a plain (unencrypted) file optimises the export
  once and saves it, prepacked weights included, to `<cache_dir>/onnxruntime/<key>/`
  (`saved_models`); every load then maps that model's weights from disk: prepacked speed,
  file-backed pages shared by every process, no optimisation at load.
- `heap`: onnxruntime's own behaviour (prepacked copies on the heap).
- `off`: no prepacking; weights stay the artifact's mapped bytes. Encrypted files, and a
  cache folder that cannot be written, run this way.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnxruntime as ort

from rlx.engines.cores import spinning_pays
from rlx.engines.fingerprint import default_cache_dir, is_plain_artifact
from rlx.engines.mapping import FileRegions
from rlx.engines.saved_models import MODEL_FILE, WEIGHTS_FILE, saved_folder
from rlx.errors import EngineError
from rlx.logs import Logger

if TYPE_CHECKING:  # a warm load (rlx.engines.warm) imports no graph IR
    from rlx.artifact.model import RlxFile
    from rlx.ir.graph import Graph

__all__ = ["OrtRunner", "build", "PREPACK_MODES", "prepack_mode", "saved_session",
           "session_options", "export_for_ort", "SPINNING_KEY"]

log = Logger("rlx.engines")

PREPACK_MODES = ("mapped", "heap", "off")
_IN_MEMORY = "rlx-in-memory-weight"  # placeholder location; add_external_initializers binds it


def prepack_mode() -> str:
    mode = os.environ.get("RLX_ORT_PREPACK", "mapped") or "mapped"
    if mode not in PREPACK_MODES:
        raise EngineError(f"RLX_ORT_PREPACK={mode!r}; expected one of "
                          f"{', '.join(PREPACK_MODES)}")
    return mode


class _Placer:
    """External-data TensorProto stubs for the weights, and the arrays to bind them to."""

    def __init__(self, path: str | None):
        self.path = path
        self.regions = FileRegions(path) if path else None
        self.mapped: dict[str, tuple[int, int]] = {}  # name -> (file offset, length)
        self.in_memory: dict[str, np.ndarray] = {}  # weights with no file bytes behind them
        self.arrays: dict[str, np.ndarray] = {}  # every weight, by name

    def __call__(self, name: str, array: np.ndarray) -> Any:
        from rlx.frontends.onnx.export import external_tensor

        array = np.ascontiguousarray(array)
        self.arrays[name] = array
        offset = self.regions.offset(array) if self.regions is not None else None
        if offset is not None and self.path is not None:
            self.mapped[name] = (offset, array.nbytes)
            return external_tensor(name, array, os.path.basename(self.path), offset)
        self.in_memory[name] = array
        # a location onnxruntime finds (it checks that much), never read: bind() overrides it
        location = os.path.basename(self.path) if self.path is not None else _IN_MEMORY
        return external_tensor(name, array, location, 0)

    def bind(self, so: ort.SessionOptions, *, in_place: bool = True) -> list[Any]:
        """Bind every stub to its array; returns the OrtValues, which must outlive the
        session (onnxruntime keeps only their pointers).

        `in_place=False` is for a session that saves its optimised model: onnxruntime
        writes out only the initializers it owns, so the mapped weights are then read from
        the file at their offsets and the rest added as copies."""
        if self.path is not None:
            so.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                        os.path.dirname(os.path.abspath(self.path)))
        shared = self.arrays if in_place and self.path is not None else self.in_memory
        values = {n: ort.OrtValue.ortvalue_from_numpy(a) for n, a in shared.items()}
        if shared is self.arrays:
            for name, value in values.items():
                so.add_initializer(name, value)
        elif values:
            so.add_external_initializers(list(values), list(values.values()))
        return list(values.values())


SPINNING_KEY = "session.intra_op.allow_spinning"


def session_options(threads: int | None) -> ort.SessionOptions:
    """Sequential execution, `threads` intra-op threads, spinning by rlx's rule
    (`rlx.engines.cores`: off when the process shares its cores)."""
    so = ort.SessionOptions()
    if threads is not None:
        so.intra_op_num_threads = threads
    if not spinning_pays(threads):
        so.add_session_config_entry(SPINNING_KEY, "0")
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 4  # failures reach the caller as exceptions, not log lines
    return so


def saved_session(folder: Path, threads: int | None) -> ort.InferenceSession:
    """A session over the prepacked model saved in `folder` (`saved_models`)."""
    so = session_options(threads)
    # already optimised (and laid out for this machine's kernels) when saved
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(folder / MODEL_FILE), so, providers=["CPUExecutionProvider"])


def export_for_ort(file: RlxFile, graph: Graph, path: str | None) -> tuple[bytes, _Placer, Any]:
    """(serialised model, where its weights went, export summary). Imports onnx."""
    from rlx.frontends.onnx.export import build_onnx, weight_names
    from rlx.frontends.onnx.export_quant import PackedForm, nbits_supported

    placer = _Placer(path)
    packed = PackedForm.NBITS if nbits_supported(8, 32) else PackedForm.DEQUANTIZE
    result = build_onnx(graph, placer=placer, packed=packed, constant_names=weight_names(file))
    return result.model.SerializeToString(), placer, result.summary


class OrtRunner:
    name = "onnxruntime"
    precision: str
    file: RlxFile | None  # keeps the artifact's map (and the arrays below) alive
    summary: Any  # the export's, when this load exported
    mapped: dict[str, tuple[int, int]]
    in_memory: dict[str, np.ndarray]
    bound: list[Any]  # the OrtValues the session's weights point into
    prepack: str
    cached: Path | None  # the prepacked model this session maps
    session: ort.InferenceSession

    def __init__(self, file: RlxFile, graph: Graph, path: str | None, threads: int | None,
                 cache_dir: str | os.PathLike | None = None):
        self._start(file, prepack_mode())
        if self.prepack == "mapped":
            session = self._from_cache(file, graph, path, threads, cache_dir)
            if session is not None:
                self.session = session
                return
            self.prepack = "off"
        model_bytes, placer = self._export(file, graph, path)
        so = session_options(threads)
        self.bound = placer.bind(so)
        if self.prepack == "off":
            so.add_session_config_entry("session.disable_prepacking", "1")
        self.session = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])

    @classmethod
    def from_saved(cls, folder: Path, threads: int | None) -> OrtRunner:
        """A runner over the prepacked model saved in `folder` by an earlier load, with no
        artifact and no export (`rlx.engines.warm`); raises what onnxruntime raises when
        the saved model does not load."""
        runner = cls.__new__(cls)
        runner._start(None, "mapped")
        runner.session = saved_session(folder, threads)
        runner.cached = folder
        return runner

    def _start(self, file: RlxFile | None, prepack: str) -> None:
        self.precision = "exact"  # onnxruntime's CPU kernels run the graph's dtypes
        self.file = file
        self.summary = None
        self.mapped, self.in_memory, self.bound = {}, {}, []
        self.prepack = prepack
        self.cached = None

    def _export(self, file: RlxFile, graph: Graph, path: str | None) -> tuple[bytes, _Placer]:
        model_bytes, placer, self.summary = export_for_ort(file, graph, path)
        self.mapped, self.in_memory = placer.mapped, placer.in_memory
        return model_bytes, placer

    def _from_cache(self, file: RlxFile, graph: Graph, path: str | None, threads: int | None,
                    cache_dir: str | os.PathLike | None) -> ort.InferenceSession | None:
        """A session over the cached prepacked model, made first if missing; None where
        the file may not be cached or the cache cannot be written (logged)."""
        if path is None or not is_plain_artifact(path):
            return None
        folder = saved_folder(Path(cache_dir) if cache_dir is not None
                              else default_cache_dir(), path, "onnxruntime")
        for attempt in range(2):
            if not (folder / MODEL_FILE).is_file():
                try:
                    self._optimize_into(folder, file, graph, path)
                except OSError as err:
                    log.warning("onnxruntime: cannot write the prepacked model to %s (%s); "
                                "running without prepacking", folder, err)
                    return None
            try:
                session = saved_session(folder, threads)
            except Exception as err:  # noqa: BLE001 - a damaged cache entry is rebuilt
                if attempt:
                    raise
                log.warning("onnxruntime: the cached model %s does not load (%s); "
                            "rebuilding it", folder, " ".join(str(err).split())[:200])
                import shutil

                shutil.rmtree(folder, ignore_errors=True)
                continue
            self.cached = folder
            return session
        return None

    def _optimize_into(self, folder: Path, file: RlxFile, graph: Graph, path: str) -> None:
        """Optimise the export with onnxruntime and save it (prepacked weights in its
        external data file) into `folder`, atomically: written to a sibling temporary
        folder, then renamed."""
        import shutil  # here, not at the top: a load from the cache never needs them
        import tempfile

        model_bytes, placer = self._export(file, graph, path)
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            so = session_options(None)
            bound = placer.bind(so, in_place=False)  # alive until the session is done
            so.optimized_model_filepath = str(tmp / MODEL_FILE)
            for key, value in (
                    ("session.optimized_model_external_initializers_file_name", WEIGHTS_FILE),
                    ("session.optimized_model_external_initializers_min_size_in_bytes", "1024"),
                    ("session.save_external_prepacked_constant_initializers", "1")):
                so.add_session_config_entry(key, value)
            ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
            del bound
            try:
                os.replace(tmp, folder)
            except OSError:
                if not (folder / MODEL_FILE).is_file():  # else another process won the race
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def run(self, feeds: dict[str, np.ndarray], outputs: Sequence[str]) -> list[np.ndarray]:
        return self.session.run(list(outputs), feeds)


def build(file: RlxFile, graph: Graph, path: str | None, *, threads: int | None,
          precision: str, cache_dir: str | os.PathLike | None = None) -> OrtRunner:
    return OrtRunner(file, graph, path, threads, cache_dir)
