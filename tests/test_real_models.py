"""Real models (../shared/MODELS.md): import -> bake -> write -> read -> run, against onnxruntime.

Every lossless profile (merge, fold, exact) in every memory mode must match onnxruntime to
1e-4 (relative to the output's largest value where that is above 1: detector boxes are
pixels); the size profile (Q8_0) must keep minilm-l3's embedding (cosine >= 0.999) and
ppocr-cls's predicted class.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from rlx import BakeOptions, BakeProfile, MemoryMode, bake
from rlx.artifact import parse_rlx
from rlx.artifact.writer import iter_rlx_bytes
from rlx.onnx import import_onnx
from rlx.runtime import Session
from tests.real_models import FEEDS, fetch, minilm_feeds, ppocr_feeds

pytestmark = pytest.mark.slow

LOSSLESS = [BakeProfile.MERGE, BakeProfile.FOLD, BakeProfile.EXACT]


@pytest.fixture(scope="module")
def imported():
    """Each model imported once: (graph, bindings, onnxruntime session)."""
    cache = {}

    def get(name: str):
        if name not in cache:
            path = fetch(name)
            graph, bindings = import_onnx(path)
            cache[name] = graph, bindings, ort.InferenceSession(
                str(path), providers=["CPUExecutionProvider"])
        return cache[name]

    return get


def baked_session(graph, bindings, profile, memory):
    """Bake, then parse the file's bytes with every checksum checked and compile: the bytes
    `write_rlx` writes (byte for byte, tests/artifact/test_streaming_write.py), made in
    memory (written out, this file's bakes wrote 1.45 GB; the real models' files on
    disk are tests/artifact/test_rlxp_real_models.py's)."""
    file, report = bake(graph, bindings, BakeOptions.from_profile(profile).replace(memory=memory))
    data = bytearray()
    for piece in iter_rlx_bytes(file):
        data += piece
    loaded = parse_rlx(data, verify="full")
    return Session().compile(loaded.into_runtime_graph()), report


@pytest.mark.parametrize("name", ["minilm-l3", "ppocr-cls", "nudenet-320n", "captcha-crnn",
                                  "orientation-lcnet"])
@pytest.mark.parametrize("profile", LOSSLESS)
@pytest.mark.parametrize("memory", list(MemoryMode))
def test_lossless_bakes_match_onnxruntime(imported, name, profile, memory):
    graph, bindings, oracle = imported(name)
    compiled, report = baked_session(graph, bindings, profile, memory)
    feeds = FEEDS[name]()
    expected = oracle.run(None, feeds)
    got = compiled.run(feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        assert np.max(np.abs(g - e)) <= 1e-4 * max(1.0, float(np.max(np.abs(e))))


@pytest.mark.parametrize("name", ["minilm-l3", "ppocr-cls", "nudenet-320n", "captcha-crnn",
                                  "orientation-lcnet"])
def test_an_exact_bake_stores_each_weight_once(imported, name):
    """No larger than the model: captcha-crnn's LSTM weights, transposed once per cell by
    folds that each kept their node's identity, made a 268 MB file of a 19 MB model. (The
    file's size counted on the bytes `write_rlx` writes, not on disk.)"""
    graph, bindings, _ = imported(name)
    file, _ = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))
    size = sum(memoryview(piece).nbytes for piece in iter_rlx_bytes(file))
    assert size <= 1.05 * fetch(name).stat().st_size + (1 << 20)


def _cosine(a, b):
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_size_profile_keeps_minilm_embedding(imported):
    graph, bindings, oracle = imported("minilm-l3")
    compiled, report = baked_session(graph, bindings, BakeProfile.SIZE, MemoryMode.COMPACT)
    assert report.optimize.quant_packed > 0
    for seed in range(3):
        feeds = minilm_feeds(seed)
        (expected, *_), (got, *_) = oracle.run(None, feeds), compiled.run(feeds)
        assert _cosine(got, expected) >= 0.999


def test_size_profile_keeps_ppocr_class(imported):
    graph, bindings, oracle = imported("ppocr-cls")
    compiled, _ = baked_session(graph, bindings, BakeProfile.SIZE, MemoryMode.COMPACT)
    for seed in range(3):
        feeds = ppocr_feeds(seed)
        (expected,), (got,) = oracle.run(None, feeds), compiled.run(feeds)
        assert np.argmax(got) == np.argmax(expected)


CHUNK = {16000: 576, 8000: 288}  # 512 / 256 new samples plus the model's 64 / 32 context


@pytest.fixture(scope="module")
def silero():
    """silero-vad imported once per sample rate, with that rate's chunk length: the model
    branches on the input length, so the length must be known for the graph to be static."""
    path = fetch("silero-vad")
    graphs = {sr: import_onnx(path, input_shapes={"input": (1, n)}) for sr, n in CHUNK.items()}
    return graphs, ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("profile", LOSSLESS)
@pytest.mark.parametrize("memory", list(MemoryMode))
@pytest.mark.parametrize("sr", sorted(CHUNK))
def test_silero_vad_carries_state_over_three_chunks(silero, profile, memory, sr):
    graphs, oracle = silero
    compiled, _ = baked_session(*graphs[sr], profile, memory)
    rng = np.random.default_rng(7)
    ours = theirs = np.zeros((2, 1, 128), np.float32)
    sr_value = np.array(sr, np.int64)
    for _ in range(3):
        chunk = (rng.standard_normal((1, CHUNK[sr])) * 0.1).astype(np.float32)
        e_out, theirs = oracle.run(None, {"input": chunk, "state": theirs, "sr": sr_value})
        g_out, ours = compiled.run({"input": chunk, "state": ours, "sr": sr_value})
        assert np.max(np.abs(g_out - e_out)) <= 1e-4
        assert np.max(np.abs(ours - theirs)) <= 1e-4



@pytest.mark.parametrize("sr", sorted(CHUNK))
def test_silero_vad_weights_live_in_the_table(silero, tmp_path, sr):
    """silero-vad's weights sit in If branches: the bake brings them out to the weight
    table, so a compact graph holds no weight bytes and a duplex file holds them twice."""
    graphs, _ = silero
    files = {m: bake(*graphs[sr], BakeOptions.from_profile(BakeProfile.EXACT).replace(memory=m))[0]
             for m in MemoryMode}

    def graph_bytes(graph, at_least: int = 0) -> int:
        own = sum(n.op.nbytes for n in graph.nodes()
                  if n.op.op_name == "Constant" and n.op.nbytes >= at_least)
        return own + sum(graph_bytes(s, at_least) for n in graph.nodes()
                         for s in n.op.subgraphs())

    table = sum(w.nbytes for w in files[MemoryMode.COMPACT].weights)
    # the weights of the branch this chunk length takes (the other branch cannot run)
    weights = graph_bytes(graphs[sr][0], at_least=1024)
    assert 0.9 * weights <= table <= weights
    assert graph_bytes(files[MemoryMode.COMPACT].graph) < 0.01 * table
    assert graph_bytes(files[MemoryMode.DUPLEX].graph) >= table
