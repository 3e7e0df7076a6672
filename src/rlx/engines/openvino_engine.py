"""The OpenVINO engine: the graph's ONNX export read by OpenVINO, weights over the map.

The export makes every large weight a graph input. The CPU plugin re-lays out constant
MatMul and Convolution weights in private memory at compile (a copy per process: N
workers, N copies), but computes a MatMul on an input's own bytes. With `memory="shared"`
(several workers load the file) a weight used only by MatMuls stays an input, set on each
infer request to an `ov.Tensor` over the artifact's mapped bytes, and its pages are the
page cache's, shared by every process mapping the file. Otherwise it is a Constant too:
the plugin runs it as FullyConnected on its own layout, which a MatMul on an input cannot
match (captcha-crnn's LSTM products, 20 rows x 4096 x 400, ran 4.5 ms each as MatMuls on
the served weights against ~0.9 as FullyConnected: the model 0.64x the CPU time). Every
other weight becomes an `op.Constant(..., shared_memory=True)` over the map (a Gather table
is used in place; Conv and elementwise operands are copied at compile: docs/engines.md has
the measurements). Packed Q8_0 / TQ2_0 weights are written in the decompression form (int8
codes -> Convert -> Multiply by block scales), which the CPU plugin executes compressed.

`precision="exact"` sets INFERENCE_PRECISION_HINT to f32 and turns off the dynamic
quantization of activations the plugin applies to compressed (int8) weights on CPUs with
AMX or VNNI (an 0.3 error on a product of unit normals); `"fast"` keeps the plugin's
defaults (bf16 on AMX / AVX512-BF16 CPUs, f32 elsewhere), except on a file baked with the
fast profile: there, on a CPU OpenVINO runs int8 on, it runs the plan's own OpenVINO int8
set u8 x i8 with the nodes the bake planned bf16 beside it in bf16 and every other op f32
(`rlx.artifact.openvino_form`; "fast: int8 N nodes, bf16 M nodes, f32 K") when estimated
no slower than the bf16 part; a file baked before that set runs the plan's int8 products
u8 x i8 and every other op f32 when the guard passed that form and it is estimated faster
(`rlx.engines.openvino_int8`; `Model.precision` "fast: int8, f32"); where the plugin's int8
transformations throw compiling either, a warning and the bf16 part; else the
plan's exact graph, the plan's bf16 nodes in bf16 and every other node in f32 on a CPU with
bf16 (`rlx.engines.openvino_bf16`; "fast: bf16 N nodes, f32 M"), all in f32 elsewhere
("fast: f32"). Each thread gets its own infer request, so one Model may
run from many threads.

A model with an unknown input dim (a batch, an image's size) is compiled with it unknown at
load, and compiled again for the input shapes of its first run; a run at other shapes goes
back to a compile with them unknown, and `STEADY_RUNS` runs in a row at one set of shapes
compile it for those, twice as many after each further return, so shapes that keep changing
cost a number of compiles that grows with the log of the runs (one compiled model at a
time: the plugin holds its own copy of the Conv weights in each). auto's first run is on
its timing feeds (sized symbolic dims), a user's may differ: that costs two compiles, not
the gain. The compile
took 0.15-0.2 s on orientation-lcnet, 0.55-1.0 s on nudenet-320n. With a dim unknown the
plugin runs each node's shape inference and memory set-up at every run, serially, which the
fast plan's short int8 and bf16 kernels feel most: at the shapes of the run, rlx's fast
form of nudenet-320n (320x320 image, its H and W unknown) took 0.87x the CPU time per run
at one thread and orientation-lcnet (batch unknown) 0.96x (2026-12-05, load 6, paired fresh
processes); with the machine's other work held off (`chrt`) 0.80x and 0.90x the wall time at
two threads, 0.94x and 0.95x at one.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence

import numpy as np
import openvino as ov

from rlx.artifact.model import RlxFile
from rlx.artifact.openvino_form import openvino_int8_graph, openvino_int8_set
from rlx.artifact.planned import exact_graph, int8_products_graph
from rlx.artifact.precision import PrecisionPlan
from rlx.engines.mapping import writable_alias
from rlx.engines.openvino_bf16 import (
    bf16_outputs,
    has_bf16,
    keep_f32,
    share_transposed,
    unfolded_operands,
)
from rlx.engines.openvino_int8 import bf16_beside, has_int8, runs_int8, runs_own_int8
from rlx.ir.graph import Graph
from rlx.onnx.export import build_onnx, weight_names
from rlx.onnx.export_quant import PackedForm

__all__ = ["OpenVinoRunner", "build", "core"]

log = logging.getLogger(__name__)

UNPINNED = "NO"
"""`ENABLE_CPU_PINNING`: the plugin's threads are left to the scheduler. Pinned (the
plugin's default on Linux), a thread stays on its core when another process needs that
core too: beside two CPU-bound processes on 2 cores, nudenet-320n f32 ran 40.2 ms pinned
against 30.4 unpinned at 1 thread, 44.8 against 22.9 at 2 (OpenVINO 2026.4, p50 of six
fresh processes each); on the quiet machine 21.5 and 11.6 ms both ways."""

STEADY_RUNS = 3
"""Runs in a row at one set of shapes after which a model that went back to unknown dims is
compiled for them again; doubled at each further return (module doc)."""

_CORE: ov.Core | None = None
_CORE_LOCK = threading.Lock()


def core() -> ov.Core:
    global _CORE
    with _CORE_LOCK:
        if _CORE is None:
            _CORE = ov.Core()
        return _CORE


def _multiplied_only(param: ov.Node) -> bool:
    """Every consumer of the weight is a MatMul: the CPU plugin runs those on the caller's
    bytes when the weight is an input, where a Constant is re-laid out in private memory."""
    users = param.output(0).get_target_inputs()
    return bool(users) and all(u.get_node().get_type_name() == "MatMul" for u in users)


def _serve_from_map(param: ov.Node, shape: tuple[int, ...]) -> None:
    """Keep the weight a graph input of unknown dims, reshaped to its own static shape: a
    static input is given a buffer of its size at compile, an unknown one is not."""
    users = list(param.output(0).get_target_inputs())
    target = ov.op.Constant(np.array(shape, dtype=np.int64))
    static = ov.opset13.reshape(param.output(0), target, special_zero=False)
    for user in users:
        user.replace_source_output(static.output(0))
    param.set_partial_shape(ov.PartialShape([-1] * len(shape)))


def _read_in_place(param: ov.Node) -> bool:
    """Every consumer is a Gather reading the weight as its table, which the CPU plugin
    uses where it lies (docs/engines.md); a Constant with other consumers is copied."""
    users = param.output(0).get_target_inputs()
    return bool(users) and all(u.get_node().get_type_name() == "Gather" and u.get_index() == 0
                               for u in users)


def _serve(model: ov.Model, arrays: dict[str, np.ndarray],
           served: dict[str, np.ndarray]) -> None:
    """Make the inputs of `model` named in `arrays` served weights (`_serve_from_map`),
    before the f32 marks, which then cover the Reshape each gets (unmarked, it ran bf16
    and rounded the weight)."""
    for param in model.get_parameters():
        name = param.get_friendly_name()
        if name in arrays:
            served[name] = writable_alias(np.ascontiguousarray(arrays[name]))
            _serve_from_map(param, served[name].shape)


def _bind_weights(model: ov.Model, arrays: dict[str, np.ndarray],
                  served: dict[str, np.ndarray], serve: bool = True
                  ) -> tuple[list[np.ndarray], int]:
    """Replace the weight Parameters by shared-memory Constants, except MatMul weights
    (when `serve`), which go into `served` to be set on each request; the
    aliases to keep alive, and the bytes of the Constants the plugin copies into this
    process's memory at compile."""
    keep, copied = [], 0
    for param in list(model.get_parameters()):
        name = param.get_friendly_name()
        if name not in arrays:
            continue
        alias = writable_alias(np.ascontiguousarray(arrays[name]))
        keep.append(alias)
        if serve and _multiplied_only(param):
            _serve_from_map(param, alias.shape)
            served[name] = alias
            continue
        if not _read_in_place(param):
            copied += alias.nbytes
        const = ov.op.Constant(alias, shared_memory=True)
        const.set_friendly_name(name)
        param.output(0).replace(const.output(0))
        model.remove_parameter(param)
    model.validate_nodes_and_infer_types()
    return keep, copied


class OpenVinoRunner:
    name = "openvino"

    def __init__(self, file: RlxFile, graph: Graph, threads: int | None, precision: str,
                 memory: str = "private"):
        self.precision = precision
        self.file = file
        self.serves = memory == "shared"  # MatMul weights served from the map (module doc)
        plan = file.precision_plan
        bf16: set[str] | None = None  # the plan's bf16 nodes' export names, when run so
        if plan is not None and precision == "fast":
            own = openvino_int8_set(plan) and has_int8(core())
            if own and self._own_int8(graph, plan, threads):
                return
            if has_int8(core()) and runs_int8(graph, plan, has_bf16(core())):
                try:
                    self._build(int8_products_graph(graph, plan), threads, plan, None)
                    self.precision = plan.label
                    return
                except RuntimeError as err:  # the plugin's int8 transformations threw
                    log.warning("openvino: cannot run the int8 part (%s); running the "
                                "bf16 part", str(err).strip().splitlines()[-1])
            graph = exact_graph(graph, plan)
            self.precision = "fast: f32" if not plan.bf16 else "fast: f32 (no bf16 on this CPU)"
            if plan.bf16 and has_bf16(core()):
                bf16 = bf16_outputs(graph, plan.bf16)
        self._build(graph, threads, plan, bf16)

    def _own_int8(self, graph: Graph, plan: PrecisionPlan, threads: int | None) -> bool:
        """Build the plan's own OpenVINO int8 set with its bf16 nodes beside it (f32 on a
        CPU without bf16), when estimated faster than the bf16 part; whether it did."""
        form = openvino_int8_graph(graph, plan)
        bf16 = has_bf16(core())
        if not runs_own_int8(graph, form, plan, bf16):
            return False
        beside = bf16_beside(form, plan) if bf16 else []
        try:
            self._build(form, threads, plan, bf16_outputs(form, beside) if beside else None)
        except RuntimeError as err:  # the plugin's int8 transformations threw
            log.warning("openvino: cannot run the int8 set (%s); running the bf16 part",
                        str(err).strip().splitlines()[-1])
            return False
        count = len(openvino_int8_set(plan))
        self.precision = f"fast: int8 {count} nodes, " + (
            self.precision.removeprefix("fast: ") if beside else "f32")
        return True

    def _build(self, graph: Graph, threads: int | None, plan: PrecisionPlan | None,
               bf16: set[str] | None) -> None:
        """Export `graph`, bind its weights and compile it; `bf16`: the export names of the
        nodes that run bf16 (every other op marked f32), None: no bf16 run."""
        result = build_onnx(graph, placer=lambda name, array: None,
                            packed=PackedForm.DECOMPRESS, constant_names=weight_names(self.file),
                            domains=())
        self.summary = result.summary
        self.arrays = result.inputs_bound
        model = core().read_model(result.model.SerializeToString())
        self.served: dict[str, np.ndarray] = {}
        kept: dict[str, np.ndarray] = {}  # the operands f32 ops need as inputs, served
        if bf16 is not None:
            kept = unfolded_operands(model, bf16, self.arrays)
            _serve(model, kept, self.served)
            model, self.precision = keep_f32(core(), model, bf16)
        # private_weight_bytes: what each worker process holds apart (auto's memory="shared")
        # a bf16 run converts a served weight at every run; as a Constant, once at compile
        bound = {name: array for name, array in self.arrays.items() if name not in kept}
        self._keep, self.private_weight_bytes = _bind_weights(
            model, bound, self.served, serve=bf16 is None and self.serves)
        if bf16 is not None:
            share_transposed(model)
        self.model = model
        config: dict[str, str] = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1",
                                  "ENABLE_CPU_PINNING": UNPINNED}
        if self.precision == "exact" or plan is not None:
            config["INFERENCE_PRECISION_HINT"] = "f32" if bf16 is None else "bf16"
            config["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = "0"
        if threads is not None:
            config["INFERENCE_NUM_THREADS"] = str(threads)
        self._config = config
        self.compiled = core().compile_model(model, "CPU", config)
        # the input shapes `compiled` is static for (None: its dims unknown), whether runs
        # may fix them, the last runs' shapes and how many in a row, and how many fix them
        self._shapes: tuple[tuple[int, ...], ...] | None = None
        self._fixes = any(i.get_partial_shape().is_dynamic for i in self.compiled.inputs)
        self._streak: tuple[tuple[tuple[int, ...], ...] | None, int] = (None, 0)
        self._steady = 1
        self._lock = threading.Lock()
        self._index: dict[str, int] = {}
        for k, out in enumerate(self.compiled.outputs):
            for name in out.get_names():
                self._index.setdefault(name, k)
        wanted = {n.source_name for n in graph.inputs()}
        # a port may carry several names (OpenVINO merges those of folded nodes)
        self._inputs = [next(n for n in sorted(i.get_names()) if n in wanted)
                        for i in self.compiled.inputs if not i.get_names().isdisjoint(wanted)]
        self._local = threading.local()

    def fixed_model(self, shapes: tuple[tuple[int, ...], ...]) -> ov.Model:
        """A copy of the model with its inputs' dims set to `shapes` (one per graph input,
        in the order the runner feeds them)."""
        fixed = self.model.clone()
        fixed.reshape({p.output(0): ov.PartialShape(list(shapes[self._inputs.index(n)]))
                       for p in fixed.get_parameters()
                       for n in p.output(0).get_names() & set(self._inputs)})
        return fixed

    def _compiled_for(self, shapes: tuple[tuple[int, ...], ...]) -> ov.CompiledModel:
        """The compiled model to run inputs of `shapes` on (module doc)."""
        if shapes == self._shapes or not self._fixes:
            return self.compiled
        with self._lock:
            if self._shapes is not None and shapes != self._shapes:  # static for others
                self.compiled = core().compile_model(self.model, "CPU", self._config)
                self._shapes, self._streak = None, (None, 0)
                self._steady = max(STEADY_RUNS, 2 * self._steady)
            if self._shapes is None:
                same, count = self._streak
                self._streak = shapes, count + 1 if same == shapes else 1
                if self._streak[1] >= self._steady:
                    self._fix(shapes)
            return self.compiled

    def _fix(self, shapes: tuple[tuple[int, ...], ...]) -> None:
        """Compile the model static for `shapes`; where the plugin refuses them, keep the
        unknown dims for good."""
        try:
            self.compiled = core().compile_model(self.fixed_model(shapes), "CPU", self._config)
            self._shapes = shapes
        except RuntimeError as err:  # shapes the model's own checks refuse
            log.debug("openvino: kept unknown dims (%s)", str(err).splitlines()[0])
            self._fixes = False

    def input_shapes(self, feeds: dict[str, np.ndarray]) -> tuple[tuple[int, ...], ...]:
        """The shapes of the graph inputs in `feeds`, as `fixed_model` takes them."""
        return tuple(np.shape(feeds[n]) for n in self._inputs)

    def _request(self, feeds: dict[str, np.ndarray]) -> ov.InferRequest:
        compiled = self._compiled_for(self.input_shapes(feeds))
        if getattr(self._local, "compiled", None) is not compiled:
            request = compiled.create_infer_request()
            for name, array in self.served.items():
                request.set_tensor(name, ov.Tensor(array, shared_memory=True))
            self._local.compiled, self._local.request = compiled, request
        return self._local.request

    def run(self, feeds: dict[str, np.ndarray], outputs: Sequence[str]) -> list[np.ndarray]:
        request = self._request(feeds)
        result = request.infer({name: feeds[name] for name in self._inputs})
        values = list(result.values())
        return [np.array(values[self._index[name]], copy=True) for name in outputs]


def build(file: RlxFile, graph: Graph, path: str | None, *, threads: int | None,
          precision: str, cache_dir: str | os.PathLike | None = None,
          prepack: str = "mapped", memory: str = "private") -> OpenVinoRunner:
    """`cache_dir` and `prepack` are unused: this engine keeps nothing on disk. `memory`:
    "shared" serves MatMul weights from the map (module doc)."""
    return OpenVinoRunner(file, graph, threads, precision, memory)
