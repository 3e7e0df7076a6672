"""OpenVINO compiles a model whose inputs have unknown dims again for the shapes of its first
run (`rlx.engines.openvino_engine`), goes back to unknown dims at other shapes and compiles
for them after `STEADY_RUNS` runs in a row, twice as many after each further return: every
run against
onnxruntime f32 on the original, and the compiled model's products in the precisions the
compile with unknown dims gives them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import openvino as ov
import pytest

import rlx
from rlx import BakeOptions, bake
from rlx.artifact import write_rlx
from rlx.engines import openvino_engine
from rlx.onnx import import_onnx
from tests.baking.fast_models import image_feeds, small_cnn

_PRODUCTS = ("Convolution", "GroupConvolution", "FullyConnected", "MatMul")


def _unknown_dims(folder: Path) -> Path:
    """small_cnn with its input's batch, height and width unknown."""
    model = onnx.load(small_cnn(folder))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for dim, name in zip(dims, ("N", None, "H", "W")):
        if name:
            dim.dim_param = name
    path = folder / "small_cnn_unknown.onnx"
    onnx.save(model, path)
    return path


def _baked(path: Path, profile: str) -> Path:
    options = BakeOptions.from_profile(profile)
    if profile == "fast":
        options = options.replace(calibration=image_feeds(1, 4))
    file, _ = bake(*import_onnx(path), options)
    out = path.with_suffix(f".{profile}.rlx")
    write_rlx(out, file)
    return out


def _cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def _static(compiled: ov.CompiledModel) -> bool:
    """Whether the image input is compiled at one shape (a served weight's dims stay
    unknown: `rlx.engines.openvino_engine._serve_from_map`)."""
    return compiled.input("x").get_partial_shape().is_static


def _products(compiled: ov.CompiledModel) -> Counter:
    info = [op.get_rt_info() for op in compiled.get_runtime_model().get_ordered_ops()]
    return Counter(i["runtimePrecision"].astype(str) for i in info
                   if i["layerType"].astype(str) in _PRODUCTS)


@pytest.mark.parametrize("profile, precision, least", [
    ("exact", "exact", 0.999999), ("fast", "fast", 0.999)])
def test_the_shapes_runs_keep_to_are_compiled_static(tmp_path, profile, precision, least):
    onnx_path = _unknown_dims(tmp_path)
    model = rlx.load(_baked(onnx_path, profile), engine="openvino", precision=precision)
    runner = model.runner
    unknown = runner.compiled
    assert not _static(unknown)
    reference = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    first = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    other = rng.standard_normal((2, 3, 24, 24)).astype(np.float32)
    steady = [(other, k == openvino_engine.STEADY_RUNS - 1)
              for k in range(openvino_engine.STEADY_RUNS)]
    for x, static in [(first, True), (first * 0.5, True), *steady, (other, True),
                      (first, False), (other, False)]:
        got = model.run({"x": x})[0]
        want = reference.run(["probs"], {"x": x})[0]
        assert got.shape == want.shape
        assert _cosine(got, want) >= least
        assert np.array_equal(got.argmax(-1), want.argmax(-1))
        assert _static(runner.compiled) is static
        assert _products(runner.compiled) == _products(unknown)


def test_shapes_that_keep_changing_compile_ever_more_rarely(tmp_path, monkeypatch):
    """Each return to unknown dims doubles the runs in a row that fix shapes again: two
    shapes taking turns in ever longer runs cost compiles that grow with the log of the
    runs, not one per change of shape."""
    compiles = []
    standard = openvino_engine.core().compile_model
    monkeypatch.setattr(openvino_engine.core(), "compile_model",
                        lambda *a, **k: compiles.append(1) or standard(*a, **k), raising=False)
    model = rlx.load(_baked(_unknown_dims(tmp_path), "exact"), engine="openvino",
                     precision="exact")
    rng = np.random.default_rng(11)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in [(1, 3, 32, 32), (1, 3, 24, 24)])
    fixed_after = []
    for turn in range(6):
        x, runs = (a, b)[turn % 2], 2 ** (turn + 1)
        compiles.clear()
        for k in range(runs):
            model.run({"x": x})
            if _static(model.runner.compiled) and not fixed_after:
                fixed_after.append(k + 1)
        fixed_after, at = [], fixed_after
        # the first run fixes at once; later turns need 3, 6, 12, ... runs of their shape,
        # and pay two compiles: back to unknown dims, then static for the turn's shape
        assert at == [1 if turn == 0 else openvino_engine.STEADY_RUNS * 2 ** (turn - 1)]
        assert len(compiles) == (1 if turn == 0 else 2)


def test_shapes_the_plugin_refuses_keep_unknown_dims(tmp_path, monkeypatch):
    def refuse(self, shapes):
        raise RuntimeError("Exception from src/core: shapes refused")

    monkeypatch.setattr(openvino_engine.OpenVinoRunner, "fixed_model", refuse)
    onnx_path = _unknown_dims(tmp_path)
    model = rlx.load(_baked(onnx_path, "exact"), engine="openvino", precision="exact")
    reference = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)
    for _ in range(openvino_engine.STEADY_RUNS + 1):
        got = model.run({"x": x})[0]
        assert _cosine(got, reference.run(["probs"], {"x": x})[0]) >= 0.999999
        assert not _static(model.runner.compiled)
