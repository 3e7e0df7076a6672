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

import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable

import numpy as np

from tests.real_models import FEEDS, ROOT, fetch, import_kwargs

CACHE = ROOT / ".cache" / "variants"

VARIANTS = ("ort-extended", "ort-all", "dynamic-tensor", "dynamic-channel", "static-qdq",
            "static-qop")
INTEGER = frozenset({"dynamic-tensor", "dynamic-channel", "static-qdq", "static-qop"})
"""Variants whose arithmetic is quantised: judged by the whole-model integer tolerance."""

CALIBRATION_SEEDS = (11, 12, 13, 14)


def _optimized(level_name: str) -> Callable[[Path, Path], None]:
    def make(source: Path, target: Path) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level_name)
        options.optimized_model_filepath = str(target)
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])

    return make


def _preprocessed(source: Path, folder: Path) -> Path:
    """onnxruntime's recommended step before quantising (`quant_pre_process`: shape
    inference and its basic optimiser), so weights computed by Constant chains (silero-vad's
    LSTMs) are initializers the quantizer can see."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    target = folder / f"pre-{source.name}"
    quant_pre_process(str(source), str(target), skip_symbolic_shape=True)
    return target


def _dynamic(per_channel: bool) -> Callable[[Path, Path], None]:
    def make(source: Path, target: Path) -> None:
        from onnxruntime.quantization import quantize_dynamic

        quantize_dynamic(_preprocessed(source, target.parent), target, per_channel=per_channel,
                         extra_options={"EnableSubgraph": True})

    return make


def _static(fmt: str, model: str) -> Callable[[Path, Path], None]:
    def make(source: Path, target: Path) -> None:
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.feeds = iter([FEEDS[model](seed) for seed in CALIBRATION_SEEDS])

            def get_next(self):
                return next(self.feeds, None)

        quantize_static(_preprocessed(source, target.parent), target, Reader(),
                        quant_format=getattr(QuantFormat, fmt))

    return make


def _maker(model: str, variant: str) -> Callable[[Path, Path], None]:
    return {"ort-extended": _optimized("ORT_ENABLE_EXTENDED"),
            "ort-all": _optimized("ORT_ENABLE_ALL"),
            "dynamic-tensor": _dynamic(False), "dynamic-channel": _dynamic(True),
            "static-qdq": _static("QDQ", model),
            "static-qop": _static("QOperator", model)}[variant]


def variant_path(model: str, variant: str) -> Path:
    """The cached variant file, made from the real model on first use (atomically)."""
    target = CACHE / f"{model}.{variant}.onnx"
    if target.exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    source = fetch(model)
    logging.getLogger("root").setLevel(logging.ERROR)  # the quantizer's chatter
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        partial = Path(tmp) / target.name
        cwd = os.getcwd()
        os.chdir(tmp)  # quantize_static writes its augmented model to the working folder
        try:
            _maker(model, variant)(source, partial)
        finally:
            os.chdir(cwd)
        partial.replace(target)
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

    def ok(self, integer: bool) -> bool:
        return self.ort.ok(integer) or self.ort_plain.ok(integer)


def bake_and_load(model: str, variant: str, profile, tmp: Path):
    """Import, bake with `profile`, write, read: the compiled graph."""
    from rlx import BakeOptions, bake
    from rlx.artifact import read_rlx, write_rlx
    from rlx.frontends.onnx import import_onnx
    from rlx.runtime import Session

    path = variant_path(model, variant)
    graph, bindings = import_onnx(path, **import_kwargs(fetch(model)))
    file, _ = bake(graph, bindings, BakeOptions.from_profile(profile))
    out = tmp / f"{model}.{variant}.{profile.value}.rlx"
    write_rlx(out, file)
    return Session().compile(read_rlx(out, verify="full").into_runtime_graph())


def run_variant(model: str, variant: str, profile, tmp: Path, seeds=(0, 1, 2)) -> Result:
    """The variant baked with `profile` and run against onnxruntime on the seeded feeds."""
    compiled = bake_and_load(model, variant, profile, tmp)
    path = variant_path(model, variant)
    shipped, plain, original = oracle(path), oracle(path, False), oracle(fetch(model))
    results: list[Comparison | None] = [None] * 4
    for feeds in feeds_for(model, seeds):
        ours, theirs = compiled.run(feeds), shipped.run(None, feeds)
        reference = original.run(None, feeds)
        now = [compare(model, ours, theirs), compare(model, ours, plain.run(None, feeds)),
               compare(model, theirs, reference), compare(model, ours, reference)]
        results = [n if r is None else r.worst(n) for r, n in zip(results, now)]
    return Result(*results)  # type: ignore[arg-type]


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
