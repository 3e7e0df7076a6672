"""The onnxruntime engine: the graph's ONNX export, weights bound from rlx's own memory.

Weights are handed over as they lie: each one is an `OrtValue` over the artifact's own
array (`SessionOptions.add_initializer`), which onnxruntime uses in place, without a copy.
The model's TensorProtos for them are external-data stubs that name no file on disk: the
validated mapping of the artifact (`RlxFile.origin`) is given to onnxruntime as an
in-memory file (`add_external_initializers_from_files_in_memory`, "rlx-artifact") at the
weights' offsets in it, and each array with no bytes in that mapping (packed weights re-laid
out for MatMulNBits, a package's tensors) as an in-memory file of its own. So onnxruntime
never opens the artifact by path: a file renamed, swapped or moved away after rlx checked
it changes neither what runs nor what is cached (docs/reliability.md), and a `.rlx`
truncated or rewritten while loaded neither kills the process nor changes its results
(rlx's read lease, promise 9), in every prepack mode.

Prepacking: at load onnxruntime re-lays out constant MatMul/Gemm/Conv weights for its
kernels (and Conv weights for its NCHWc layout), an anonymous copy of about the weight
bytes that buys up to 1.4x in latency (docs/engines.md). The `prepack` option of
`rlx.load` chooses:

- `mapped` (default): the first load of a plain (unencrypted) file optimises the export
  once and saves it, prepacked weights included, to `<cache_dir>/onnxruntime/<key>/`
  (`saved_models`, keyed by the validated content; onnxruntime reads the weights it saves
  from the in-memory files above); every load then maps that model's weights from disk:
  prepacked speed, file-backed pages shared by every process, no optimisation at load.
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
from rlx.engines.fingerprint import default_cache_dir
from rlx.engines.mapping import address_of
from rlx.engines.registry import PREPACK_MODES, check_prepack
from rlx.engines.saved_models import (
    MODEL_FILE,
    WEIGHTS_FILE,
    check_saved,
    save_manifest,
    saved_folder,
)
from rlx.logs import Logger

if TYPE_CHECKING:  # a warm load (rlx.engines.warm) imports no graph IR
    from rlx.artifact.model import RlxFile
    from rlx.ir.graph import Graph

__all__ = ["OrtRunner", "build", "PREPACK_MODES", "saved_session", "session_options",
           "export_for_ort", "disabled_optimizers", "SLOW_FUSIONS", "SPINNING_KEY"]

log = Logger("rlx.engines")

_ARTIFACT = "rlx-artifact"  # the in-memory file of the validated mapping
_OWN = "rlx-array-"  # + a number: the in-memory file of one array with no bytes in it


class _Placer:
    """External-data TensorProto stubs for the weights, naming in-memory files only, and
    the arrays to bind them to."""

    def __init__(self, origin: memoryview | None):
        self.base = np.frombuffer(origin, np.uint8) if origin is not None and len(origin) \
            else None
        self.mapped: dict[str, tuple[int, int]] = {}  # name -> (offset in the mapping, length)
        self.in_memory: dict[str, np.ndarray] = {}  # weights with no bytes in the mapping
        self.arrays: dict[str, np.ndarray] = {}  # every weight, by name

    def __call__(self, name: str, array: np.ndarray) -> Any:
        from rlx.onnx.export import external_tensor

        array = np.ascontiguousarray(array)
        self.arrays[name] = array
        offset = self._offset(array)
        if offset is not None:
            self.mapped[name] = (offset, array.nbytes)
            return external_tensor(name, array, _ARTIFACT, offset)
        self.in_memory[name] = array
        return external_tensor(name, array, f"{_OWN}{len(self.in_memory)}", 0)

    def _offset(self, array: np.ndarray) -> int | None:
        """Where `array`'s bytes lie in the validated mapping, if they do."""
        if self.base is None or not array.nbytes:
            return None
        offset = address_of(array) - address_of(self.base)
        return offset if offset >= 0 and offset + array.nbytes <= self.base.nbytes else None

    def bind(self, so: ort.SessionOptions, *, in_place: bool = True
             ) -> tuple[list[Any], list[np.ndarray]]:
        """Bind every stub to its bytes; returns the OrtValues and buffers onnxruntime
        points into, which must outlive the session (it keeps only pointers).

        In place (a session that runs): every weight is an OrtValue over its array, used
        without a copy; onnxruntime only checks that the stubs' locations exist, which
        empty placeholders in a private folder satisfy (`_placeholders`, never read).
        `in_place=False` is for a session that saves its optimised model: onnxruntime
        writes out only the initializers it owns, so it reads the mapped weights from the
        validated mapping given as an in-memory file and gets the rest as copies."""
        if in_place:
            names = {_ARTIFACT} | {f"{_OWN}{k}" for k in range(1, len(self.in_memory) + 1)}
            so.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                        _placeholders(names))
            values = []
            for name, array in self.arrays.items():
                value = ort.OrtValue.ortvalue_from_numpy(array)
                so.add_initializer(name, value)
                values.append(value)
            return values, []
        buffers = []
        if self.mapped and self.base is not None:
            so.add_external_initializers_from_files_in_memory([_ARTIFACT], [self.base],
                                                              [self.base.nbytes])
            buffers.append(self.base)
        copies = {n: ort.OrtValue.ortvalue_from_numpy(a) for n, a in self.in_memory.items()}
        if copies:
            so.add_external_initializers(list(copies), list(copies.values()))
        return list(copies.values()), buffers


def _saved_unreadably(graph: Graph) -> bool:
    """Whether onnxruntime would save a prepacked model of `graph` that it cannot read back
    (1.32: a QLinearConv's prepacked weights), so that prepacking in memory saves a wasted
    build (captcha-crnn's QOperator variant: 6.4 s a load, 3.0 s in memory)."""
    from rlx.ir.ops.quant import QLinearConv

    return any(isinstance(node.op, QLinearConv) for node in graph.nodes())


_PLACEHOLDERS: list[str] = []  # this process's folder of empty placeholder files


def _placeholders(names: set[str]) -> str:
    """A private folder (made once per process, removed at exit) holding an empty file of
    each name: what onnxruntime's existence check of an external-data location finds, so
    that no stub names the artifact. onnxruntime never reads them (every stub's
    initializer is added, which replaces it)."""
    if not _PLACEHOLDERS or not os.path.isdir(_PLACEHOLDERS[0]):
        import atexit
        import shutil
        import tempfile

        _PLACEHOLDERS[:] = [tempfile.mkdtemp(prefix="rlx-ort-")]
        atexit.register(shutil.rmtree, _PLACEHOLDERS[0], True)
    folder = _PLACEHOLDERS[0]
    for name in names:
        target = os.path.join(folder, name)
        if not os.path.exists(target):
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o600))
    return folder


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
    """A session over the prepacked model saved in `folder` (`saved_models`), which the
    caller has checked (`check_saved`)."""
    so = session_options(threads)
    # already optimised (and laid out for this machine's kernels) when saved
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(folder / MODEL_FILE), so, providers=["CPUExecutionProvider"])


SLOW_FUSIONS = ("SkipLayerNormFusion",)
"""onnxruntime fusions every graph runs without: their fused kernel is slower than the ops it
replaces. SkipLayerNormFusion makes a residual Add + LayerNormalization (+ bias Add) one
SkipLayerNormalization, whose CPU kernel (onnxruntime 1.32) took 5.5-7x the CPU time of
the Add and LayerNormalization it replaced, at every shape measured ([64, 384] 127 vs 23
us, [128, 768] 490 vs 69, [512, 384] 971 vs 134, one thread; [1, 384] 8.7 vs 7.7): a
BERT encoder's (minilm-l3) 1-thread CPU time fell 8.3 -> 7.5 ms in f32, 3.40 -> 2.68 ms
with its int8 plan."""


def disabled_optimizers(graph: Graph) -> list[str]:
    """The onnxruntime fusions `graph` runs without: `SLOW_FUSIONS`, and for a graph with
    int8 nodes MatMulAddFusion, which turns an int8 MatMul and its bias Add into one f32
    Gemm over dequantised weights, where without it they run as MatMulIntegerToFloat and
    an Add (`rlx.baking.int8`)."""
    from rlx.ir.ops.quant import DequantizeLinear

    quantised = any(isinstance(n.op, DequantizeLinear) for n in graph.nodes())
    return [*SLOW_FUSIONS, *(["MatMulAddFusion"] if quantised else [])]


def export_for_ort(file: RlxFile, graph: Graph) -> tuple[bytes, _Placer, Any]:
    """(serialised model, where its weights went, export summary), with the fusions
    onnxruntime leaves undone done (`rlx.onnx.ort_fusions`). Imports onnx."""
    from rlx.onnx.export import build_onnx, weight_names
    from rlx.onnx.export_quant import PackedForm, nbits_supported
    from rlx.onnx.ort_fusions import fold_integer_matmul_bias

    placer = _Placer(file.origin.buffer if file.origin is not None else None)
    packed = PackedForm.NBITS if nbits_supported(8, 32) else PackedForm.DEQUANTIZE
    result = build_onnx(graph, placer=placer, packed=packed, constant_names=weight_names(file))
    fold_integer_matmul_bias(result.model)
    return result.model.SerializeToString(), placer, result.summary


class OrtRunner:
    name = "onnxruntime"
    precision: str
    file: RlxFile | None  # keeps the artifact's map (and the arrays below) alive
    summary: Any  # the export's, when this load exported
    mapped: dict[str, tuple[int, int]]
    in_memory: dict[str, np.ndarray]
    bound: list[Any]  # the OrtValues the session's weights point into
    files: list[np.ndarray]  # the in-memory files' bytes
    prepack: str
    cached: Path | None  # the prepacked model this session maps
    session: ort.InferenceSession
    variant: tuple[str, ...] = ()  # which of a file's models the saved cache holds
    disabled: list[str]  # onnxruntime fusions left off (`disabled_optimizers`)

    def __init__(self, file: RlxFile, graph: Graph, threads: int | None,
                 cache_dir: str | os.PathLike | None = None, prepack: str = "mapped",
                 precision: str = "exact", variant: tuple[str, ...] = ()):
        """`variant` tells apart the models of one file in the saved cache (the exact
        graph of a fast file beside its plan's)."""
        check_prepack(prepack)
        self._start(file, prepack)
        self.precision = precision
        self.variant = variant
        self.disabled = disabled_optimizers(graph)
        if self.prepack == "mapped" and _saved_unreadably(graph):
            self.prepack = "heap"
        if self.prepack == "mapped":
            session = self._from_cache(file, graph, threads, cache_dir)
            if session is not None:
                self.session = session
                return
            if self.prepack == "mapped":
                self.prepack = "off"
        model_bytes, placer = self._export(file, graph)
        self.session = self._session(model_bytes, placer, threads)

    def _session(self, model_bytes: bytes, placer: _Placer,
                 threads: int | None) -> ort.InferenceSession:
        """A session with the weights bound in place or, where onnxruntime refuses that
        (logged), given as in-memory files, onnxruntime copying those not in the mapping:
        its layout optimiser reads an initializer it transposes from the stub's file, not
        from the value bound to it (onnxruntime 1.32, QLinearConv graphs)."""
        for in_place in (True, False):
            so = session_options(threads)
            self.bound, self.files = placer.bind(so, in_place=in_place)
            if self.prepack == "off":
                so.add_session_config_entry("session.disable_prepacking", "1")
            try:
                return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"],
                                            disabled_optimizers=self.disabled)
            except Exception as err:  # noqa: BLE001 - the second way raises it again
                if not in_place:
                    raise
                log.warning("onnxruntime: the weights bound in place fail (%s); giving "
                            "them as in-memory files", " ".join(str(err).split())[:200])
        raise AssertionError("unreachable: the second attempt returns or raises")

    @classmethod
    def from_saved(cls, folder: Path, threads: int | None) -> OrtRunner:
        """A runner over the prepacked model saved in `folder` by an earlier load, with no
        artifact and no export (`rlx.engines.warm`, which checked the folder); raises what
        onnxruntime raises when the saved model does not load."""
        runner = cls.__new__(cls)
        runner._start(None, "mapped")
        runner.session = saved_session(folder, threads)
        runner.cached = folder
        return runner

    @property
    def private_weight_bytes(self) -> int:
        """Weight bytes this process holds a copy of (auto's `memory="shared"`): the
        weights handed over as copies, and with heap prepacking (at most) every mapped one;
        the saved prepacked model and the artifact are mapped, shared by every worker."""
        copied = sum(a.nbytes for a in self.in_memory.values())
        if self.prepack == "heap":
            copied += sum(length for _, length in self.mapped.values())
        return copied

    def _start(self, file: RlxFile | None, prepack: str) -> None:
        self.precision = "exact"  # onnxruntime's CPU kernels run the graph's dtypes
        self.file = file
        self.summary = None
        self.mapped, self.in_memory, self.bound, self.files = {}, {}, [], []
        self.prepack = prepack
        self.cached = None
        self.disabled = []

    def _export(self, file: RlxFile, graph: Graph) -> tuple[bytes, _Placer]:
        model_bytes, placer, self.summary = export_for_ort(file, graph)
        self.mapped, self.in_memory = placer.mapped, placer.in_memory
        return model_bytes, placer

    def _from_cache(self, file: RlxFile, graph: Graph, threads: int | None,
                    cache_dir: str | os.PathLike | None) -> ort.InferenceSession | None:
        """A session over the cached prepacked model, made first if missing, damaged or
        foreign (logged); None where the file may not be cached (no content key, or
        encrypted), the cache cannot be written, or onnxruntime cannot read back the model
        it saved (then `prepack` becomes "heap")."""
        origin = file.origin
        if origin is None or origin.encrypted:
            return None
        folder = saved_folder(Path(cache_dir) if cache_dir is not None
                              else default_cache_dir(), origin.key, "onnxruntime",
                              *self.variant)
        for _ in range(2):
            problem = check_saved(folder, origin.key)
            if problem is not None:
                if problem != "missing":
                    log.warning("onnxruntime: the cached model %s is %s; rebuilding it",
                                folder, problem)
                try:
                    self._optimize_into(folder, file, graph, origin.key)
                except OSError as err:
                    log.warning("onnxruntime: cannot write the prepacked model to %s (%s); "
                                "running without prepacking", folder, err)
                    return None
            try:
                session = saved_session(folder, threads)
            except Exception as err:  # noqa: BLE001 - a damaged cache entry is rebuilt
                if problem is not None:  # just made: onnxruntime 1.32 saves QLinearConv
                    # weights it cannot read back
                    log.warning("onnxruntime: its own saved model %s does not load (%s); "
                                "prepacking in memory", folder, " ".join(str(err).split())[:200])
                    _discard(folder)
                    self.prepack = "heap"
                    return None
                log.warning("onnxruntime: the cached model %s does not load (%s); "
                            "rebuilding it", folder, " ".join(str(err).split())[:200])
                _discard(folder)
                continue
            self.cached = folder
            return session
        return None

    def _optimize_into(self, folder: Path, file: RlxFile, graph: Graph, key: str) -> None:
        """Optimise the export with onnxruntime and save it (prepacked weights in its
        external data file) into `folder`, atomically: written to a sibling temporary
        folder with its manifest (`save_manifest`), then renamed. onnxruntime reads the
        weights from the in-memory files (the validated mapping), never from a path."""
        import shutil  # here, not at the top: a load from the cache never needs them
        import tempfile

        from rlx.artifact.model import GRAPH

        file.check_integrity(GRAPH)  # what the export reads, before anything derived is kept
        model_bytes, placer = self._export(file, graph)
        folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            so = session_options(None)
            keep = placer.bind(so, in_place=False)  # alive until the session is done
            so.optimized_model_filepath = str(tmp / MODEL_FILE)
            for entry, value in (
                    ("session.optimized_model_external_initializers_file_name", WEIGHTS_FILE),
                    ("session.optimized_model_external_initializers_min_size_in_bytes", "1024"),
                    ("session.save_external_prepacked_constant_initializers", "1")):
                so.add_session_config_entry(entry, value)
            ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"],
                                 disabled_optimizers=self.disabled)
            del keep
            save_manifest(tmp, key)
            _discard(folder)  # a damaged or foreign entry: replaced, not trusted
            try:
                os.replace(tmp, folder)
            except OSError:
                if check_saved(folder, key) is not None:  # else another process won the race
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def run(self, feeds: dict[str, np.ndarray], outputs: Sequence[str]) -> list[np.ndarray]:
        return self.session.run(list(outputs), feeds)


def _discard(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def build(file: RlxFile, graph: Graph, path: str | None, *, threads: int | None,
          precision: str, cache_dir: str | os.PathLike | None = None,
          prepack: str = "mapped", memory: str = "private") -> OrtRunner:
    """`path` only names the file: the weights come from `file`, never from disk (`memory`
    is unused: onnxruntime shares them either way, docs/engines.md). A fast
    file's plan runs as QDQ (onnxruntime's int8 kernels); its exact graph is another model,
    saved beside the plan's in the cache."""
    plan = file.precision_plan
    if plan is None:
        return OrtRunner(file, graph, threads, cache_dir, prepack)
    if precision == "exact":
        return OrtRunner(file, graph, threads, cache_dir, prepack, variant=("exact",))
    return OrtRunner(file, graph, threads, cache_dir, prepack, plan.label)
