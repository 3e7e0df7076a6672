"""Every MODELS.md model with symbolic dims runs, and matches onnxruntime, at other valid
input sizes: other batches and image sizes, down to degenerate ones onnxruntime accepts (a
1x1 image, an empty batch). Where onnxruntime refuses a size, rlx must refuse it too."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from rlx import BakeOptions, BakeProfile, bake
from rlx.errors import RlxError
from rlx.onnx import export_onnx, import_onnx
from rlx.runtime import Session
from tests.real_models import fetch

pytestmark = pytest.mark.slow

SIZES = {  # model: (input name, value range, shapes)
    "ppocr-cls": ("x", (-1, 1), [(2, 3, 48, 192), (1, 3, 32, 100), (1, 3, 1, 1),
                                 (0, 3, 48, 192)]),
    "nudenet-320n": ("images", (0, 1), [(1, 3, 256, 256), (2, 3, 320, 192), (1, 3, 32, 32)]),
    "captcha-crnn": ("image", (0, 255), [(2, 3, 60, 160), (3, 3, 60, 160),
                                         (0, 3, 60, 160)]),
    "orientation-lcnet": ("x", (-2, 2), [(3, 3, 224, 224), (2, 3, 224, 224)]),
}


@pytest.fixture(scope="module")
def compiled():
    cache = {}

    def get(name):
        if name not in cache:
            path = fetch(name)
            graph, bindings = import_onnx(path)
            file, _ = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.FOLD))
            cache[name] = (Session().compile(file.into_runtime_graph()),
                           ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]))
        return cache[name]

    return get


@pytest.mark.parametrize("name,shape", [(m, s) for m, (_, _, shapes) in SIZES.items()
                                        for s in shapes])
def test_other_sizes_match_onnxruntime(compiled, name, shape):
    ours, oracle = compiled(name)
    input_name, (lo, hi), _ = SIZES[name]
    feeds = {input_name: np.random.default_rng(0).uniform(lo, hi, shape).astype(np.float32)}
    want = oracle.run(None, feeds)
    got = ours.run(feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        if w.size:
            assert np.max(np.abs(g - w)) <= 1e-4 * max(1.0, float(np.max(np.abs(w))))


def test_a_size_onnxruntime_refuses_is_refused(compiled):
    """nudenet's feature maps no longer line up at 1x1 (a Concat of 1 and 2): both fail."""
    ours, oracle = compiled("nudenet-320n")
    feeds = {"images": np.zeros((1, 3, 1, 1), np.float32)}
    with pytest.raises(Exception):  # noqa: B017  (onnxruntime's own error kinds)
        oracle.run(None, feeds)
    with pytest.raises(RlxError):
        ours.run(feeds)


def test_silero_vad_at_other_batches():
    """silero-vad branches on its input's shape (an If whose branches differ in rank when
    the batch is 1), so rlx imports it per input size, as it does per chunk length."""
    path = fetch("silero-vad")
    oracle = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    for batch in (2, 3):
        graph, bindings = import_onnx(path, input_shapes={"input": (batch, 576),
                                                          "state": (2, batch, 128)})
        file, _ = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.FOLD))
        ours = Session().compile(file.into_runtime_graph())
        feeds = {"input": (rng.standard_normal((batch, 576)) * 0.1).astype(np.float32),
                 "state": np.zeros((2, batch, 128), np.float32), "sr": np.array(16000)}
        for g, w in zip(ours.run(feeds), oracle.run(None, feeds)):
            assert g.shape == w.shape and np.max(np.abs(g - w)) <= 1e-4


def test_silero_vad_without_input_shapes():
    """Imported with symbolic dims, silero-vad's `squeeze(-1)` Ifs keep the rank its LSTM
    takes (rlx.onnx.branch_ranks): any chunk short enough to squeeze to one frame runs, on
    numpy and exported to onnxruntime; a longer one fails, in rlx as in onnxruntime."""
    path = fetch("silero-vad")
    oracle = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    graph, bindings = import_onnx(path)
    file, _ = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.FOLD))
    runnable = file.into_runtime_graph()
    ours = Session().compile(runnable)
    exported = ort.InferenceSession(export_onnx(runnable).SerializeToString(),
                                    providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)

    def feeds(batch, samples, sr=16000):
        return {"input": (rng.standard_normal((batch, samples)) * 0.1).astype(np.float32),
                "state": (rng.standard_normal((2, batch, 128)) * 0.1).astype(np.float32),
                "sr": np.array(sr)}

    for size in ((1, 512), (1, 576), (2, 576), (3, 256), (1, 256, 8000), (2, 288, 8000)):
        given = feeds(*size)
        want = oracle.run(None, given)
        for got in (ours.run(given), exported.run(None, given)):
            for g, w in zip(got, want):
                assert g.shape == w.shape and np.max(np.abs(g - w)) <= 1e-4
    too_long = feeds(1, 1152)
    with pytest.raises(Exception):  # noqa: B017  (onnxruntime's own error kinds)
        oracle.run(None, too_long)
    with pytest.raises(RlxError, match="the graph after the If was built for"):
        ours.run(too_long)
