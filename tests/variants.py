"""Variants of the real models (../shared/MODELS.md) as onnxruntime's own tools write them.

Shipped ONNX files are often not what an exporter wrote but what onnxruntime's optimizer or
quantizer made of it: `com.microsoft` fused ops, `ReorderInput`/NCHWc layouts, integer
`MatMulInteger`/`ConvInteger`/`DynamicQuantizeLSTM` graphs, QDQ pairs or `QLinear*` ops.
Each variant here is made from a real model by onnxruntime itself and cached in
`.cache/variants/` (git-ignored), so a second run costs nothing:

- `ort-extended`, `ort-all`: `SessionOptions.optimized_model_filepath` at
  ORT_ENABLE_EXTENDED and ORT_ENABLE_ALL;
- `dynamic-tensor`, `dynamic-channel`: `quantize_dynamic`, per tensor and per channel;
- `static-qdq`, `static-qop`: `quantize_static` calibrated on a few seeded feeds, in the QDQ
  and the QOperator format.

`check(...)` compares rlx running a variant with onnxruntime running the same file.
"""

from __future__ import annotations

import inspect
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tests import footprint
from tests.real_models import FEEDS, ROOT, fetch, import_kwargs

CACHE = ROOT / ".cache" / "variants"

VARIANTS = ("ort-extended", "ort-all", "dynamic-tensor", "dynamic-channel", "static-qdq",
            "static-qop")
INTEGER = frozenset({"dynamic-tensor", "dynamic-channel", "static-qdq", "static-qop"})
"""Variants whose arithmetic is quantised: judged by the whole-model integer tolerance."""

CALIBRATION_SEEDS = (11, 12, 13, 14)
SIZE_CALIBRATION_SEED = 100
"""The one feed the size profile's accuracy guard measures on: none of the evaluation
feeds (seeds 0-2) nor the quantizer's."""
SIZE_MIN_COSINE = 0.9995


def _optimized(source: Path, folder: Path, variant: str) -> None:
    """`ort-extended` / `ort-all`: the model as onnxruntime's optimiser saves it."""
    import onnxruntime as ort

    level = {"ort-extended": "ORT_ENABLE_EXTENDED", "ort-all": "ORT_ENABLE_ALL"}[variant]
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    options.optimized_model_filepath = str(folder / f"{variant}.onnx")
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])


def _preprocessed(source: Path, folder: Path) -> Path:
    """onnxruntime's recommended step before quantising (`quant_pre_process`: shape
    inference and its basic optimiser), so weights computed by Constant chains (silero-vad's
    LSTMs) are initializers the quantizer can see."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    target = folder / f"pre-{source.name}"
    quant_pre_process(str(source), str(target), skip_symbolic_shape=True)
    return target


def _calibration_cache(folder: Path) -> dict[str, Path]:
    """`quantize_static`'s calibration cache where onnxruntime has one (1.32 on): the QDQ and
    the QOperator variant then share one calibration, and the second writes no augmented
    model (a copy of the model with every activation as an output)."""
    from onnxruntime.quantization import quantize_static

    if "calibration_cache_path" not in inspect.signature(quantize_static).parameters:
        return {}
    return {"calibration_cache_path": folder / "ranges.json"}


def _quantised(model: str, source: Path, folder: Path, variants: list[str]) -> None:
    """The integer `variants` of one model, written to `folder` as `{variant}.onnx`, from one
    preprocessed copy: every quantiser pass writes temporary copies of the model it reads
    (its shape inference goes through files), 5-6 of them a variant when each variant was
    preprocessed and calibrated on its own."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        quantize_dynamic,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([FEEDS[model](seed) for seed in CALIBRATION_SEEDS])

        def get_next(self):
            return next(self.feeds, None)

    preprocessed, calibration = _preprocessed(source, folder), _calibration_cache(folder)
    for variant in variants:
        target = folder / f"{variant}.onnx"
        if variant.startswith("dynamic-"):
            quantize_dynamic(preprocessed, target, per_channel=variant == "dynamic-channel",
                             extra_options={"EnableSubgraph": True})
        else:
            fmt = {"static-qdq": QuantFormat.QDQ, "static-qop": QuantFormat.QOperator}[variant]
            quantize_static(preprocessed, target, Reader(), quant_format=fmt, **calibration)


MEMORY = Path("/dev/shm")
"""Linux's file system in memory, where onnxruntime's tools work when it has room."""


@contextmanager
def _scratch(room: int) -> Iterator[Path]:
    """A folder for onnxruntime's tools to work in, also their working directory and where
    their temporary files go: in memory (`MEMORY`) when it has `room` free, else beside the
    cache. The quantiser's shape inference goes through files, copies of the model that
    need never reach the disk (a fresh fill wrote 1.5 GB of them to the disk)."""
    in_memory = MEMORY.is_dir() and shutil.disk_usage(MEMORY).free > room
    with tempfile.TemporaryDirectory(dir=MEMORY if in_memory else CACHE) as tmp:
        cwd, temp = os.getcwd(), tempfile.tempdir
        os.chdir(tmp)  # quantize_static before 1.19 wrote its augmented model there
        tempfile.tempdir = tmp
        try:
            yield Path(tmp)
        finally:
            os.chdir(cwd)
            tempfile.tempdir = temp


def _cached(model: str, variant: str) -> Path:
    return CACHE / f"{model}.{variant}.onnx"


def variant_path(model: str, variant: str) -> Path:
    """The cached variant file, made from the real model on first use (atomically). The
    integer variants of a model are made together, sharing their preprocessing and
    calibration (the suite uses all four)."""
    target = _cached(model, variant)
    if target.exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    source = fetch(model)
    logging.getLogger("root").setLevel(logging.ERROR)  # the quantizer's chatter
    batch = [variant]
    if variant in INTEGER:
        batch = [v for v in VARIANTS if v in INTEGER and not _cached(model, v).exists()]
    with footprint.unmetered(), _scratch(8 * source.stat().st_size + (64 << 20)) as folder:
        if variant in INTEGER:
            _quantised(model, source, folder, batch)
        else:
            _optimized(source, folder, variant)
        for made in batch:
            partial = _cached(model, made).with_suffix(".part")
            shutil.copyfile(folder / f"{made}.onnx", partial)
            partial.replace(_cached(model, made))
    return target


# -- comparison --------------------------------------------------------------------------------
CLASS_AXIS = {"ppocr-cls": (-1, 0), "orientation-lcnet": (-1, 0), "captcha-crnn": (-1, 0),
              "nudenet-320n": (1, 4)}
"""Models with class-like outputs: (class axis, first class row) of output 0 (nudenet's
rows 4.. are its 18 class scores per anchor; the first 4 are the box)."""


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return float(a @ b / (na * nb))


def argmax_agreement(model: str, got: np.ndarray, want: np.ndarray) -> float | None:
    """Share of positions whose predicted class agrees, for class-like outputs."""
    if model not in CLASS_AXIS or want.size == 0:
        return None
    axis, first = CLASS_AXIS[model]
    take = np.arange(first, want.shape[axis])
    return float(np.mean(np.argmax(np.take(got, take, axis), axis) ==
                         np.argmax(np.take(want, take, axis), axis)))


@dataclass
class Comparison:
    max_abs: float
    cosine: float
    argmax: float | None

    def ok(self, integer: bool) -> bool:
        """The issue's tolerances: floats within 1e-4 (or cosine >= 0.99999 on large
        values); whole integer-quantised models within 1e-4, or cosine >= 0.999 with
        >= 97.5% argmax agreement on class-like outputs."""
        if self.max_abs <= 1e-4:
            return True
        if integer:
            return self.cosine >= 0.999 and (self.argmax is None or self.argmax >= 0.975)
        return self.cosine >= 0.99999

    def worst(self, other: Comparison) -> Comparison:
        argmax = [a for a in (self.argmax, other.argmax) if a is not None]
        return Comparison(max(self.max_abs, other.max_abs), min(self.cosine, other.cosine),
                          min(argmax) if argmax else None)

    def __str__(self) -> str:
        agree = "" if self.argmax is None else f", argmax {self.argmax:.1%}"
        return f"max abs {self.max_abs:.2e}, cosine {self.cosine:.6f}{agree}"


def compare(model: str, got: list[np.ndarray], want: list[np.ndarray]) -> Comparison:
    """The worst over all outputs (integer outputs must be equal); argmax on output 0."""
    result = Comparison(0.0, 1.0, None)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, (g.shape, w.shape)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        if g.dtype.kind in "iub":
            diff = 0.0 if np.array_equal(g, w) else float("inf")
        else:
            diff = float(np.max(np.abs(g.astype(np.float64) - w))) if g.size else 0.0
        agree = argmax_agreement(model, g, w) if i == 0 else None
        result = result.worst(Comparison(diff, cosine(g, w), agree))
    return result


def feeds_for(model: str, seeds=(0, 1, 2)) -> list[dict[str, np.ndarray]]:
    return [FEEDS[model](seed) for seed in seeds]


def oracle(path: Path, optimized: bool = True):
    """onnxruntime on the variant: as shipped (its default optimisations, which fuse QDQ
    pairs into integer kernels), or with ORT_DISABLE_ALL (each node as written)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


@dataclass
class Result:
    ort: Comparison  # rlx vs onnxruntime (default optimisation)
    ort_plain: Comparison  # rlx vs onnxruntime with ORT_DISABLE_ALL
    ort_vs_float: Comparison  # onnxruntime on the variant vs on the original model
    rlx_vs_float: Comparison  # rlx on the variant vs onnxruntime on the original model
    ort_u8: Comparison | None = None  # rlx vs onnxruntime on the uint8 re-encoding (best of
    # its default and ORT_DISABLE_ALL), for quantised variants with int8 weights
    kept: list[str] = field(default_factory=list)  # weights the size guard kept at f32
    proposed: int = 0  # weights the bake proposed to encode

    def ok(self, integer: bool) -> bool:
        return any(c is not None and c.ok(integer)
                   for c in (self.ort, self.ort_plain, self.ort_u8))


def bake_options(model: str, profile):
    """The profile's options; the size profile as users are told to bake it: with its
    accuracy guard, calibrated on one held-out feed."""
    from rlx import BakeOptions, BakeProfile

    options = BakeOptions.from_profile(profile)
    if profile is not BakeProfile.SIZE:
        return options
    return options.replace(calibration=[FEEDS[model](SIZE_CALIBRATION_SEED)],
                           min_cosine=SIZE_MIN_COSINE)


def bake_and_load(model: str, variant: str, profile):
    """Import, bake with `profile`, serialise and parse with every checksum checked (the
    bytes `write_rlx` writes, made in memory: tests/artifact/test_streaming_write.py):
    (the compiled graph, the weights' accuracy rows: those the size guard kept at full
    precision are marked `kept`)."""
    from rlx import bake
    from rlx.artifact import parse_rlx
    from rlx.artifact.writer import iter_rlx_bytes
    from rlx.onnx import import_onnx
    from rlx.runtime import Session

    path = variant_path(model, variant)
    graph, bindings = import_onnx(path, **import_kwargs(fetch(model)))
    file, report = bake(graph, bindings, bake_options(model, profile))
    data = bytearray()
    for piece in iter_rlx_bytes(file):
        data += piece
    compiled = Session().compile(parse_rlx(data, verify="full").into_runtime_graph())
    return compiled, report.accuracy.tensors


def run_variant(model: str, variant: str, profile, seeds=(0, 1, 2)) -> Result:
    """The variant baked with `profile` and run against onnxruntime on the seeded feeds
    (and, for quantised variants with int8 weights, against onnxruntime on their uint8
    re-encoding: `as_uint8`)."""
    compiled, tensors = bake_and_load(model, variant, profile)
    path = variant_path(model, variant)
    oracles = [oracle(path), oracle(path, False), oracle(fetch(model))]
    u8 = None
    if variant in INTEGER:
        try:
            u8 = as_uint8(model, variant)
        except ValueError:
            u8 = None
        if u8 is not None:
            oracles += [oracle(u8), oracle(u8, False)]
    results: list[Comparison | None] = [None] * (len(oracles) + 1)
    for feeds in feeds_for(model, seeds):
        ours = compiled.run(feeds)
        outs = [o.run(None, feeds) for o in oracles]
        now = [compare(model, ours, outs[0]), compare(model, ours, outs[1]),
               compare(model, outs[0], outs[2]), compare(model, ours, outs[2])]
        now += [compare(model, ours, o) for o in outs[3:]]
        results = [n if r is None else r.worst(n) for r, n in zip(results, now)]
    done = [r for r in results if r is not None]
    best_u8 = None
    if len(done) == 6:
        best_u8 = max(done[4:], key=lambda c: (c.ok(True), c.cosine))
    return Result(*done[:4], ort_u8=best_u8, kept=[t.name for t in tensors if t.kept],
                  proposed=len(tensors))


def contrib_ops(path: Path) -> str:
    """The non-ONNX ops of a model file (nested graphs too), by count, for the table."""
    import collections

    import onnx

    counts: collections.Counter = collections.Counter()

    def walk(graph) -> None:
        for node in graph.node:
            if node.domain not in ("", "ai.onnx"):
                counts[f"{node.domain.replace('com.microsoft', 'ms')}.{node.op_type}"] += 1
            for attr in node.attribute:
                if attr.HasField("g"):
                    walk(attr.g)
                for sub in attr.graphs:
                    walk(sub)

    walk(onnx.load(str(path), load_external_data=False).graph)
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "-"


# -- an exact onnxruntime oracle for int8 weights ------------------------------------------------
_INT8_SLOTS = {"DequantizeLinear": (0, 2), "QuantizeLinear": (2,), "MatMulInteger": (1, 3),
               "ConvInteger": (1, 3)}
"""Where an int8 initializer can be re-encoded as uint8 + 128 without changing the model's
meaning: quantised values with their zero points."""


def as_uint8(model: str, variant: str) -> Path:
    """The variant with every int8 weight and zero point re-encoded as uint8 (value + 128,
    zero point + 128): the same model, mathematically, which onnxruntime runs through its
    uint8 x uint8 kernels, free of the AVX2 uint8 x int8 int16 saturation (see
    docs/variants.md). Cached next to the variant."""
    import onnx
    from onnx import numpy_helper

    target = CACHE / f"{model}.{variant}.u8.onnx"
    if target.exists():
        return target
    proto = onnx.load(str(variant_path(model, variant)))
    inits = {t.name: t for t in proto.graph.initializer}
    users: dict[str, set[tuple[str, int]]] = {}
    for node in proto.graph.node:
        for i, name in enumerate(node.input):
            users.setdefault(name, set()).add((node.op_type, i))
    extra = []
    for node in proto.graph.node:
        slots = _INT8_SLOTS.get(node.op_type, ())
        if node.op_type in ("MatMulInteger", "ConvInteger") and len(node.input) < 4:
            weight = inits.get(node.input[1])
            if weight is not None and weight.data_type == onnx.TensorProto.INT8:
                name = f"{node.output[0]}/u8_zero"
                extra.append(numpy_helper.from_array(np.array(0, np.int8), name))
                node.input.extend([""] * (3 - len(node.input)) + [name])
    for tensor in extra:
        inits[tensor.name] = tensor
        proto.graph.initializer.append(tensor)
        users.setdefault(tensor.name, set()).add(("MatMulInteger", 3))
    for name, tensor in inits.items():
        if tensor.data_type != onnx.TensorProto.INT8:
            continue
        uses = users.get(name, set())
        if not uses or any(i not in _INT8_SLOTS.get(op, ()) for op, i in uses):
            raise ValueError(f"{model}.{variant}: int8 initializer {name!r} is used as "
                             f"{sorted(uses)}: cannot re-encode it")
        value = numpy_helper.to_array(tensor).astype(np.int16) + 128
        tensor.CopyFrom(numpy_helper.from_array(value.astype(np.uint8), name))
    del slots
    partial = target.with_suffix(".part")
    onnx.save(proto, str(partial))
    partial.replace(target)
    return target
