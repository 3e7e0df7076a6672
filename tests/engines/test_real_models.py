"""Every MODELS.md model, baked (exact profile) in each memory mode, through every engine
and precision, against onnxruntime on the original .onnx file; plus minilm-l3 and ppocr-cls
baked with the size profile (Q8_0 weights: MatMulNBits on onnxruntime, int8 decompression on
OpenVINO; decoded conv weights).

Exact: within 1e-4 of the largest |reference| (as tests/test_real_models.py). Fast: cosine
>= 0.99 per output and the same argmax on classifier outputs, or, where OpenVINO's own
default precision on the original file misses that (bf16 on AMX CPUs: minilm-l3's cosine
is 0.81 there), no worse than OpenVINO's own: rlx's fast adds no error of its own.
"""

from __future__ import annotations

import shutil

import numpy as np
import onnxruntime as ort
import pytest

import rlx
from rlx import BakeOptions, BakeProfile, MemoryMode, bake, relayout, write_rlx
from rlx.onnx import import_onnx
from tests.engines.conftest import ENGINES, require
from tests.real_models import FEEDS, MODELS, fetch, import_kwargs

pytestmark = pytest.mark.slow

CLASSIFIERS = {"ppocr-cls", "orientation-lcnet", "minilm-l3"}
# 0.6 GB: the six models in three memory modes (0.4 GB), and onnxruntime's prepacked copy of
# the compact files, which its first load saves
WRITE_BUDGET = 800 << 20


@pytest.fixture(scope="module")
def baked(tmp_path_factory):
    """(path of the .rlx for (model, memory mode), onnxruntime on the original); the files
    (~0.4 GB) are deleted when the module ends, not kept to the end of the session."""
    folder = tmp_path_factory.mktemp("real-engines")
    cache: dict = {}

    def get(name: str, memory: MemoryMode, profile: BakeProfile = BakeProfile.EXACT):
        if (name, profile) not in cache:
            path = fetch(name)
            graph, bindings = import_onnx(path, **import_kwargs(path))
            file, _ = bake(graph, bindings, BakeOptions.from_profile(profile))
            oracle = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            cache[name, profile] = file, oracle, {}
        file, oracle, files = cache[name, profile]
        if memory not in files:
            files[memory] = folder / f"{name}-{profile.value}-{memory.value}.rlx"
            write_rlx(files[memory], relayout(file, memory))
        return files[memory], oracle

    yield get
    shutil.rmtree(folder, ignore_errors=True)


def _cosine(a, b) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _check(name, model, oracle, precision, peer=None):
    """`peer(feeds)`: OpenVINO's own outputs at its default precision, the bound for fast
    where they miss 0.99 or the argmax."""
    for seed in range(2):
        feeds = FEEDS[name](seed)
        expected = oracle.run(None, feeds)
        got = model.run(feeds)
        own = None if peer is None else peer(feeds)
        assert len(got) == len(expected)
        for k, (g, e) in enumerate(zip(got, expected)):
            assert g.shape == e.shape and g.dtype == e.dtype
            if precision == "exact":
                assert np.max(np.abs(g - e)) <= 1e-4 * max(1.0, float(np.max(np.abs(e))))
            else:
                floor = 0.99 if own is None else min(0.99, _cosine(own[k], e) - 1e-3)
                assert _cosine(g, e) >= floor
        if name in CLASSIFIERS and precision == "fast" and (
                own is None or np.argmax(own[0]) == np.argmax(expected[0])):
            assert np.argmax(got[0]) == np.argmax(expected[0])


def _openvino_default(name: str):
    """OpenVINO's outputs at its default precision on the original file, or None where it
    cannot read the file (silero-vad's If branches)."""
    import openvino as ov

    try:
        compiled = ov.Core().compile_model(str(fetch(name)), "CPU")
    except RuntimeError:
        return None
    return lambda feeds: [np.asarray(v) for v in compiled(feeds).values()]


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("memory", list(MemoryMode))
def test_every_model_engine_and_memory_mode(baked, name, engine, memory):
    require(engine)
    path, oracle = baked(name, memory)
    # onnxruntime saves its prepacked copy of one memory mode's file (the warm path), and
    # builds the others in memory: the copies would be 0.3 GB of disk proving nothing new
    prepack = "mapped" if memory is MemoryMode.COMPACT else "off"
    model = rlx.load(path, engine=engine, threads=2, prepack=prepack)
    assert model.engine == engine
    _check(name, model, oracle, "exact")


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("engine", ENGINES)
def test_every_model_at_fast_precision(baked, name, engine):
    require(engine)
    path, oracle = baked(name, MemoryMode.RUNTIME)
    model = rlx.load(path, engine=engine, precision="fast", threads=2)
    assert model.precision == ("fast" if engine == "openvino" else "exact")
    _check(name, model, oracle, "fast", _openvino_default(name) if engine == "openvino" else None)


@pytest.mark.parametrize("name", ["minilm-l3", "ppocr-cls"])
@pytest.mark.parametrize("engine", ENGINES)
def test_size_profile_through_every_engine(baked, name, engine):
    """Q8_0 weights keep the outputs (cosine >= 0.999, as the numpy engine must): minilm's
    matmuls and embedding, PP-OCR's convs (depthwise and pointwise ones stored as one row)
    and f16 biases."""
    require(engine)
    path, oracle = baked(name, MemoryMode.COMPACT, BakeProfile.SIZE)
    model = rlx.load(path, engine=engine)
    if engine == "onnxruntime" and name == "minilm-l3":
        assert any("MatMulNBits" in k for k in model.runner.summary.packed)
    for seed in range(2):
        feeds = FEEDS[name](seed)
        for got, want in zip(model.run(feeds), oracle.run(None, feeds), strict=True):
            assert _cosine(got, want) >= 0.999
