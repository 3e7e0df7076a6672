"""`rlx.load(path, engine=...) -> Model`: one entry point over every engine.

A `Model` holds an engine's runner, the graph's declared inputs and outputs (`IoSpec`) and
the artifact (its memory map stays open while the model lives). `Model.run` checks feeds
with the numpy runtime's own rules (`rlx.runtime.feeds.FeedChecker`), so every engine
accepts and refuses exactly the same feeds with the same messages, then hands the checked
arrays to the engine. `run` may be called from many threads at once; it also reads
onnxruntime's argument order and a bare array (`rlx.engines.calls`), and `Model.stream()`
opens a session that feeds state outputs back (`rlx.engines.stream`).

A warm load (`rlx.engines.warm`: onnxruntime chosen before, its prepacked model saved)
reads only the file's header; `Model.file` then opens the whole artifact when first used.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from rlx.engines.calls import RunArgument, RunArguments
from rlx.engines.cores import read_ahead, reads_ahead
from rlx.engines.registry import (
    WARM_ENGINES,
    check_engine,
    check_memory,
    check_precision,
    check_prepack,
    engine_module,
)
from rlx.errors import InputError
from rlx.ir.shape import Dim, Shape
from rlx.logs import Logger
from rlx.record import dataclass
from rlx.runtime.feeds import FeedChecker

if TYPE_CHECKING:  # a warm load imports no graph IR
    from rlx.artifact.model import RlxFile
    from rlx.engines.stream import Stream
    from rlx.ir.graph import Graph

__all__ = ["FeedInput", "IoSpec", "Model", "Runner", "load", "build_runner", "graph_outputs"]

log = Logger("rlx.engines")


@dataclass(frozen=True)
class IoSpec:
    """A model input or output: `name`, `shape` (symbolic dims as their names, "?" where
    unknown) and `dtype` (a numpy dtype); `type` spells the dtype as onnxruntime's NodeArg
    does, so `Model.get_inputs()` reads as onnxruntime's."""

    name: str
    shape: tuple[Dim, ...]
    dtype: np.dtype

    @property
    def type(self) -> str:
        """The dtype as onnxruntime's `NodeArg.type` spells it, e.g. "tensor(float)"."""
        return f"tensor({_ORT_TYPE_NAMES.get(self.dtype.name, self.dtype.name)})"


_ORT_TYPE_NAMES = {"float32": "float", "float64": "double"}
"""numpy dtype names onnxruntime spells otherwise (the rest it spells as numpy does)."""


class Runner(Protocol):
    """What an engine builds: `run(feeds, outputs)` with checked feeds by input name and
    the wanted output names; returns those outputs in that order."""

    name: str
    precision: str

    @property
    def private_weight_bytes(self) -> int:
        """Weight bytes the engine copied into this process (`rlx.engines.sharing`)."""
        ...

    def run(self, feeds: dict[str, np.ndarray], outputs: Sequence[str]) -> list[np.ndarray]: ...


class FeedInput(NamedTuple):
    """A declared input as the feed checks read it (an Input node reads the same)."""

    id: int
    source_name: str
    tensor_shape: Shape


class Model:
    """A loaded `.rlx` file ready to run on one engine (`Model.engine`).

    `inputs`: what the feed checks read per input (the graph's Input nodes, or
    `FeedInput`s from the header); `file`: the artifact, or None to open it (from `path`)
    when first asked for."""

    def __init__(self, runner: Runner, inputs: Sequence[Any], outputs: list[IoSpec], *,
                 name: str, path: str | None = None, file: RlxFile | None = None):
        self._file = file
        self.path = path
        self.name = name
        # plain records whatever was given: a graph's Input nodes read their names and
        # shapes through properties, which every run's feed checks would pay for again
        self._inputs: list[Any] = [FeedInput(n.id, n.source_name, n.tensor_shape)
                                   for n in inputs]
        self._feeds = FeedChecker(self._inputs)
        self._runner = runner
        self.inputs = [IoSpec(n.source_name, n.tensor_shape.dims, n.tensor_shape.dtype.numpy)
                       for n in self._inputs]
        self.outputs = outputs
        self._output_names = [spec.name for spec in self.outputs]
        self._arguments = RunArguments("model.run", [s.name for s in self.inputs],
                                       self._output_names)

    @property
    def file(self) -> RlxFile:
        """The artifact; after a warm load, opened (and validated) here, once."""
        if self._file is None:
            from rlx.artifact.open import open_artifact

            if self.path is None:
                raise InputError("this model was loaded from no file")
            self._file = open_artifact(self.path)
        return self._file

    @property
    def engine(self) -> str:
        """The engine that runs this model: "numpy", "onnxruntime" or "openvino"."""
        return self._runner.name

    @property
    def precision(self) -> str:
        """"exact" (f32 as the graph says), "fast" (the engine's default: bf16 on AMX /
        AVX512-BF16 CPUs), or for a file baked with the fast profile what runs of its
        precision plan, e.g. "fast: int8, f32" (`rlx.artifact.precision`)."""
        return self._runner.precision

    @property
    def runner(self) -> Runner:
        return self._runner

    def run(self, feeds: RunArgument, outputs: RunArgument = None) -> list[np.ndarray]:
        """Outputs in graph order, or only the named ones in the order given.

        `run(feeds)`, `run(feeds, ["probs"])`, onnxruntime's `run(None, feeds)` and
        `run(["probs"], feeds)`; `feeds` a dict of input name -> array, or a bare array
        for a model with one input. `model(...)` is `model.run(...)`."""
        if outputs is not None or feeds.__class__ is not dict:  # not the everyday call
            if feeds is None and outputs.__class__ is dict:  # onnxruntime's, as cheap
                feeds, outputs = outputs, None
            else:
                feeds, outputs = self._arguments.read(feeds, outputs)
        return self._runner.run(self._feeds.by_name(feeds), self._select(outputs))

    __call__ = run

    def get_inputs(self) -> list[IoSpec]:
        """`inputs`, by onnxruntime's name (each has `.name`, `.shape` and `.type`)."""
        return list(self.inputs)

    def get_outputs(self) -> list[IoSpec]:
        """`outputs`, by onnxruntime's name (each has `.name`, `.shape` and `.type`)."""
        return list(self.outputs)

    def stream(self, state_map: Mapping[str, str] | None = None,
               initial: Mapping[str, Any] | None = None) -> Stream:
        """A session for one stream that feeds state outputs back as the next call's
        inputs: `state_map` {output: input}, or None to pair them by name and shape;
        `initial` {input: array}, or zeros (`rlx.engines.stream.Stream`)."""
        from rlx.engines.stream import Stream

        return Stream(self, state_map, initial)

    def _select(self, outputs: Sequence[str] | None) -> Sequence[str]:
        if outputs is None:
            return self._output_names
        if isinstance(outputs, str):
            outputs = [outputs]
        unknown = [o for o in outputs if o not in self._output_names]
        if unknown:
            raise InputError(f"unknown output(s) {', '.join(map(repr, unknown))}; "
                             f"model outputs are {self._output_names}")
        return list(outputs)

    def __repr__(self) -> str:
        return (f"Model({self.name!r}, engine={self.engine!r}, "
                f"precision={self.precision!r})")


def build_runner(engine: str, file: RlxFile, graph: Graph, path: str | None, *,
                 threads: int | None, precision: str,
                 cache_dir: str | os.PathLike | None = None, prepack: str = "mapped",
                 memory: str = "private") -> Runner:
    """One concrete engine's runner (EngineError when its runtime is not installed)."""
    return engine_module(engine).build(file, graph, path, threads=threads,
                                       precision=precision, cache_dir=cache_dir,
                                       prepack=prepack, memory=memory)


def _check_options(engine: str, precision: str, prepack: str, threads: int | None,
                   memory: str) -> None:
    check_engine(engine)
    check_precision(precision)
    check_prepack(prepack)
    check_memory(memory)
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise InputError(f"threads must be a positive integer or None, got {threads!r}")


@reads_ahead  # the thread rule's reads of the machine's load, spread over the load
def load(path: str | os.PathLike, *, engine: str = "auto", threads: int | None = None,
         precision: str = "exact", password: str | bytes | None = None,
         cache_dir: str | os.PathLike | None = None,
         example: Mapping[str, Any] | None = None, trusted_keys: Iterable | None = None,
         signature: str | os.PathLike | None = None, prepack: str = "mapped",
         memory: str = "private", self_test: bool = False) -> Model:
    """Open a `.rlx` file or `.rlxp` package and prepare it on `engine`.

    `engine`: "auto" (the fastest installed engine for this model and machine, measured
    once and cached in `cache_dir`, default `$XDG_CACHE_HOME/rlx` or `~/.cache/rlx`),
    "numpy", "onnxruntime" (which keeps its prepacked copy of a plain file's model in
    `cache_dir`, see `prepack`) or "openvino". `threads`: intra-op
    threads (None: the engine's default). `precision`: "exact" computes in the graph's
    dtypes (f32); "fast" lets the engine use its faster default (OpenVINO: bf16 on
    AMX/AVX512-BF16 CPUs; the others have none, so fast equals exact there). On a file
    baked with the fast profile, "fast" runs its checked precision plan (int8 through QDQ
    on every engine, numpy computing the same numerics) and "exact" runs f32 with the
    int8 weights dequantised as stored (`rlx.artifact.planned.exact_graph`). `password`
    opens an encrypted file.
    `example`: feeds auto measures with (default: zeros of the declared shapes).
    `trusted_keys`: public keys (key objects, PEM bytes or PEM files: Ed25519 for rlx's
    `.sig`, ECDSA for a model-signing bundle); when given, the file must carry a valid
    signature by one of them (`signature`, default the `.sig` file beside it, either
    format), checked before it is parsed or decrypted, or `SignatureError` is
    raised (docs/format.md, "Signatures"). None (the default) checks no signature.
    `prepack`: how onnxruntime prepacks weights (docs/engines.md): "mapped" (saved once
    to `cache_dir`, then mapped from there), "heap" (onnxruntime's own copies) or "off".
    `memory`: "shared" when several worker processes load this file: auto then leaves out
    engines that copy the weights into each worker (OpenVINO on Conv models), and a named
    engine that does is logged (`rlx.engines.sharing`); "private" (the default) weighs speed.
    `self_test`: run the file's bundled self-test once per content and engine (a pass is
    cached in `cache_dir`), `SelfTestError` on a miss or when there is none
    (`rlx.engines.self_test`; the warm load stands once it passed on onnxruntime).

    The file is opened, checked and mapped once; every engine and cache gets its bytes
    from that mapping, never from the path again (docs/reliability.md).
    """
    _check_options(engine, precision, prepack, threads, memory)
    source = os.fspath(path)
    # a signature to check needs the file; other engines never import the warm load (~15
    # ms: pathlib, hashlib)
    if engine in WARM_ENGINES and trusted_keys is None and signature is None \
            and prepack == "mapped":
        from rlx.engines.warm import load_warm

        model = load_warm(source, engine, threads=threads, precision=precision,
                          cache_dir=cache_dir, memory=memory, self_test=self_test)
        if model is not None:
            return model
    from rlx.artifact.open import open_artifact

    file = open_artifact(source, password=password,  # .rlx, encrypted .rlx or .rlxp
                         trusted_keys=trusted_keys, signature=signature)
    read_ahead()
    if not len(file.graph):
        raise InputError(f"{source} holds weights only (a package written with --no-graph): "
                         "there is no graph to run")
    graph = file.into_runtime_graph()
    if file.meta.precision_plan:  # a fast bake's file: only it imports its plan's module
        from rlx.artifact.precision import runnable_graph

        graph = runnable_graph(graph, file.precision_plan, precision)
    runner = _runner(engine, file, graph, source, threads=threads, precision=precision,
                     cache_dir=cache_dir, example=example, prepack=prepack, memory=memory)
    log.info("%s: running on %s (%s precision)", source, runner.name, runner.precision)
    model = Model(runner, graph.inputs(), graph_outputs(graph), name=graph.name, path=source,
                  file=file)
    return _self_tested(model, threads, precision, cache_dir) if self_test else model


def _self_tested(model: Model, threads: int | None, precision: str,
                 cache_dir: str | os.PathLike | None) -> Model:
    """`model` once its file's self-test passed on its engine (or passed before)."""
    from rlx.engines.self_test import check_at_load

    assert model.path is not None  # loaded from a file
    check_at_load(model, model.file, model.path, threads=threads, precision=precision,
                  cache_dir=cache_dir)
    return model


def _runner(engine: str, file: RlxFile, graph: Graph, source: str, *, threads: int | None,
            precision: str, cache_dir: str | os.PathLike | None,
            example: Mapping[str, Any] | None, prepack: str, memory: str) -> Runner:
    """auto's pick, or the named engine's runner (warned about when it copies the weights
    into a worker that was said to share them)."""
    if engine == "auto":
        from rlx.engines import auto

        return auto.choose(file, graph, source, threads=threads, precision=precision,
                           cache_dir=cache_dir, example=example, prepack=prepack,
                           memory=memory)
    runner = build_runner(engine, file, graph, source, threads=threads, precision=precision,
                          cache_dir=cache_dir, prepack=prepack, memory=memory)
    if memory == "shared":
        from rlx.engines.sharing import warn_if_copied

        warn_if_copied(runner, graph, source)
    return runner


def graph_outputs(graph: Graph) -> list[IoSpec]:
    """The graph's outputs as `IoSpec`s (verified graphs output single tensors: tuple parts
    go through TupleGet)."""
    specs = []
    for o in graph.outputs:
        node = graph.node(o)
        specs.append(IoSpec(node.name or f"out{o}", node.tensor_shape.dims,
                            node.tensor_shape.dtype.numpy))
    return specs
