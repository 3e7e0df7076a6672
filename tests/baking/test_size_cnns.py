"""The size profile on CNNs it has not seen (tests/baking/cnn_models.py), calibrated on four
inputs at min cosine 0.9995: every output's cosine >= 0.999 against onnxruntime on other
(held-out) inputs, on every engine (the wider codes and row exponents go through the ONNX
export to onnxruntime and OpenVINO), and <= 0.30x the exact file where >= 90% of the float
weights are read by Conv/MatMul/Gemm (the targets of issue 33; the CRNN's LSTM holds 39% of
its weights). The anchor-free detector is baked at four seeds: its ratio lands within 0.015
of the target, and where depends on the weights drawn."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import rlx
from rlx import BakeOptions, bake
from rlx.artifact import write_rlx
from rlx.onnx import import_onnx
from tests.baking.cnn_models import anchor_free_detector, crnn, ctc_recogniser, db_detector
from tests.baking.size_real import linear_share
from tests.engines.conftest import ENGINES, require

CALIBRATION_SEEDS = (100, 101, 102, 103)
HELD_OUT_SEEDS = (1, 2, 3)
MODELS = {
    "db-detector": (db_detector, {}),
    **{f"anchor-free-detector-{seed}": (anchor_free_detector, {"seed": seed})
       for seed in range(4)},  # 0.301-0.303x before the scale search, seeds 1-3
    "ctc-recogniser": (ctc_recogniser, {}),
    "crnn": (crnn, {}),
}


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module", params=sorted(MODELS))
def baked(request, tmp_path_factory):
    """(ONNX path, feeds, linear share, exact bytes, size bytes, size file's path, report)."""
    make, kwargs = MODELS[request.param]
    model, feeds = make(**kwargs)
    folder = tmp_path_factory.mktemp(request.param)
    path = folder / "m.onnx"
    onnx.save(model, path)
    graph, bindings = import_onnx(path)
    sizes = {}
    for profile in ("exact", "size"):
        opts = BakeOptions.from_profile(profile)
        if profile == "size":
            opts = opts.replace(calibration=[feeds(s) for s in CALIBRATION_SEEDS],
                                min_cosine=0.9995)
        file, report = bake(graph, bindings, opts)
        write_rlx(folder / f"{profile}.rlx", file)
        sizes[profile] = (folder / f"{profile}.rlx").stat().st_size
    return path, feeds, linear_share(model), sizes, folder / "size.rlx", report


def test_size_profile_reaches_its_ratio_on_unseen_cnns(baked):
    _, _, share, sizes, _, report = baked
    assert report.accuracy.met
    assert sizes["size"] < sizes["exact"]
    if share >= 0.9:
        assert sizes["size"] <= 0.30 * sizes["exact"], (sizes, report.accuracy.tensors)


@pytest.mark.parametrize("engine", ENGINES)
def test_size_profile_holds_its_accuracy_on_held_out_inputs(baked, engine):
    require(engine)
    path, feeds, _, _, size_file, _ = baked
    model = rlx.load(size_file, engine=engine, precision="exact")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for seed in HELD_OUT_SEEDS:
        for got, want in zip(model.run(feeds(seed)), session.run(None, feeds(seed)),
                             strict=True):
            assert _cosine(got, want) >= 0.999
